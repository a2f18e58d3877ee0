// The one place bindings meet Lua: how a binding function registers itself under its Lua name, the
// exception bridge every one runs behind, the userdata helper every Lua-visible type is registered
// with, option-table readers that reject unknown keys, and the per-run state the runner shares with
// the `config` module.
//
// Adding a Lua function: declare it in bindings/api/<module>.yaml ("lora.merge", "Model:generate"),
// write it in bindings/<module>.cpp as l_<module>_<verb>, and register it on the line after its
// closing brace under the same name:
//
//   int l_lora_merge(lua_State* L) {
//     lora_merge(lt_check_model(L, 1));
//     return 0;
//   }
//   LT_REGISTER("lora.merge", l_lora_merge);
//
// That is all: opening the module builds its table from what was registered for it (lt_open_module),
// and `runner api --check` fails, naming the file and line, on a name registered and not declared,
// or declared and not registered. A class registers the same way, beside its describe function:
// LT_REGISTER_CLASS("models", ModelPtr, describe_model); anything else a module does when it opens
// is an LT_ON_OPEN step (torch's operators, metrics' global print).
#pragma once

#include <lua.hpp>
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <deque>
#include <initializer_list>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bindings/lua_api.h"
#include "host/cli/config.h"
#include "host/core/files.h"

namespace luatune {

// ============================================================================================
// Registration. LT_REGISTER("owner.name" or "Owner:name", fn) at namespace scope: "lora.merge" is a
// function of the module lora, "Model:generate" a method of the class Model, and a name that starts
// with "__" a metamethod ("Tensor:__eq"; "config.__call" makes the module table callable). One
// function may stand under several names (l_data_split is data.split and Dataset:split).
//
// Each LT_REGISTER (LT_ON_OPEN, LT_REGISTER_CLASS) is a static object whose constructor appends to
// one list, a function-local static, so the order files initialise in does not matter; the lists
// are read only once main runs. No code names a module's functions, so the bindings are linked as
// an object library (CMakeLists.txt): a static library would drop every module file.

struct LtRegistration {
  std::string full_name;  // as registered: "lora.merge", "Model:generate"
  std::string owner;      // "lora", "Model"
  std::string name;       // "merge", "generate"
  lua_CFunction fn;
  std::string file;  // where the LT_REGISTER stands: "bindings/lora.cpp"
  int line;
};

// A step of opening a module, after its functions are set (the module's table at the top of the
// stack): registering a class, setting a global.
struct LtOpenStep {
  std::string module;
  void (*fn)(lua_State* L);
  std::string file;
  int line;
};

// Every LT_REGISTER and every open step in the program (deques: the entries never move).
const std::deque<LtRegistration>& lt_registrations();
const std::deque<LtOpenStep>& lt_open_steps();
// The registration behind the function at idx when lt_open_module or lt_register_class set it
// (under that name or another), else nullptr.
const LtRegistration* lt_registration_of(lua_State* L, int idx);

struct LtRegistrar {
  LtRegistrar(const char* full_name, lua_CFunction fn, const char* file, int line);
  LtRegistrar(const char* module, void (*open_step)(lua_State* L), const char* file, int line);
};
#define LT_REGISTER_JOIN2(a, b) a##b
#define LT_REGISTER_JOIN(a, b) LT_REGISTER_JOIN2(a, b)
#define LT_REGISTER(full_name, fn) \
  const ::luatune::LtRegistrar LT_REGISTER_JOIN(lt_registrar_, __LINE__)(full_name, fn, __FILE__, __LINE__)
// Runs fn(L) each time `module` opens, in the order of the file.
#define LT_ON_OPEN(module, fn) LT_REGISTER(module, fn)
// Registers the userdata class Type (lt_register_class) each time `module` opens.
#define LT_REGISTER_CLASS(module, Type, Describe) \
  LT_ON_OPEN(module, (::luatune::lt_register_class<Type, Describe>))

// Sets the functions registered for `owner` into the table at the top of the stack, each behind the
// exception bridge: its "__" names when `metamethods`, else the others.
void lt_set_registered(lua_State* L, const std::string& owner, bool metamethods);
// The table of module `module`, left on the stack: the functions registered for it, a metatable
// holding its "__" ones when it has any, then its open steps. Returns 1.
int lt_open_module(lua_State* L, const char* module);

// ============================================================================================
// Exception bridge. Registered functions run inside lt_call_protected: a C++ exception
// (luatune::Error, LibTorch's c10::Error, std::exception) is caught, its message copied, the catch
// block left, and only then raised as a Lua error. A UsageError also marks the run as a usage error
// (exit status 2); any other luatune::Error but InternalError (and an allocation failure) is the
// user's mistake and is recorded as such, so the runner prints it without a traceback. Lua errors
// raised inside pass through untouched.

int lt_call_protected(lua_State* L, lua_CFunction fn);

// ============================================================================================
// Userdata. Each Lua-visible C++ type T declares its Lua name once, LT_CLASS(at::Tensor, "Tensor");
// lt_register_class<T> makes its metatable (__gc, __tostring, __name, methods, release()).

template <class T>
struct LuaClass;

// In namespace luatune: the specialisation LuaClass<Type> naming it `lua_name` in Lua.
#define LT_CLASS(Type, lua_name)                  \
  template <>                                     \
  struct LuaClass<Type> {                         \
    static constexpr const char* name = lua_name; \
  }

template <class T>
struct LtBox {
  T value;
  bool released = false;
};

std::string lt_metatable_name(const char* class_name);  // "luatune.Tensor"
// A value's type as errors name it: a luatune class (its metatable's __name) or Lua's type name.
std::string lt_typename(lua_State* L, int idx);
// "bad argument #2 to 'matmul' (Tensor expected, got number)"
[[noreturn]] void lt_type_error(lua_State* L, int idx, const char* expected);

template <class T>
T& lt_push(lua_State* L, T value) {
  void* mem = lua_newuserdata(L, sizeof(LtBox<T>));
  auto* box = new (mem) LtBox<T>{std::move(value), false};
  luaL_getmetatable(L, lt_metatable_name(LuaClass<T>::name).c_str());
  lua_setmetatable(L, -2);
  return box->value;
}

// The box at idx when it holds a T (released or not), else nullptr.
template <class T>
LtBox<T>* lt_test_box(lua_State* L, int idx) {
  void* p = lua_touserdata(L, idx);
  if (!p || !lua_getmetatable(L, idx)) return nullptr;
  luaL_getmetatable(L, lt_metatable_name(LuaClass<T>::name).c_str());
  bool same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same ? static_cast<LtBox<T>*>(p) : nullptr;
}

template <class T>
T* lt_test(lua_State* L, int idx) {
  LtBox<T>* box = lt_test_box<T>(L, idx);
  return box && !box->released ? &box->value : nullptr;
}

template <class T>
T& lt_check(lua_State* L, int idx) {
  LtBox<T>* box = lt_test_box<T>(L, idx);
  if (!box) lt_type_error(L, idx, LuaClass<T>::name);
  if (box->released) {
    std::string msg = std::string(LuaClass<T>::name) + " was released";
    luaL_argerror(L, idx, msg.c_str());
  }
  return box->value;
}

template <class T>
int lt_gc(lua_State* L) {
  if (auto* box = lt_test_box<T>(L, 1)) box->~LtBox<T>();
  return 0;
}

// obj:release(): frees what the object holds now (GPU memory included); later use is an error.
template <class T>
int lt_release(lua_State* L) {
  LtBox<T>* box = lt_test_box<T>(L, 1);
  if (!box) lt_type_error(L, 1, LuaClass<T>::name);
  if (!box->released) {
    box->value = T();
    box->released = true;
  }
  return 0;
}

template <class T, std::string (*Describe)(const T&)>
int lt_tostring(lua_State* L) {
  LtBox<T>* box = lt_test_box<T>(L, 1);
  if (!box) lt_type_error(L, 1, LuaClass<T>::name);
  std::string s = box->released ? std::string(LuaClass<T>::name) + "(released)" : Describe(box->value);
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}

// Creates T's metatable in the registry: the methods registered for T (plus release) in a table that
// is both __index and the metatable's `methods`, __gc, __tostring through Describe, and the
// metamethods registered for T (which may replace __index). Leaves the stack as it was.
template <class T, std::string (*Describe)(const T&)>
void lt_register_class(lua_State* L) {
  luaL_newmetatable(L, lt_metatable_name(LuaClass<T>::name).c_str());
  lua_pushstring(L, LuaClass<T>::name);
  lua_setfield(L, -2, "__name");
  lua_pushcfunction(L, lt_gc<T>);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, (lt_tostring<T, Describe>));
  lua_setfield(L, -2, "__tostring");
  lua_newtable(L);  // methods
  lt_set_registered(L, LuaClass<T>::name, false);
  lua_pushcfunction(L, lt_release<T>);
  lua_setfield(L, -2, "release");
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "__index");
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "methods");
  lua_pushvalue(L, -2);
  lt_set_registered(L, LuaClass<T>::name, true);
  lua_pop(L, 3);  // the metatable stays in the registry
}

// ============================================================================================
// Arguments and option tables

const char* lt_fname(lua_State* L);  // the name of the running Lua-called function, for messages
// The option table at idx against its declaration in bindings/api/*.yaml (lt_api("lora.apply"),
// lt_api_table("DataOpts")): fails naming the bad key and the valid ones when it has a key not
// declared, and naming the key, the type expected and the type got when a present value is not of
// its declared type (lt_type_is_scalar types only). An old name the declaration keeps (renamed:) is
// read as its new one, with a one-line warning once per process; the table at idx is then replaced by
// a plain copy, as it is when it has a metatable (a config{} table). Returns whether there is a table
// to read: none or nil at idx passes and returns false, anything else but a table fails.
bool lt_check_options(lua_State* L, int idx, const LtFunc& f);
bool lt_check_options(lua_State* L, int idx, const LtTable& t);
// The option tables at idx and idx + 1, both optional and both checked, as one at idx: the second's
// keys over the first's (lora.apply(model, cfg.lora, { seed = cfg.seed })). Returns whether there is one.
bool lt_check_options_over(lua_State* L, int idx, const LtFunc& f);
// The same for an option table the function requires: none or nil at idx fails as well.
void lt_check_required_options(lua_State* L, int idx, const LtFunc& f);
// The keys only, for a function whose host code checks the values with messages of its own.
void lt_check_option_names(lua_State* L, int idx, const LtFunc& f);
// Whether the value at idx is of the lua-language-server type `type` ("integer", "string|string[]",
// "Model", ...); types it cannot tell (table shapes, "any") accept anything of the right Lua type.
bool lt_type_matches(lua_State* L, int idx, const std::string& type);
// Whether every alternative of `type` is a number, boolean, string or class (what the option check
// checks; lists and tables are left to the code that reads them).
bool lt_type_is_scalar(const std::string& type);
// What a type reads as in a message: "integer" -> "an integer", "string|string[]" -> "a string or a list".
std::string lt_type_describe(const std::string& type);
bool lt_has_field(lua_State* L, int idx, const char* key);
// The readers: option `key` of the table at idx, or `def` when it has none. When a checked table's
// declaration gives `key` a literal default and `def` differs from it, they fail naming both
// (bindings/lua_options.cpp, check_default): the C++ default and bindings/api/*.yaml's stay one value.
double lt_opt_number(lua_State* L, int idx, const char* key, double def);
// The largest integer a Lua number (a double) holds exactly: 2^53.
constexpr int64_t kLuaMaxExactInt = 9007199254740992;
// An integer option in [lo, hi]: "option 'steps' expects an integer between 0 and
// 9007199254740992, got 1e+300" instead of a cast that wraps 1e300 into a negative count.
int64_t lt_opt_int(lua_State* L, int idx, const char* key, int64_t def, int64_t lo = -kLuaMaxExactInt,
                   int64_t hi = kLuaMaxExactInt);
bool lt_opt_bool(lua_State* L, int idx, const char* key, bool def);
std::string lt_opt_string(lua_State* L, int idx, const char* key, const std::string& def);
// The same check, reading nothing: for tables host code reads itself (sweep.run's, as a config),
// whose defaults (a number, boolean or string each) the binding holds against the declaration.
void lt_check_defaults(lua_State* L, int idx,
                       const std::vector<std::pair<std::string, ConfigValue>>& defaults);
// Option `key` of the table at idx as strings (a string is a list of one): false when the key is
// nil, leaving *out alone. Anything else fails "<what>: <key> must be a string or a list of strings".
bool lt_opt_strings(lua_State* L, int idx, const char* key, const std::string& what,
                    std::vector<std::string>* out);
int64_t lt_check_int(lua_State* L, int idx);  // a number that is a whole integer
bool lt_is_list(lua_State* L, int idx);       // a table whose keys are exactly 1..n (n may be 0)
// t[key] = v for the table at the top of the stack (the result tables bindings return).
void lt_set_number(lua_State* L, const char* key, double v);
void lt_set_bool(lua_State* L, const char* key, bool v);
void lt_set_string(lua_State* L, const char* key, const std::string& v);
// A new table of named numbers, left on the stack: the counts and sizes bindings return
// (lt_push_numbers(L, {{"rows", s.rows}, {"tokens", s.tokens}})).
void lt_push_numbers(lua_State* L, std::initializer_list<std::pair<const char*, double>> fields);
// Pushes a Lua list (1-based) of v's numbers or strings: the token ids, sizes and names bindings return.
template <class T>
void lt_push_list(lua_State* L, const std::vector<T>& v) {
  lua_createtable(L, static_cast<int>(v.size()), 0);
  for (size_t i = 0; i < v.size(); i++) {
    if constexpr (std::is_same_v<T, std::string>)
      lua_pushlstring(L, v[i].data(), v[i].size());
    else
      lua_pushnumber(L, static_cast<lua_Number>(v[i]));
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
}
template <class T>
void lt_set_list(lua_State* L, const char* key, const std::vector<T>& v) {
  lt_push_list(L, v);
  lua_setfield(L, -2, key);
}
// Pushes a JSON value as Lua: null -> nil, arrays -> lists, objects -> tables.
void lt_push_json(lua_State* L, const nlohmann::json& j);
// The Lua value at idx as JSON, for host code that reads JSON (records, GPU catalogs, plans, report
// documents): nil -> null; booleans; strings, byte for byte; numbers, the whole ones (number_is_whole)
// as integers so that 3 is written 3, not 3.0; a table with keys exactly 1..n -> an array; a table
// with string keys -> an object. An empty table is an empty object {}: Lua cannot tell an empty list
// from an empty table, and the values converted here are tables of named fields at their top
// (lua-cjson decides the same way). `what` names the value with its function ("hw.report: doc"); an
// error names the path inside it too, on one line: NaN or an infinity ("hw.report: doc.rows[2].mfu is
// nan; JSON has no NaN or infinity"), a table nested deeper than kJsonMaxDepth (a table that
// contains itself), a table that mixes list items and named keys or has holes, a function,
// userdata or thread.
nlohmann::json lt_to_json(lua_State* L, int idx, const std::string& what);

// Lua value <-> ConfigValue (scalars, lists, tables); `what` names the value in errors. Tables
// nested deeper than kLuaMaxTableDepth (a table that contains itself, say) fail naming the path.
constexpr int kLuaMaxTableDepth = 128;
ConfigValue lt_to_config(lua_State* L, int idx, const std::string& what);
void lt_push_config(lua_State* L, const ConfigValue& v);

// ============================================================================================
// Per-run state shared by the runner and the `config` module.

struct RunState {
  std::string recipe;                     // path of the recipe being run
  std::vector<ConfigOverride> overrides;  // from --config files, then key=value arguments
  bool validate_only = false;             // `runner validate`/`plan`/`help`: stop after config{} resolves
  bool check_paths = true;                // config{} checks that paths exist (not for `runner plan`)
  bool describe_only = false;             // `runner help RECIPE`: resolve silently, check nothing
  bool config_resolved = false;
  // The message of the last usage/config error raised (exit 2 when the run fails with exactly it;
  // kept as text so a usage error a recipe caught with pcall does not mark a later failure).
  std::string usage_message;
  // The same for the last user error a binding raised (a luatune::Error: bad data, a wrong path, a
  // value found wrong at run time), position included: the runner prints it without a traceback.
  std::string user_message;
  ConfigValue resolved;  // the resolved config, for metric sinks
  // output_dir as config{} found it just before writing run.json there (bindings/config.cpp): a run
  // that fails having written nothing else into it gets it back as it was (runner/recipe_run.cpp).
  struct {
    std::string dir;  // "" when config{} claimed none (resume=true, not rank 0, no output_dir key)
    bool existed = false;
    DirListing before;
    bool had_run_json = false;
    std::string run_json;  // the run.json it held before
  } output_dir_claimed;
  int sweeps_run = 0;  // sweep.run calls (`runner sweep FILE` fails when FILE made none)
  // The signal (SIGINT, SIGTERM) a binding stopped on while it held the signals itself (sweep.run
  // waiting on its trials): the run then exits 130 like one the runner's own handler stopped.
  int interrupted_by = 0;
};

RunState& lt_run_state(lua_State* L);
// The light userdata raised as the error value when validate mode stops after config{}.
void* lt_validate_done_token();
// The light userdata raised when a SIGINT/SIGTERM stopped the recipe at a safe point (host/train/stop.h).
void* lt_stop_token();
// Seeds every process-global generator a recipe reaches: LibTorch's CPU and CUDA ones
// (host/core/seed.h: seed_torch) and Lua's math.random. The runner calls it when the state opens
// and when config{} resolves (docs/reproducibility.md).
void lt_seed_all(lua_State* L, uint64_t seed);

}  // namespace luatune
