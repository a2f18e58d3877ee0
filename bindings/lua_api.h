// The Lua API declared once, as data: bindings/lua_api.yaml declares every module, class, function
// and option table the bindings register with Lua. The build embeds that file in the runner; it is
// parsed once, on first use, into the structs below. A binding looks its declaration up by full name
// (lt_check_options(L, 2, lt_api("lora.apply"))), and `runner api` writes types/luatune.d.lua
// (lua-language-server annotations) and the option tables of docs/lua_api.md from the same data, so
// code, editor types and docs cannot drift apart. `runner api --check` also opens every module and
// fails when one registers a function the file does not declare, or the file declares one that no
// module registers.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace luatune {

// ============================================================================================
// Declarations (the fields are those of bindings/lua_api.yaml)

// One key of an option table. `type` is a lua-language-server type: "integer", "number",
// "boolean", "string", "table", "string|string[]", "\"nf4\"|\"fp4\"", a class ("Model", "Tensor",
// an option table's class), "fun(...)" or "any"; lt_check_options checks present keys against it.
struct LtOpt {
  std::string name;  // "[string]" declares an open table: any other key is accepted (not checked)
  std::string type;
  std::string def;  // the default as Lua text ("16", "\"cpu\""); "" when absent or computed; "required"
  std::string doc;  // one line
};

// An option table more than one function takes, or one nested in another's key.
struct LtTable {
  std::string cls;  // its lua-language-server class: "DataOpts"
  std::vector<LtOpt> keys;
};

// One Lua function. `params` is a lua-language-server parameter list, "model: Model, opts?: Opts",
// where the type `Opts` stands for this function's option table (class <Module><Name>Opts, or the
// shared table's class). `returns` holds "type name # doc" entries separated by ";".
struct LtFunc {
  std::string module;  // "lora"; a class name ("Model") for a method
  std::string name;
  std::string params;
  std::string returns;
  std::string doc;                  // one line
  std::vector<LtOpt> options;       // the option table's keys (none: no option table)
  const LtTable* shared = nullptr;  // or a table declared apart, in some module's `tables`
  std::string self_class;           // also a method of this class: torch.exp(t) is t:exp()
  int line = 0;                     // where the data file declares it
};

// A Lua-visible userdata class (its methods are LtFuncs whose module is the class name).
struct LtClass {
  std::string name;
  std::string doc;
};

// What one module exposes: its functions, the classes it registers, and the option tables declared
// apart from a function (shared or nested).
struct LtModuleApi {
  std::string module;
  std::string doc;
  std::vector<LtFunc> funcs;
  std::vector<LtClass> classes;
  std::vector<LtTable> tables;
};

// A parsed data file. Not copyable: LtFunc::shared and the indexes point into `modules`.
struct LtApi {
  std::string path;                              // the file, as errors name it: "bindings/lua_api.yaml"
  std::vector<LtModuleApi> modules;              // in the order the runner opens them
  std::map<std::string, const LtFunc*> funcs;    // by full name
  std::map<std::string, const LtTable*> tables;  // by class
  LtApi() = default;
  LtApi(LtApi&&) = default;
  LtApi(const LtApi&) = delete;
  LtApi& operator=(const LtApi&) = delete;
};

// The option table's keys of `f` (its own or the shared ones) and that table's class name.
const std::vector<LtOpt>& lt_func_options(const LtFunc& f);
std::string lt_func_options_class(const LtFunc& f);
// "lora.apply", "Model:generate"
std::string lt_func_full_name(const LtFunc& f);
// `s` split at each `sep` outside brackets ((), {}, <>, []) and double quotes, each piece trimmed:
// "string|fun(a: integer|nil)" at '|' -> "string", "fun(a: integer|nil)"; no trailing empty piece.
std::vector<std::string> lt_split_top(const std::string& s, char sep);

// ============================================================================================
// The registry: bindings/lua_api.yaml as embedded at build time

// Parsed on the first call (the build has parsed the same text: `runner api --parse`, so a malformed
// file fails the build, on one line naming the file, the line and what was expected).
const LtApi& lt_api_registry();
// The declaration of "lora.apply" or "Model:generate"; fails naming it when the file has none.
const LtFunc& lt_api(const std::string& full_name);
// The table declared apart as `cls` ("CreationOpts"); fails naming it when the file has none.
const LtTable& lt_api_table(const std::string& cls);
// Parses a data file's text; `path` names it in errors.
LtApi lt_api_parse(const std::string& text, const std::string& path);

// Inconsistencies, one line each (empty when sound): within the declarations (duplicate names,
// unknown classes, a shared table of sweep.run that differs from host/sweep's list, ...), and
// against what the modules register in a fresh Lua state (a function registered and not declared,
// or declared and not registered).
std::vector<std::string> lt_api_problems(const LtApi& api);
// types/luatune.d.lua: a lua-language-server meta file.
std::string lt_api_lua_types(const LtApi& api);
// `doc` with every `<!-- options:NAME -->` ... `<!-- /options -->` block regenerated; `problems`
// gets a line per block naming no function with options, and per option table no block shows.
std::string lt_api_refresh_markdown(const LtApi& api, const std::string& doc,
                                    std::vector<std::string>* problems);

// `runner api --check|--write [ROOT] | --lua-types | --markdown | --parse [--spec FILE]` (a
// developer tool, not in --help): args are those after "api"; --spec reads FILE instead of the
// embedded data file; --parse only parses it (the build runs it: a malformed file fails the build).
// Returns the exit status.
int lt_api_main(const std::vector<std::string>& args);

}  // namespace luatune
