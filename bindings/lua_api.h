// The Lua API declared once, as data: bindings/api/*.yaml (one file per module, and modules.yaml
// listing them in order) declare every module, class, function and option table the bindings
// register with Lua. The build embeds those files in the runner; they are parsed once, on first use, into the
// structs below. A binding looks its declaration up by full name (lt_check_options(L, 2,
// lt_api("lora.apply"))), and `runner api` writes types/luatune.d.lua (lua-language-server annotations) and
// the option tables of docs/lua_api.md from the same data, so code, editor types and docs cannot drift apart.
// `runner api --check` also opens every module and fails when one registers a function the files do not
// declare, or they declare one that no module registers.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace luatune {

// ============================================================================================
// Declarations (the fields are those of bindings/api/modules.yaml)

// One key of an option table. `type` is a lua-language-server type: "integer", "number",
// "boolean", "string", "table", "string|string[]", "\"nf4\"|\"fp4\"", a class ("Model", "Tensor",
// an option table's class), "fun(...)" or "any"; lt_check_options checks present keys against it.
struct LtOpt {
  std::string name;  // "[string]" declares an open table: any other key is accepted (not checked)
  std::string type;
  std::string def;  // the default as Lua text ("16", "\"cpu\""); "" when absent or computed; "required"
  std::string doc;  // one line
  // An old name kept for a release: the declared name it stands for ("learning_rate", or "lora.r" for
  // the key r of the table option lora). It has no type, default or doc of its own; lt_check_options
  // reads it as that name and prints a one-line deprecation warning, once per name per process.
  std::string renamed;
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
  std::string file;                 // where a data file declares it: "bindings/api/lora.yaml"
  int line = 0;
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

// A data file: its path, as errors name it ("bindings/api/lora.yaml"), and its text.
struct LtApiFile {
  std::string path;
  std::string text;
};

// The parsed data files. Not copyable: LtFunc::shared and the indexes point into `modules`.
struct LtApi {
  std::string path;                              // the files, as messages name them: "bindings/api"
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
// The registry: bindings/api/*.yaml as embedded at build time

// Parsed on the first call (the build has parsed the same texts: `runner api --parse`, so a malformed
// file fails the build, on one line naming the file, the line and what was expected).
const LtApi& lt_api_registry();
// The declaration of "lora.apply" or "Model:generate"; fails naming it when the file has none.
const LtFunc& lt_api(const std::string& full_name);
// The table declared apart as `cls` ("CreationOpts"); fails naming it when the file has none.
const LtTable& lt_api_table(const std::string& cls);
// Parses the data files, each named in errors by its own path; `path` names them all ("bindings/api").
// One file's root is the list of modules in order (modules.yaml), the others' MODULE: {...}.
LtApi lt_api_parse(const std::vector<LtApiFile>& files, const std::string& path);
// Every DIR/*.yaml, read, in name order.
std::vector<LtApiFile> lt_api_read_dir(const std::string& dir);

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

// `runner api --check|--write [ROOT] | --lua-types | --markdown | --parse [--spec DIR]` (a
// developer tool, not in --help): args are those after "api"; --spec reads DIR/*.yaml instead of
// the embedded data files; --parse only parses them (the build runs it: a malformed file fails the build).
// Returns the exit status.
int lt_api_main(const std::vector<std::string>& args);

}  // namespace luatune
