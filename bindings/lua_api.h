// The Lua API declared once: each binding file declares every function it exposes (module
// functions and class methods) as an LtFunc next to the function, with its option table. The
// option check reads that declaration (lt_check_options(L, 2, kLoraApply)), and `runner api`
// writes types/luatune.d.lua (lua-language-server annotations) and the option tables of
// docs/lua_api.md from the same declarations, so code, editor types and docs cannot drift apart.
#pragma once

#include <string>
#include <vector>

namespace luatune {

// ============================================================================================
// Declarations

// One key of an option table. `type` is a lua-language-server type: "integer", "number",
// "boolean", "string", "table", "string|string[]", "\"nf4\"|\"fp4\"", a class ("Model", "Tensor",
// an option table's class), "fun(...)" or "any"; lt_check_options checks present keys against it.
struct LtOpt {
  const char* name;  // "[string]" declares an open table: any other key is accepted (not checked)
  const char* type;
  const char* def;  // the default as Lua text ("16", "\"cpu\""); "" when absent or computed; "required"
  const char* doc;  // one line
};

// An option table more than one function takes, or one nested in another's key.
struct LtTable {
  const char* cls;  // its lua-language-server class: "DataOpts"
  std::vector<LtOpt> keys;
};

// One Lua function. `params` is a lua-language-server parameter list, "model: Model, opts?: Opts",
// where the type `Opts` stands for this function's option table (class <Module><Name>Opts, or the
// shared table's class). `returns` holds "type name # doc" entries separated by ";".
struct LtFunc {
  const char* module;  // "lora"; a class name ("Model") for a method
  const char* name;
  const char* params;
  const char* returns;
  const char* doc;                   // one line
  std::vector<LtOpt> options = {};   // the option table's keys (none: no option table)
  const LtTable* shared = nullptr;   // or a table declared once for several functions
  const char* self_class = nullptr;  // also a method of this class: torch.exp(t) is t:exp()
};

// A Lua-visible userdata class (its methods are LtFuncs whose module is the class name).
struct LtClass {
  const char* name;
  const char* doc;
};

// What one binding file exposes: a module's functions, the classes it registers, and the option
// tables declared apart from a function (shared or nested).
struct LtModuleApi {
  const char* module;
  const char* doc;
  std::vector<LtFunc> funcs;
  std::vector<LtClass> classes = {};
  std::vector<const LtTable*> tables = {};
};

// The option table's keys of `f` (its own or the shared ones) and that table's class name.
const std::vector<LtOpt>& lt_func_options(const LtFunc& f);
std::string lt_func_options_class(const LtFunc& f);
// "lora.apply", "Model:generate"
std::string lt_func_full_name(const LtFunc& f);

// ============================================================================================
// The registry and what is generated from it

// Every module's declarations, in the order runner/recipe_run.cpp opens the modules.
const std::vector<LtModuleApi>& lt_api_registry();
// Inconsistencies in the registry (duplicate names, unknown classes, a shared table of sweep.run
// that differs from host/sweep's list, ...), one line each; empty when it is sound.
std::vector<std::string> lt_api_problems();
// types/luatune.d.lua: a lua-language-server meta file.
std::string lt_api_lua_types();
// `doc` with every `<!-- options:NAME -->` ... `<!-- /options -->` block regenerated; `problems`
// gets a line per block naming no function with options, and per option table no block shows.
std::string lt_api_refresh_markdown(const std::string& doc, std::vector<std::string>* problems);

// `runner api --check|--write|--lua-types|--markdown [ROOT]` (a developer tool, not in --help):
// args are those after "api". Returns the exit status.
int lt_api_main(const std::vector<std::string>& args);

}  // namespace luatune
