// Option tables (see lua_util.h): checked against their declarations (bindings/api/*.yaml), old
// names accepted under their new ones, the readers (lt_opt_*), and each C++ default held against
// the declared one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>

#include "bindings/lua_util.h"
#include "host/core/error.h"
#include "host/core/number.h"
#include "host/core/strings.h"
#include "host/dist/dist.h"

namespace luatune {

// Sets every field of the table at `from` (absolute) in the table at the top, both read and written
// raw (a config{} table's missing-key error stays out).
static void copy_fields(lua_State* L, int from) {
  lua_pushnil(L);
  while (lua_next(L, from)) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, -4);
  }
}

// Pushes a plain copy of the table at idx.
static void push_raw_copy(lua_State* L, int idx) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  lua_newtable(L);
  copy_fields(L, idx);
}

// An old option name, once per process: "warning: train.new: option 'lr' is deprecated; use 'learning_rate'".
static void warn_renamed(const std::string& what, const LtOpt& o) {
  static std::set<std::string> warned;
  const std::string line = what + ": option '" + o.name + "' is deprecated; use '" + o.renamed +
                           "' (the old name goes in the next release)";
  if (warned.insert(line).second && dist_is_main()) std::fprintf(stderr, "warning: %s\n", line.c_str());
}

// Replaces the table at idx (absolute) with a plain copy whose old names (`renamed`, all present in
// it) stand under their new ones: "lr" -> "learning_rate", "lora_r" -> lora.r (a copy of the table lora).
static void replace_with_renamed(lua_State* L, int idx, const std::vector<const LtOpt*>& renamed,
                                 const std::string& what) {
  push_raw_copy(L, idx);
  const int copy = lua_gettop(L);
  for (const LtOpt* o : renamed) {
    lua_pushnil(L);
    lua_setfield(L, copy, o->name.c_str());  // raw: the copy has no metatable
  }
  for (const LtOpt* o : renamed) {
    const size_t dot = o->renamed.find('.');
    int into = copy;
    std::string key = o->renamed;
    if (dot != std::string::npos) {  // a key of a table option: that table copied (or made)
      const std::string head = o->renamed.substr(0, dot);
      key = o->renamed.substr(dot + 1);
      lua_getfield(L, copy, head.c_str());
      if (lua_isnil(L, -1)) {
        lua_newtable(L);
      } else if (lua_istable(L, -1)) {
        push_raw_copy(L, -1);
      } else {
        std::string msg = "option '" + head + "' expects a table, got " + luaL_typename(L, -1);
        luaL_argerror(L, idx, msg.c_str());
      }
      lua_remove(L, -2);
      lua_pushvalue(L, -1);
      lua_setfield(L, copy, head.c_str());
      into = lua_gettop(L);
    }
    lua_getfield(L, into, key.c_str());
    if (!lua_isnil(L, -1)) {
      std::string msg = "options '" + o->name + "' and '" + o->renamed + "' are one option ('" + o->name +
                        "' is its old name); give only '" + o->renamed + "'";
      luaL_argerror(L, idx, msg.c_str());
    }
    lua_pop(L, 1);
    lua_getfield(L, idx, o->name.c_str());
    lua_setfield(L, into, key.c_str());
    if (into != copy) lua_pop(L, 1);
    warn_renamed(what, *o);
  }
  lua_replace(L, idx);
}

// ============================================================================================
// Declared defaults: the C++ default each reader is given, held against the declared one

// A table that passed lt_check_options is tagged, in two weak-keyed registry tables, with its
// declaration's literal defaults and with the function that checked it. The readers (lt_opt_*)
// hold the C++ default they are given against the declared one and fail, naming both, when they
// differ: a default written in C++ (LoraConfig::r, a literal in a binding) cannot drift from
// bindings/api/*.yaml unnoticed. tests/lua/test_api_defaults.lua reads every declared default so.
static const char* const kOptionDefaults = "luatune.option_defaults";  // table -> its declared defaults
static const char* const kOptionChecker = "luatune.option_checker";  // table -> the function that checked it
static const char* const kDeclaredDefaults = "luatune.declared_defaults";  // class -> its declared defaults

// Pushes the registry's table `name`, made on first use (weak-keyed when `weak`).
static void push_registry_table(lua_State* L, const char* name, bool weak) {
  lua_getfield(L, LUA_REGISTRYINDEX, name);
  if (!lua_isnil(L, -1)) return;
  lua_pop(L, 1);
  lua_newtable(L);
  if (weak) {
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
  }
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, name);
}

// Pushes a declared default (Lua text) when it is a literal number, boolean or string, or a non-empty
// list of them ("{0.9, 0.999}", '{"q_proj", "v_proj"}': items without commas of their own); "required",
// "{}", other tables and absent or computed defaults ("") push nothing.
static bool push_literal_default(lua_State* L, const std::string& def) {
  if (def.size() > 2 && def.front() == '{' && def.back() == '}') {
    const int top = lua_gettop(L);
    lua_newtable(L);
    int n = 0;
    for (const std::string& item : str_split(def.substr(1, def.size() - 2), ',')) {
      if (!push_literal_default(L, str_trim(item)) || lua_istable(L, -1)) return lua_settop(L, top), false;
      lua_rawseti(L, -2, ++n);
    }
    return true;
  }
  if (def == "true" || def == "false") return lua_pushboolean(L, def == "true"), true;
  if (def.size() >= 2 && def.front() == '"' && def.find_first_of("\"\\", 1) == def.size() - 1) {
    lua_pushlstring(L, def.data() + 1, def.size() - 2);
    return true;
  }
  char* end = nullptr;
  const double v = def.empty() ? 0 : std::strtod(def.c_str(), &end);
  if (def.empty() || *end != '\0') return false;
  lua_pushnumber(L, v);
  return true;
}

// The data file that declares the shared table `cls`, as errors name it.
static std::string table_file(const std::string& cls) {
  for (const LtModuleApi& m : lt_api_registry().modules)
    for (const LtTable& t : m.tables)
      if (t.cls == cls) return "bindings/api/" + m.module + ".yaml";
  return "bindings/api";
}

// Tags the option table at idx (absolute) with its declaration: `keys`, of class `cls`, named in
// errors as `name` ("lora.apply", "DataOpts") declared in `file`. The declared defaults are made
// into a Lua table once per class: {values = {key = default}, name, file}.
static void tag_options(lua_State* L, int idx, const std::vector<LtOpt>& keys, const std::string& cls,
                        const std::string& name, const std::string& file) {
  push_registry_table(L, kOptionDefaults, true);
  lua_pushvalue(L, idx);
  push_registry_table(L, kDeclaredDefaults, false);
  lua_getfield(L, -1, cls.c_str());
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_newtable(L);
    for (const LtOpt& o : keys)
      if (o.renamed.empty() && push_literal_default(L, o.def)) lua_setfield(L, -2, o.name.c_str());
    lua_setfield(L, -2, "values");
    lt_set_string(L, "class", cls);
    lt_set_string(L, "name", name);
    lt_set_string(L, "file", file);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, cls.c_str());
  }
  lua_remove(L, -2);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  push_registry_table(L, kOptionChecker, true);
  lua_pushvalue(L, idx);
  lua_pushstring(L, lt_fname(L));
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

static void tag_options(lua_State* L, int idx, const LtFunc& f) {
  tag_options(L, idx, lt_func_options(f), lt_func_options_class(f),
              f.shared ? f.shared->cls : lt_func_full_name(f), f.shared ? table_file(f.shared->cls) : f.file);
}

// Two defaults as one: a float field (2e-5f) is its double's nearest float, not the double.
static bool number_close(double a, double b) {
  return a == b || std::fabs(a - b) <= 1e-6 * std::max(std::fabs(a), std::fabs(b));
}

// Two defaults (absolute indices) as one: equal scalars, close numbers, or lists of such, item by item.
static bool same_default(lua_State* L, int a, int b) {
  if (lua_type(L, a) == LUA_TNUMBER && lua_type(L, b) == LUA_TNUMBER)
    return number_close(lua_tonumber(L, a), lua_tonumber(L, b));
  if (!lua_istable(L, a) || !lua_istable(L, b)) return lua_rawequal(L, a, b) != 0;
  if (lua_objlen(L, a) != lua_objlen(L, b)) return false;
  for (int i = 1; i <= static_cast<int>(lua_objlen(L, a)); i++) {
    lua_rawgeti(L, a, i);
    lua_rawgeti(L, b, i);
    const int top = lua_gettop(L);
    const bool same = !lua_istable(L, top) && same_default(L, top - 1, top);
    lua_pop(L, 2);
    if (!same) return false;
  }
  return true;
}

// A default as a message shows it: 16, 0.05, "cpu", true, {0.9, 0.999}.
static std::string default_text(lua_State* L, int idx) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  if (lua_istable(L, idx)) {
    std::vector<std::string> items;
    for (int i = 1; i <= static_cast<int>(lua_objlen(L, idx)); i++) {
      lua_rawgeti(L, idx, i);
      items.push_back(lua_istable(L, -1) ? "{...}" : default_text(L, lua_gettop(L)));
      lua_pop(L, 1);
    }
    return "{" + str_join(items, ", ") + "}";
  }
  if (lua_type(L, idx) == LUA_TNUMBER) return str_from_number(lua_tonumber(L, idx));
  if (lua_type(L, idx) == LUA_TBOOLEAN) return lua_toboolean(L, idx) ? "true" : "false";
  if (lua_type(L, idx) == LUA_TSTRING) return std::string("\"") + lua_tostring(L, idx) + "\"";
  return luaL_typename(L, idx);
}

// The C++ default of option `key`, pushed at the top (and popped here), when the table at idx
// (absolute) has no value for it, against the default its declaration declares: a difference
// fails, naming both. Under
// the probe (registry "luatune.defaults_probe" a table), the key is recorded there as "Class.key",
// and once every declared default of the probed table (its field `class`) is recorded the call
// stops with "luatune: defaults probe done" before it does any work.
static void check_default(lua_State* L, int idx, const char* key) {
  const int def = lua_gettop(L);
  if (!lua_istable(L, idx)) return lua_settop(L, def - 1);
  lua_getfield(L, idx, key);  // a value given: the default is not used
  const bool given = !lua_isnil(L, -1);
  lua_settop(L, def);
  if (given) return lua_settop(L, def - 1);
  push_registry_table(L, kOptionChecker, true);
  lua_pushvalue(L, idx);
  lua_rawget(L, -2);
  // A table some other function checked (a recipe's table passed on) is not this one's to judge.
  const bool ours = lua_isstring(L, -1) && std::strcmp(lua_tostring(L, -1), lt_fname(L)) == 0;
  lua_settop(L, def);
  if (!ours) return lua_settop(L, def - 1);
  push_registry_table(L, kOptionDefaults, true);
  lua_pushvalue(L, idx);
  lua_rawget(L, -2);
  const int decl = lua_gettop(L);
  lua_getfield(L, decl, "values");
  lua_getfield(L, -1, key);
  if (lua_isnil(L, -1)) return lua_settop(L, def - 1);
  const bool same = same_default(L, lua_gettop(L), def);
  if (!same) {
    lua_getfield(L, decl, "name");
    lua_getfield(L, decl, "file");
    const std::string msg = std::string(lua_tostring(L, -2)) + ": option '" + key + "' defaults to " +
                            default_text(L, -3) + " in " + lua_tostring(L, -1) +
                            ", but the binding's C++ default is " + default_text(L, def) +
                            "; make the two agree";
    lua_settop(L, def - 1);
    luaL_error(L, "%s", msg.c_str());
  }
  lua_getfield(L, LUA_REGISTRYINDEX, "luatune.defaults_probe");
  if (lua_istable(L, -1)) {
    const int probe = lua_gettop(L);
    lua_getfield(L, decl, "class");
    const std::string cls = lua_tostring(L, -1);
    lua_pushboolean(L, 1);
    lua_setfield(L, probe, (cls + "." + key).c_str());
    bool all = true;
    lua_getfield(L, decl, "values");
    lua_pushnil(L);
    while (all && lua_next(L, -2)) {
      lua_getfield(L, probe, (cls + "." + lua_tostring(L, -2)).c_str());
      all = !lua_isnil(L, -1);
      lua_pop(L, 2);
    }
    lua_getfield(L, probe, "class");  // the table probed: others read on the way are only recorded
    const bool probed = lua_isstring(L, -1) && cls == lua_tostring(L, -1);
    lua_settop(L, def - 1);
    if (all && probed) luaL_error(L, "luatune: defaults probe done");
  }
  lua_settop(L, def - 1);
}

// The option table at idx against `keys`: unknown keys always, value types when `types`. An old name
// (LtOpt::renamed) is accepted with a warning: the table at idx is replaced by a copy under the new
// names, as it is (read raw) when it has a metatable, so the readers see plain tables of new names.
static bool check_options(lua_State* L, int idx, const std::vector<LtOpt>& keys, bool types,
                          const std::string& what) {
  if (lua_isnoneornil(L, idx)) return false;
  luaL_checktype(L, idx, LUA_TTABLE);
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  std::vector<std::string> valid;
  bool open = false;
  for (const LtOpt& o : keys) {
    if (o.name == "[string]")
      open = true;
    else if (o.renamed.empty())
      valid.push_back(o.name);
  }
  std::vector<const LtOpt*> renamed;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    std::string key =
        lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : std::string("<") + luaL_typename(L, -1) + ">";
    auto old = std::find_if(keys.begin(), keys.end(), [&](const LtOpt& o) { return o.name == key; });
    if (lua_type(L, -1) == LUA_TSTRING && old != keys.end() && !old->renamed.empty()) continue;
    bool ok =
        lua_type(L, -1) == LUA_TSTRING && (open || std::find(valid.begin(), valid.end(), key) != valid.end());
    if (!ok) {
      std::string near = str_nearest(key, valid);
      std::string msg = "unknown option '" + key + "'" +
                        (near.empty() ? "" : " (did you mean '" + near + "'?)") +
                        "; valid options: " + str_join(valid, ", ");
      lua_pop(L, 1);
      luaL_argerror(L, idx, msg.c_str());
    }
  }
  for (const LtOpt& o : keys) {  // in the declaration's order, so the warnings come out in one order
    if (o.renamed.empty()) continue;
    lua_pushlstring(L, o.name.data(), o.name.size());
    lua_rawget(L, idx);
    if (!lua_isnil(L, -1)) renamed.push_back(&o);
    lua_pop(L, 1);
  }
  const bool strict = lua_getmetatable(L, idx) != 0;  // a config{} table: reading a missing key raises
  if (strict) lua_pop(L, 1);
  if (!renamed.empty() || strict) replace_with_renamed(L, idx, renamed, what);
  if (!types) return true;
  for (const LtOpt& o : keys) {
    // Lists, tables and functions are left to the readers, whose messages say what each item needs.
    if (o.name == "[string]" || !o.renamed.empty() || !lt_type_is_scalar(o.type)) continue;
    lua_getfield(L, idx, o.name.c_str());
    if (!lua_isnil(L, -1) && !lt_type_matches(L, -1, o.type)) {
      std::string msg =
          "option '" + o.name + "' expects " + lt_type_describe(o.type) + ", got " + lt_typename(L, -1);
      lua_pop(L, 1);
      luaL_argerror(L, idx, msg.c_str());
    }
    lua_pop(L, 1);
  }
  return true;
}

bool lt_check_options(lua_State* L, int idx, const LtFunc& f) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  if (!check_options(L, idx, lt_func_options(f), true, lt_func_full_name(f))) return false;
  tag_options(L, idx, f);
  return true;
}

bool lt_check_options(lua_State* L, int idx, const LtTable& t) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  if (!check_options(L, idx, t.keys, true, lt_fname(L))) return false;
  tag_options(L, idx, t.keys, t.cls, t.cls, table_file(t.cls));
  return true;
}

bool lt_check_options_over(lua_State* L, int idx, const LtFunc& f) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  const bool base = lt_check_options(L, idx, f);
  if (!lt_check_options(L, idx + 1, f)) return base;
  if (base)
    push_raw_copy(L, idx);
  else
    lua_newtable(L);
  copy_fields(L, idx + 1);
  lua_replace(L, idx);
  tag_options(L, idx, f);
  return true;
}

void lt_check_required_options(lua_State* L, int idx, const LtFunc& f) {
  luaL_checktype(L, idx, LUA_TTABLE);
  lt_check_options(L, idx, f);
}

void lt_check_option_names(lua_State* L, int idx, const LtFunc& f) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  if (check_options(L, idx, lt_func_options(f), false, lt_func_full_name(f))) tag_options(L, idx, f);
}

// A type's alternatives: "string|string[]" -> {"string", "string[]"} (a '|' inside brackets or
// quotes stays: "fun(a: integer|nil)" is one); "" is one alternative, which accepts anything.
static std::vector<std::string> type_alternatives(const std::string& type) {
  std::vector<std::string> out = lt_split_top(type, '|');
  if (out.empty()) out.emplace_back();
  return out;
}

// The Lua type an alternative needs; LUA_TNONE when it accepts anything. A class (Model, Tensor)
// is a userdata whose metatable's __name is that class.
static int alternative_lua_type(const std::string& a) {
  auto starts = [&](const char* p) { return a.rfind(p, 0) == 0; };
  if (a.empty() || a == "any") return LUA_TNONE;
  if (a == "number" || a == "integer") return LUA_TNUMBER;
  if (a == "boolean" || a == "true" || a == "false") return LUA_TBOOLEAN;
  if (a == "string" || a[0] == '"') return LUA_TSTRING;
  if (a == "function" || starts("fun(")) return LUA_TFUNCTION;
  if (a == "nil") return LUA_TNIL;
  if (a == "table" || a[0] == '{' || starts("table<") || str_ends_with(a, "[]") || str_ends_with(a, "Opts"))
    return LUA_TTABLE;
  if (std::isupper(static_cast<unsigned char>(a[0]))) return LUA_TUSERDATA;  // a class: Model, Tensor, ...
  return LUA_TNONE;
}

bool lt_type_matches(lua_State* L, int idx, const std::string& type) {
  const int got = lua_type(L, idx);
  for (const std::string& a : type_alternatives(type)) {
    int want = alternative_lua_type(a);
    if (want == LUA_TNONE) return true;
    if (want == got && (want != LUA_TUSERDATA || lt_typename(L, idx) == a)) return true;
  }
  return false;
}

bool lt_type_is_scalar(const std::string& type) {
  for (const std::string& a : type_alternatives(type)) {
    int want = alternative_lua_type(a);
    if (want != LUA_TNUMBER && want != LUA_TBOOLEAN && want != LUA_TSTRING && want != LUA_TUSERDATA)
      return false;
  }
  return true;
}

// "integer" -> "an integer", "string|string[]" -> "a string or a list", "Model" -> "a Model".
std::string lt_type_describe(const std::string& type) {
  std::vector<std::string> parts;
  for (const std::string& a : type_alternatives(type)) {
    std::string d;
    if (a == "integer")
      d = "an integer";
    else if (a[0] == '"' || a == "true" || a == "false" || a == "nil")
      d = a;
    else if (str_ends_with(a, "[]"))
      d = "a list";
    else if (a[0] == '{' || str_ends_with(a, "Opts") || str_starts_with(a, "table<"))
      d = "a table";
    else if (str_starts_with(a, "fun("))
      d = "a function";
    else
      d = "a " + a;
    if (std::find(parts.begin(), parts.end(), d) == parts.end()) parts.push_back(d);
  }
  return str_join(parts, " or ");
}

bool lt_has_field(lua_State* L, int idx, const char* key) {
  if (!lua_istable(L, idx)) return false;
  lua_getfield(L, idx, key);
  bool has = !lua_isnil(L, -1);
  lua_pop(L, 1);
  return has;
}

// Pushes option `key` of the table at idx when it is there (true), failing when it is not of Lua
// type `type`; false, with nothing pushed, when idx holds no table or the key is nil.
static bool push_option(lua_State* L, int idx, const char* key, int type, const char* expected) {
  if (!lua_istable(L, idx)) return false;
  lua_getfield(L, idx, key);
  if (lua_isnil(L, -1)) return lua_pop(L, 1), false;
  if (lua_type(L, -1) != type) {
    std::string msg =
        std::string("option '") + key + "' expects " + expected + ", got " + luaL_typename(L, -1);
    lua_pop(L, 1);
    luaL_argerror(L, idx, msg.c_str());
  }
  return true;
}

// Option `key` of the table at idx, or def when absent. push(def) puts the default on the stack for
// check_default (the declared default must agree); read() takes the value at the top.
template <class T, class Push, class Read>
static T opt_value(lua_State* L, int idx, const char* key, const T& def, int type, const char* expected,
                   Push push, Read read) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  push(def);
  check_default(L, idx, key);
  if (!push_option(L, idx, key, type, expected)) return def;
  T v = read();
  lua_pop(L, 1);
  return v;
}

double lt_opt_number(lua_State* L, int idx, const char* key, double def) {
  return opt_value<double>(
      L, idx, key, def, LUA_TNUMBER, "a number", [L](double d) { lua_pushnumber(L, d); },
      [L] { return lua_tonumber(L, -1); });
}

int64_t lt_opt_int(lua_State* L, int idx, const char* key, int64_t def, int64_t lo, int64_t hi) {
  const double v = lt_opt_number(L, idx, key, static_cast<double>(def));
  if (v != std::floor(v) || v < static_cast<double>(lo) || v > static_cast<double>(hi)) {
    std::string msg = std::string("option '") + key + "' expects an integer between " + std::to_string(lo) +
                      " and " + std::to_string(hi) + ", got " + str_from_number(v);
    luaL_argerror(L, idx, msg.c_str());
  }
  return static_cast<int64_t>(v);
}

bool lt_opt_bool(lua_State* L, int idx, const char* key, bool def) {
  return opt_value<bool>(
      L, idx, key, def, LUA_TBOOLEAN, "a boolean", [L](bool d) { lua_pushboolean(L, d); },
      [L] { return lua_toboolean(L, -1) != 0; });
}

std::string lt_opt_string(lua_State* L, int idx, const char* key, const std::string& def) {
  return opt_value<std::string>(
      L, idx, key, def, LUA_TSTRING, "a string",
      [L](const std::string& d) { lua_pushlstring(L, d.data(), d.size()); },
      [L] { return std::string(lua_tostring(L, -1)); });
}

void lt_check_defaults(lua_State* L, int idx,
                       const std::vector<std::pair<std::string, ConfigValue>>& defaults) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  for (const auto& [key, v] : defaults) {
    if (v.kind == ConfigValue::Kind::table) continue;  // declared defaults are scalars or lists
    lt_push_config(L, v);
    check_default(L, idx, key.c_str());
  }
}

bool lt_opt_strings(lua_State* L, int idx, const char* key, const std::string& what,
                    std::vector<std::string>* out) {
  const std::string bad = what + ": " + key + " must be a string or a list of strings";
  lua_getfield(L, idx, key);
  if (lua_isnil(L, -1)) return lua_pop(L, 1), false;
  if (lua_type(L, -1) == LUA_TSTRING) {
    *out = {lua_tostring(L, -1)};
  } else {
    LT_CHECK(lua_istable(L, -1) && lt_is_list(L, -1), bad);
    out->clear();
    for (size_t i = 1; i <= lua_objlen(L, -1); i++) {
      lua_rawgeti(L, -1, static_cast<int>(i));
      LT_CHECK(lua_type(L, -1) == LUA_TSTRING, bad);
      out->push_back(lua_tostring(L, -1));
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  return true;
}

}  // namespace luatune
