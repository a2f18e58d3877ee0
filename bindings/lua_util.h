// The one place bindings meet Lua: the exception bridge every binding function runs behind, the
// userdata helper every Lua-visible type is registered with, option-table readers that reject
// unknown keys, and the per-run state the runner shares with the `config` module.
#pragma once

#include <lua.hpp>
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "bindings/lua_api.h"
#include "host/cli/config.h"

namespace luatune {

// ============================================================================================
// Exception bridge. Functions registered through lt_set_funcs run inside lt_call_protected:
// a C++ exception (luatune::Error, LibTorch's c10::Error, std::exception) is caught, its message
// copied, the catch block left, and only then raised as a Lua error. A UsageError also marks the
// run as a usage error (exit status 2). Lua errors raised inside pass through untouched.

int lt_call_protected(lua_State* L, lua_CFunction fn);
// Sets each function of `funcs` into the table at the top of the stack, wrapped by the bridge.
void lt_set_funcs(lua_State* L, const luaL_Reg* funcs);
// A new module table holding `funcs`, left on the stack.
void lt_new_module(lua_State* L, const luaL_Reg* funcs);

// ============================================================================================
// Userdata. Each Lua-visible C++ type T declares its Lua name once:
//   template <> struct LuaClass<at::Tensor> { static constexpr const char* name = "Tensor"; };
// lt_register_class<T> makes its metatable (__gc, __tostring, __name, methods, release()).

template <class T>
struct LuaClass;

template <class T>
struct LtBox {
  T value;
  bool released = false;
};

std::string lt_metatable_name(const char* class_name);  // "luatune.Tensor"
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

// Creates T's metatable in the registry: methods (plus release) in a table that is both __index
// and the metatable's `methods`, __gc, __tostring through Describe, and any extra metamethods
// (which may replace __index). Leaves the stack as it was.
template <class T, std::string (*Describe)(const T&)>
void lt_register_class(lua_State* L, const luaL_Reg* methods, const luaL_Reg* metamethods = nullptr) {
  luaL_newmetatable(L, lt_metatable_name(LuaClass<T>::name).c_str());
  lua_pushstring(L, LuaClass<T>::name);
  lua_setfield(L, -2, "__name");
  lua_pushcfunction(L, lt_gc<T>);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, (lt_tostring<T, Describe>));
  lua_setfield(L, -2, "__tostring");
  lua_newtable(L);  // methods
  lt_set_funcs(L, methods);
  lua_pushcfunction(L, lt_release<T>);
  lua_setfield(L, -2, "release");
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "__index");
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "methods");
  if (metamethods) {
    lua_pushvalue(L, -2);
    lt_set_funcs(L, metamethods);
    lua_pop(L, 1);
  }
  lua_pop(L, 2);  // the metatable stays in the registry
}

// ============================================================================================
// Arguments and option tables

const char* lt_fname(lua_State* L);  // the name of the running Lua-called function, for messages
// The option table at idx against its declaration in bindings/lua_api.yaml (lt_api("lora.apply"),
// lt_api_table("DataOpts")): fails naming the bad key and the valid ones when it has a key not
// declared, and naming the key, the type expected and the type got when a present value is not of
// its declared type (lt_type_is_scalar types only). Returns whether there is a table to read: none
// or nil at idx passes and returns false, anything else but a table fails.
bool lt_check_options(lua_State* L, int idx, const LtFunc& f);
bool lt_check_options(lua_State* L, int idx, const LtTable& t);
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
double lt_opt_number(lua_State* L, int idx, const char* key, double def);
// The largest integer a Lua number (a double) holds exactly: 2^53.
constexpr int64_t kLuaMaxExactInt = 9007199254740992;
// An integer option in [lo, hi]: "option 'steps' expects an integer between 0 and
// 9007199254740992, got 1e+300" instead of a cast that wraps 1e300 into a negative count.
int64_t lt_opt_int(lua_State* L, int idx, const char* key, int64_t def, int64_t lo = -kLuaMaxExactInt,
                   int64_t hi = kLuaMaxExactInt);
bool lt_opt_bool(lua_State* L, int idx, const char* key, bool def);
std::string lt_opt_string(lua_State* L, int idx, const char* key, const std::string& def);
int64_t lt_check_int(lua_State* L, int idx);  // a number that is a whole integer
bool lt_is_list(lua_State* L, int idx);       // a table whose keys are exactly 1..n (n may be 0)
// t[key] = v for the table at the top of the stack (the result tables bindings return).
void lt_set_number(lua_State* L, const char* key, double v);
void lt_set_bool(lua_State* L, const char* key, bool v);
void lt_set_string(lua_State* L, const char* key, const std::string& v);
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
  ConfigValue resolved;  // the resolved config, for metric sinks
  int sweeps_run = 0;    // sweep.run calls (`runner sweep FILE` fails when FILE made none)
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
