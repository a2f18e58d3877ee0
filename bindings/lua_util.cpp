// Exception bridge, registration, userdata, arguments, config values and run state (see lua_util.h);
// option tables are bindings/lua_options.cpp.
#include "bindings/lua_util.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "bindings/modules.h"
#include "host/core/error.h"
#include "host/core/json.h"
#include "host/core/number.h"
#include "host/core/seed.h"
#include "host/core/strings.h"
#include "host/dist/dist.h"
#include "host/train/stop.h"

namespace luatune {

// ============================================================================================
// Exception bridge

int lt_call_protected(lua_State* L, lua_CFunction fn) {
  std::string msg;
  bool usage = false, stop = false, user = false;
  try {
    return fn(L);
  } catch (const StopRequested&) {  // a stop that saved: the runner ends the run quietly
    stop = true;
  } catch (const UsageError& e) {
    msg = e.what();
    usage = true;
  } catch (const InternalError& e) {  // a luatune bug: the runner shows the traceback
    msg = e.what();
  } catch (const Error& e) {  // the user's data, paths or values: one line is the whole story
    msg = e.what();
    user = true;
  } catch (const std::bad_alloc&) {
    // An allocation no binding named (those that can, do: host/core/error.h rethrow_out_of_memory).
    msg = std::string(lt_fname(L)) + ": out of memory (std::bad_alloc)";
    user = true;
  } catch (const c10::Error& e) {
    // LibTorch's message without its C++ backtrace: what a recipe author can act on.
    msg = e.what_without_backtrace();
    size_t cut = msg.find("\nException raised from");
    if (cut != std::string::npos) msg.resize(cut);
    user = error_is_out_of_memory(e);  // CUDA or CPU out of memory: the run's sizes, not a bug
  } catch (const std::exception& e) {
    msg = e.what();
  }
  // Out of the catch block: raising a Lua error from inside it would unwind through it.
  if (stop) {
    lua_pushlightuserdata(L, lt_stop_token());
    return lua_error(L);
  }
  if (usage) {  // config and usage errors read best without a recipe position in front
    lt_run_state(L).usage_message = msg;
    lua_pushlstring(L, msg.data(), msg.size());
    return lua_error(L);
  }
  luaL_where(L, 1);  // the calling recipe's file:line, as luaL_error puts it
  lua_pushlstring(L, msg.data(), msg.size());
  lua_concat(L, 2);
  if (user) lt_run_state(L).user_message = lua_tostring(L, -1);
  return lua_error(L);
}

// ============================================================================================
// Registration

static std::deque<LtRegistration>& registrations() {
  static std::deque<LtRegistration> all;
  return all;
}

static std::deque<LtOpenStep>& open_steps() {
  static std::deque<LtOpenStep> all;
  return all;
}

const std::deque<LtRegistration>& lt_registrations() {
  return registrations();
}

const std::deque<LtOpenStep>& lt_open_steps() {
  return open_steps();
}

// The compiler's path of a source file, absolute under CMake, from bindings/ on.
static std::string source_path(const char* file) {
  std::string path = file;
  const size_t at = path.rfind("bindings/");
  return at == std::string::npos ? path : path.substr(at);
}

LtRegistrar::LtRegistrar(const char* full_name, lua_CFunction fn, const char* file, int line) {
  // "lora.merge" -> lora, merge; a name with neither separator registers for no owner, and
  // `runner api --check` names it.
  const std::string full = full_name;
  const size_t sep = full.find_first_of(".:");
  registrations().push_back({full, sep == std::string::npos ? "" : full.substr(0, sep),
                             sep == std::string::npos ? full : full.substr(sep + 1), fn, source_path(file),
                             line});
}

LtRegistrar::LtRegistrar(const char* module, void (*open_step)(lua_State* L), const char* file, int line) {
  open_steps().push_back({module, open_step, source_path(file), line});
}

// A registered function behind the bridge: the closure's upvalue is its registration.
static int lt_trampoline(lua_State* L) {
  auto* r = static_cast<const LtRegistration*>(lua_touserdata(L, lua_upvalueindex(1)));
  return lt_call_protected(L, r->fn);
}

const LtRegistration* lt_registration_of(lua_State* L, int idx) {
  if (lua_tocfunction(L, idx) != lt_trampoline || !lua_getupvalue(L, idx, 1)) return nullptr;
  auto* r = static_cast<const LtRegistration*>(lua_touserdata(L, -1));
  lua_pop(L, 1);
  return r;
}

void lt_set_registered(lua_State* L, const std::string& owner, bool metamethods) {
  for (const LtRegistration& r : registrations()) {
    if (r.owner != owner || str_starts_with(r.name, "__") != metamethods) continue;
    lua_pushlightuserdata(L, const_cast<LtRegistration*>(&r));
    lua_pushcclosure(L, lt_trampoline, 1);
    lua_setfield(L, -2, r.name.c_str());
  }
}

int lt_open_module(lua_State* L, const char* module) {
  lua_newtable(L);
  lt_set_registered(L, module, false);
  lua_newtable(L);  // the metatable, kept only when the module has metamethods (config { ... })
  lt_set_registered(L, module, true);
  lua_pushnil(L);
  if (lua_next(L, -2)) {
    lua_pop(L, 2);
    lua_setmetatable(L, -2);
  } else {
    lua_pop(L, 1);
  }
  for (const LtOpenStep& step : open_steps())
    if (step.module == module) step.fn(L);
  return 1;
}

const std::vector<std::string>& lt_modules() {
  static const std::vector<std::string> modules = {
      "config", "torch", "train", "tokenizer", "models",  "data",  "metrics", "eval",
      "lora",   "qlora", "prune", "dist",      "distill", "sweep", "hw",      "export",
  };
  return modules;
}

void lt_open_modules(lua_State* L) {
  for (const std::string& name : lt_modules()) {
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "loaded");
    lt_open_module(L, name.c_str());
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, name.c_str());  // package.loaded[name], so require(name) works too
    lua_setglobal(L, name.c_str());
    lua_pop(L, 2);
  }
}

// ============================================================================================
// Userdata

std::string lt_metatable_name(const char* class_name) {
  return std::string("luatune.") + class_name;
}

std::string lt_typename(lua_State* L, int idx) {
  if (lua_getmetatable(L, idx)) {
    lua_getfield(L, -1, "__name");
    std::string name = lua_isstring(L, -1) ? lua_tostring(L, -1) : "";
    lua_pop(L, 2);
    if (!name.empty()) return name;
  }
  return luaL_typename(L, idx);
}

void lt_type_error(lua_State* L, int idx, const char* expected) {
  std::string msg = std::string(expected) + " expected, got " + lt_typename(L, idx);
  luaL_argerror(L, idx, msg.c_str());
  std::abort();  // unreachable: luaL_argerror does not return
}

// ============================================================================================
// Arguments

const char* lt_fname(lua_State* L) {
  lua_Debug ar;
  if (lua_getstack(L, 0, &ar) && lua_getinfo(L, "n", &ar) && ar.name) return ar.name;
  return "?";
}

int64_t lt_check_int(lua_State* L, int idx) {
  double v = luaL_checknumber(L, idx);
  if (!number_is_whole(v)) {
    std::string msg = "integer expected, got " + str_from_number(v);
    luaL_argerror(L, idx, msg.c_str());
  }
  return static_cast<int64_t>(v);
}

bool lt_is_list(lua_State* L, int idx) {
  if (!lua_istable(L, idx)) return false;
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  size_t n = lua_objlen(L, idx), count = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    count++;
    if (lua_type(L, -1) != LUA_TNUMBER) {
      lua_pop(L, 1);
      return false;
    }
  }
  return count == n;
}

// ============================================================================================
// Config values

static ConfigValue to_config(lua_State* L, int idx, const std::string& what, int depth) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  switch (lua_type(L, idx)) {
    case LUA_TNUMBER:
      return ConfigValue::of_number(lua_tonumber(L, idx));
    case LUA_TBOOLEAN:
      return ConfigValue::of_boolean(lua_toboolean(L, idx));
    case LUA_TSTRING:
      return ConfigValue::of_string(lua_tostring(L, idx));
    case LUA_TTABLE:
      break;
    default:
      fail_usage("config: '" + what + "' is a " + luaL_typename(L, idx) +
                 "; config values are numbers, booleans, strings, lists and tables");
  }
  if (depth >= kLuaMaxTableDepth)  // also what a table that contains itself comes to
    fail_usage("config: '" + what.substr(0, 60) + (what.size() > 60 ? "..." : "") +
               "' nests tables deeper than " + std::to_string(kLuaMaxTableDepth) + " levels");
  if (lua_objlen(L, idx) > 0 || lt_is_list(L, idx)) {
    if (!lt_is_list(L, idx))
      fail_usage("config: '" + what + "' mixes list items and named keys; use one or the other");
    std::vector<ConfigValue> items;
    for (size_t i = 1; i <= lua_objlen(L, idx); i++) {
      lua_rawgeti(L, idx, static_cast<int>(i));
      items.push_back(to_config(L, -1, what + "[" + std::to_string(i) + "]", depth + 1));
      lua_pop(L, 1);
    }
    return ConfigValue::of_list(std::move(items));
  }
  ConfigValue t = ConfigValue::of_table();
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING) fail_usage("config: '" + what + "' has a key that is not a string");
    std::string key = lua_tostring(L, -2);
    t.fields[key] = to_config(L, -1, what.empty() ? key : what + "." + key, depth + 1);
    lua_pop(L, 1);
  }
  return t;
}

ConfigValue lt_to_config(lua_State* L, int idx, const std::string& what) {
  return to_config(L, idx, what, 0);
}

void lt_push_config(lua_State* L, const ConfigValue& v) {
  switch (v.kind) {
    case ConfigValue::Kind::number:
      lua_pushnumber(L, v.number);
      return;
    case ConfigValue::Kind::boolean:
      lua_pushboolean(L, v.boolean);
      return;
    case ConfigValue::Kind::string:
      lua_pushlstring(L, v.string.data(), v.string.size());
      return;
    case ConfigValue::Kind::list:
      lua_createtable(L, static_cast<int>(v.items.size()), 0);
      for (size_t i = 0; i < v.items.size(); i++) {
        lt_push_config(L, v.items[i]);
        lua_rawseti(L, -2, static_cast<int>(i + 1));
      }
      return;
    case ConfigValue::Kind::table:
      lua_createtable(L, 0, static_cast<int>(v.fields.size()));
      for (const auto& [k, f] : v.fields) {
        lt_push_config(L, f);
        lua_setfield(L, -2, k.c_str());
      }
      return;
  }
}

// ============================================================================================
// Run state

static char run_state_key;
static char validate_done_token;

RunState& lt_run_state(lua_State* L) {
  lua_pushlightuserdata(L, &run_state_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  auto* box = static_cast<LtBox<RunState>*>(lua_touserdata(L, -1));
  lua_pop(L, 1);
  if (box) return box->value;
  // First use: a full userdata owned by the registry, destroyed with the Lua state.
  void* mem = lua_newuserdata(L, sizeof(LtBox<RunState>));
  box = new (mem) LtBox<RunState>{};
  lua_newtable(L);
  lua_pushcfunction(L, [](lua_State* L) -> int {
    static_cast<LtBox<RunState>*>(lua_touserdata(L, 1))->~LtBox<RunState>();
    return 0;
  });
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_pushlightuserdata(L, &run_state_key);
  lua_insert(L, -2);
  lua_rawset(L, LUA_REGISTRYINDEX);
  return box->value;
}

void* lt_validate_done_token() {
  return &validate_done_token;
}

void* lt_stop_token() {
  static char token;
  return &token;
}

void lt_seed_all(lua_State* L, uint64_t seed) {
  seed_torch(seed);
  lua_getglobal(L, "math");
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "randomseed");
    if (lua_isfunction(L, -1)) {
      lua_pushnumber(L, static_cast<double>(seed));  // exact: seeds are at most 2^53
      lua_call(L, 1, 0);
    } else {
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
}

void lt_set_number(lua_State* L, const char* key, double v) {
  lua_pushnumber(L, v);
  lua_setfield(L, -2, key);
}

void lt_set_bool(lua_State* L, const char* key, bool v) {
  lua_pushboolean(L, v);
  lua_setfield(L, -2, key);
}

void lt_set_string(lua_State* L, const char* key, const std::string& v) {
  lua_pushlstring(L, v.data(), v.size());
  lua_setfield(L, -2, key);
}

void lt_push_numbers(lua_State* L, std::initializer_list<std::pair<const char*, double>> fields) {
  lua_createtable(L, 0, static_cast<int>(fields.size()));
  for (const auto& [key, v] : fields) lt_set_number(L, key, v);
}

void lt_push_json(lua_State* L, const nlohmann::json& j) {
  if (j.is_null()) {
    lua_pushnil(L);
  } else if (j.is_boolean()) {
    lua_pushboolean(L, j.get<bool>());
  } else if (j.is_number()) {
    lua_pushnumber(L, j.get<double>());
  } else if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    lua_pushlstring(L, s.data(), s.size());
  } else if (j.is_array()) {
    lua_createtable(L, static_cast<int>(j.size()), 0);
    for (size_t i = 0; i < j.size(); i++) {
      lt_push_json(L, j[i]);
      lua_rawseti(L, -2, static_cast<int>(i + 1));
    }
  } else if (j.is_object()) {
    lua_createtable(L, 0, static_cast<int>(j.size()));
    for (auto it = j.begin(); it != j.end(); ++it) {
      lt_push_json(L, it.value());
      lua_setfield(L, -2, it.key().c_str());
    }
  } else {
    lua_pushnil(L);  // a binary value: nothing Lua can hold
  }
}

// lt_to_json at `depth`; `path` is `what` and the keys down to this value.
static nlohmann::json to_json(lua_State* L, int idx, const std::string& path, int depth) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  switch (lua_type(L, idx)) {
    case LUA_TNIL:
      return nullptr;
    case LUA_TBOOLEAN:
      return lua_toboolean(L, idx) != 0;
    case LUA_TNUMBER: {
      const double v = lua_tonumber(L, idx);
      if (std::isnan(v) || std::isinf(v))
        fail(path + " is " + str_from_number(v) +
             "; JSON has no NaN or infinity (leave the key out instead)");
      if (number_is_whole(v)) return static_cast<int64_t>(v);
      return v;
    }
    case LUA_TSTRING: {
      size_t len = 0;
      const char* s = lua_tolstring(L, idx, &len);
      return std::string(s, len);
    }
    case LUA_TTABLE:
      break;
    default:
      fail(path + " is a " + luaL_typename(L, idx) +
           "; JSON holds nil, booleans, numbers, strings and tables of them");
  }
  // As JSON files are limited (host/core/json.h): a table this deep (or one that contains itself)
  // could not be written out or read back.
  if (depth >= kJsonMaxDepth)
    fail(path.substr(0, 80) + (path.size() > 80 ? "..." : "") + " nests tables deeper than " +
         std::to_string(kJsonMaxDepth) + " levels");
  const size_t n = lua_objlen(L, idx);
  if (n > 0 && lt_is_list(L, idx)) {
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 1; i <= n; i++) {
      lua_rawgeti(L, idx, static_cast<int>(i));
      out.push_back(to_json(L, -1, path + "[" + std::to_string(i) + "]", depth + 1));
      lua_pop(L, 1);
    }
    return out;
  }
  nlohmann::json out = nlohmann::json::object();
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) != LUA_TSTRING) {
      const bool number = lua_type(L, -2) == LUA_TNUMBER;
      lua_pop(L, 2);
      fail(path +
           (number ? " mixes list items and named keys, or is a list with holes"
                   : " has a key that is not a string") +
           "; JSON takes a list (keys 1..n) or a table of named keys");
    }
    size_t len = 0;
    const char* k = lua_tolstring(L, -2, &len);
    std::string key(k, len);
    out[key] = to_json(L, -1, path + "." + key, depth + 1);
    lua_pop(L, 1);
  }
  return out;
}

nlohmann::json lt_to_json(lua_State* L, int idx, const std::string& what) {
  return to_json(L, idx, what, 0);
}

}  // namespace luatune
