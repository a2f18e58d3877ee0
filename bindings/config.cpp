// Lua module `config`: `local cfg = config { ...defaults... }` resolves a recipe's configuration
// against the run's overrides (host/cli/config.cpp), prints it once, and returns it as a table
// that raises on a misspelt key instead of returning nil. config.get() / config.json() give the
// resolved config to metric sinks.
#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "bindings/lua_util.h"
#include "host/cli/config_checks.h"
#include "host/cli/recipes.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/seed.h"
#include "host/core/strings.h"
#include "host/core/version.h"
#include "host/dist/dist.h"
#include "host/train/run_dir.h"

namespace luatune {

// cfg.lerning_rate -> error naming the keys the table has.
static int l_config_missing_key(lua_State* L) {
  std::string key = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : luaL_typename(L, 2);
  std::string path;
  if (lua_getmetatable(L, 1)) {
    lua_getfield(L, -1, "__path");
    if (lua_isstring(L, -1)) path = lua_tostring(L, -1);
    lua_pop(L, 2);
  }
  std::vector<std::string> keys;
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    lua_pop(L, 1);
    if (lua_type(L, -1) == LUA_TSTRING) keys.push_back(lua_tostring(L, -1));
  }
  std::sort(keys.begin(), keys.end());
  std::string full = path.empty() ? key : path + "." + key;
  std::string near = str_nearest(key, keys);
  return luaL_error(L, "config: no key '%s' in the config%s; keys here: %s", full.c_str(),
                    near.empty() ? "" : (" (did you mean '" + near + "'?)").c_str(),
                    str_join(keys, ", ").c_str());
}

// Pushes `v`; tables (not lists) get a metatable that makes reading a missing key an error.
static void push_strict(lua_State* L, const ConfigValue& v, const std::string& path) {
  if (v.kind != ConfigValue::Kind::table) {
    lt_push_config(L, v);
    return;
  }
  lua_createtable(L, 0, static_cast<int>(v.fields.size()));
  for (const auto& [k, f] : v.fields) {
    push_strict(L, f, path.empty() ? k : path + "." + k);
    lua_setfield(L, -2, k.c_str());
  }
  lua_createtable(L, 0, 2);
  lua_pushcfunction(L, l_config_missing_key);
  lua_setfield(L, -2, "__index");
  lt_set_string(L, "__path", path);
  lua_setmetatable(L, -2);
}

// The run's seed, from the resolved config (docs/reproducibility.md): its `seed` key, or
// LUATUNE_SEED (else 0) when it has none.
static uint64_t config_run_seed(const ConfigValue& cfg) {
  auto it = cfg.fields.find("seed");
  if (it == cfg.fields.end()) return seed_from_env();
  const ConfigValue& v = it->second;
  std::string what = "config: seed" + (v.origin.empty() ? "" : " (" + v.origin + ")");
  if (v.kind != ConfigValue::Kind::number)
    fail_usage(what + " must be a whole number in [0, 2^53], got a " + config_kind_name(v.kind));
  return seed_check(v.number, what);
}

// `deterministic = true` in the resolved config (a recipe without the key runs as LibTorch defaults).
static bool config_run_deterministic(const ConfigValue& cfg) {
  auto it = cfg.fields.find("deterministic");
  if (it == cfg.fields.end()) return false;
  if (it->second.kind != ConfigValue::Kind::boolean)
    fail_usage(std::string("config: deterministic must be true or false, got a ") +
               config_kind_name(it->second.kind));
  return it->second.boolean;
}

// A recipe whose config has output_dir and resume claims the directory as soon as the config
// resolves, before it loads or writes anything: resume=false refuses another run's checkpoints
// there (or, with overwrite=true, moves them aside) and writes run.json (host/train/run_dir.h).
// resume=true leaves it to trainer:resume, which notes the resume in run.json. A run that fails
// before writing anything else there (a broken data line) gets the directory back as it was.
static void config_claim_output_dir(RunState& st, const ConfigValue& cfg, uint64_t seed) {
  auto dir = cfg.fields.find("output_dir"), resume = cfg.fields.find("resume"),
       overwrite = cfg.fields.find("overwrite");
  if (dir == cfg.fields.end() || dir->second.kind != ConfigValue::Kind::string || dir->second.string.empty())
    return;
  if (resume == cfg.fields.end() || resume->second.kind != ConfigValue::Kind::boolean ||
      resume->second.boolean)
    return;
  RunInfo info;
  info.run_id = run_id_new();
  info.config = nlohmann::json::parse(config_to_json(cfg));
  info.recipe = st.recipe;
  info.seed = static_cast<double>(seed);
  info.has_seed = true;
  info.world_size = dist_world_size();
  info.git_describe = version_git_describe(luatune_home());
  const bool replace = overwrite != cfg.fields.end() &&
                       overwrite->second.kind == ConfigValue::Kind::boolean && overwrite->second.boolean;
  if (dist_is_main()) {  // the directory as it is now, for a run that fails before writing to it
    const std::string& d = dir->second.string;
    st.output_dir_claimed.dir = d;
    st.output_dir_claimed.existed = dir_exists(d);
    st.output_dir_claimed.before = dir_listing(d);
    st.output_dir_claimed.had_run_json = file_exists(d + "/run.json");
    if (st.output_dir_claimed.had_run_json) st.output_dir_claimed.run_json = file_read(d + "/run.json");
  }
  const std::string moved = output_dir_claim(dir->second.string, replace, run_json_new(info), dist_is_main());
  if (!moved.empty())
    std::printf("config: moved the earlier run in %s to %s\n", dir->second.string.c_str(), moved.c_str());
}

// config { defaults } (called through the module's __call: argument 1 is the module itself).
static int l_config_resolve(lua_State* L) {
  RunState& st = lt_run_state(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  if (lua_objlen(L, 2) > 0)
    fail_usage("config: expected a table of named defaults, e.g. config { lr = 2e-4, steps = 100 }");
  if (st.config_resolved)
    fail_usage("config: config{} called twice in " + st.recipe,
               "declare every default in one config{} table");
  ConfigValue cfg = lt_to_config(L, 2, "");
  if (cfg.kind == ConfigValue::Kind::list) cfg = ConfigValue::of_table();  // config {}: no keys
  // LUATUNE_SEED stands in for the recipe's default seed; a seed= override still beats it.
  if (std::string env = seed_env_text(); !env.empty() && cfg.fields.count("seed"))
    config_apply(cfg, {config_parse_override("seed=" + env, "LUATUNE_SEED")});
  config_apply(cfg, st.overrides);
  const uint64_t seed = config_run_seed(cfg);  // checked before validate stops, so it checks them too
  const bool deterministic = config_run_deterministic(cfg);
  st.resolved = cfg;
  st.config_resolved = true;
  if (st.describe_only) {
    lua_pushlightuserdata(L, lt_validate_done_token());
    return lua_error(L);
  }
  std::string text = "config (" + st.recipe + "):\n" + config_format(cfg);
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  // Paths and ranges, every problem at once, before anything loads (host/cli/config_checks.h); validate
  // also reads the data files. Warnings are printed and the run goes on.
  ConfigCheckOptions checks;
  checks.paths = st.check_paths;
  checks.read_data = st.validate_only && st.check_paths;  // runner validate, not plan
  ConfigReport report = config_check(cfg, checks);
  if (dist_is_main())
    for (const auto& w : report.warnings) std::printf("warning: %s\n", w.c_str());
  std::fflush(stdout);
  if (const auto& problems = report.problems; !problems.empty()) {
    std::string n = std::to_string(problems.size());
    fail_usage("config: " + n + (problems.size() == 1 ? " problem" : " problems") + " in " + st.recipe +
               "'s config:\n  " + str_join(problems, "\n  "));
  }
  if (st.validate_only) {
    lua_pushlightuserdata(L, lt_validate_done_token());
    return lua_error(L);
  }
  config_claim_output_dir(st, cfg, seed);
  lt_seed_all(L, seed);
  if (deterministic) {
    std::string line = seed_deterministic();
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
  }
  push_strict(L, cfg, "");
  return 1;
}
LT_REGISTER("config.__call", l_config_resolve);

static int l_config_get(lua_State* L) {
  RunState& st = lt_run_state(L);
  if (!st.config_resolved) return lua_pushnil(L), 1;
  lt_push_config(L, st.resolved);
  return 1;
}
LT_REGISTER("config.get", l_config_get);

static int l_config_json(lua_State* L) {
  RunState& st = lt_run_state(L);
  std::string s = st.config_resolved ? config_to_json(st.resolved) : "{}";
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}
LT_REGISTER("config.json", l_config_json);

// The keys config.pick takes: those the function or option table `name` declares (old names aside).
static std::vector<std::string> declared_keys(const std::string& name) {
  const LtApi& api = lt_api_registry();
  const std::vector<LtOpt>* opts = nullptr;
  if (auto f = api.funcs.find(name); f != api.funcs.end()) opts = &lt_func_options(*f->second);
  if (auto t = api.tables.find(name); t != api.tables.end()) opts = &t->second->keys;
  std::vector<std::string> keys;
  for (const LtOpt& o : opts ? *opts : std::vector<LtOpt>())
    if (o.renamed.empty() && o.name != "[string]") keys.push_back(o.name);
  LT_CHECK(!keys.empty(), "config.pick: '"
                              << name
                              << "' is no function with options and no option table of bindings/api "
                                 "(expected a name such as \"train.new\" or \"BatchesOpts\")");
  return keys;
}

// config.pick(cfg, "train.new", extra): the config's keys that train.new declares, as a plain table,
// with extra's keys over them; config.pick(cfg, {"base_model", "data"}): the keys listed, each one
// the config must have. Recipes hand their config to the API this way instead of copying key by key.
static int l_config_pick(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  std::vector<std::string> keys;
  const bool listed = lua_istable(L, 2);
  bool ok = lua_type(L, 2) == LUA_TSTRING || (listed && lt_is_list(L, 2));
  for (size_t i = 1; listed && ok && i <= lua_objlen(L, 2); i++) {
    lua_rawgeti(L, 2, static_cast<int>(i));
    ok = lua_type(L, -1) == LUA_TSTRING;
    if (ok) keys.push_back(lua_tostring(L, -1));
    lua_pop(L, 1);
  }
  if (!ok)
    luaL_argerror(L, 2,
                  "a function (\"train.new\"), an option table (\"BatchesOpts\") or a list of keys expected");
  if (!listed) keys = declared_keys(lua_tostring(L, 2));
  if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
  lua_newtable(L);
  for (const std::string& k : keys) {
    lua_pushlstring(L, k.data(), k.size());
    lua_rawget(L, 1);
    LT_CHECK(!listed || !lua_isnil(L, -1), "config.pick: the config has no key '" << k << "'");
    lua_setfield(L, -2, k.c_str());
  }
  if (lua_istable(L, 3)) {
    lua_pushnil(L);
    while (lua_next(L, 3)) {
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_rawset(L, -4);
    }
  }
  return 1;
}
LT_REGISTER("config.pick", l_config_pick);

}  // namespace luatune
