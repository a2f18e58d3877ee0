// Lua module `metrics`: `local log = metrics.open{...}`, `log:write(step, stats)`, `log:summary{...}`,
// `log:close()` over host/metrics/. While the module is loaded, the global `print` clears a live
// progress line before printing and redraws it after, so recipe output never garbles it.
#include "host/metrics/metrics.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "bindings/lua_util.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/hw/device_probe.h"

namespace luatune {

using MetricsPtr = std::shared_ptr<Metrics>;

LT_CLASS(MetricsPtr, "Metrics");

namespace {

std::string describe_metrics(const MetricsPtr& m) {
  if (m->closed()) return "Metrics(closed)";
  return "Metrics(" + std::to_string(m->sink_count()) + " sink" + (m->sink_count() == 1 ? "" : "s") + ")";
}
LT_REGISTER_CLASS("metrics", MetricsPtr, describe_metrics);

// The order a table's producer gave its keys: the strings of its metatable's __order list
// (trainer:step and trainer:evaluate set one, as may a recipe), else none.
std::vector<std::string> producer_order(lua_State* L, int idx) {
  std::vector<std::string> order;
  if (!lua_getmetatable(L, idx)) return order;
  lua_getfield(L, -1, "__order");
  if (lua_istable(L, -1)) {
    for (int i = 1;; i++) {
      lua_rawgeti(L, -1, i);
      if (lua_type(L, -1) != LUA_TSTRING) {
        lua_pop(L, 1);
        break;
      }
      order.emplace_back(lua_tostring(L, -1));
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 2);
  return order;
}

// {loss = 2.3, lr = 2e-4, note = "warmup"} -> values in their producer's order (metrics_order);
// `what` names the call.
MetricValues check_values(lua_State* L, int idx, const char* what) {
  luaL_checktype(L, idx, LUA_TTABLE);
  MetricValues v;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    LT_CHECK(lua_type(L, -2) == LUA_TSTRING,
             what << ": keys must be names, got a " << luaL_typename(L, -2) << " key");
    std::string key = lua_tostring(L, -2);
    if (key == "note") {
      LT_CHECK(lua_type(L, -1) == LUA_TSTRING,
               what << ": note must be a string, got " << luaL_typename(L, -1));
      v.note = lua_tostring(L, -1);
    } else {
      LT_CHECK(lua_type(L, -1) == LUA_TNUMBER,
               what << ": value '" << key << "' must be a number, got " << luaL_typename(L, -1)
                    << (lua_type(L, -1) == LUA_TUSERDATA ? " (for a one-element Tensor pass t:item())" : ""));
      v.numbers.emplace_back(key, lua_tonumber(L, -1));
    }
    lua_pop(L, 1);
  }
  metrics_order(v, producer_order(L, idx));
  return v;
}

Metrics& check_metrics(lua_State* L, int idx) {
  MetricsPtr& m = lt_check<MetricsPtr>(L, idx);
  return *m;
}

// metrics.open's `wandb`: a project name, or a table of W&B run settings. The spool directory
// defaults to a `wandb` directory beside the JSONL file, so a run's output directory holds it
// (the default after `dir` and WANDB_DIR). Settings fall back to the WANDB_* variables (docs/wandb.md).
void read_wandb(lua_State* L, int idx, MetricsOptions& o) {
  lua_getfield(L, idx, "wandb");
  int w = lua_gettop(L);
  if (lua_type(L, w) == LUA_TSTRING) {
    o.wandb.project = lua_tostring(L, w);
  } else if (lua_istable(L, w)) {
    lt_check_options(L, w, lt_api_table("WandbOpts"));
    o.wandb.project = lt_opt_string(L, w, "project", "");
    o.wandb.entity = lt_opt_string(L, w, "entity", "");
    o.wandb.name = lt_opt_string(L, w, "name", "");
    o.wandb.group = lt_opt_string(L, w, "group", "");
    o.wandb.job_type = lt_opt_string(L, w, "job_type", "");
    o.wandb.notes = lt_opt_string(L, w, "notes", "");
    o.wandb.mode = lt_opt_string(L, w, "mode", "");
    o.wandb.run_id = lt_opt_string(L, w, "run_id", "");
    o.wandb.base_url = lt_opt_string(L, w, "base_url", "");
    o.wandb.dir = lt_opt_string(L, w, "dir", "");
    lua_getfield(L, w, "tags");
    if (lua_istable(L, -1)) {
      for (int i = 1;; i++) {
        lua_rawgeti(L, -1, i);
        if (lua_isnil(L, -1)) {
          lua_pop(L, 1);
          break;
        }
        LT_CHECK(lua_type(L, -1) == LUA_TSTRING,
                 "metrics.open: wandb.tags[" << i << "] must be a string, got " << luaL_typename(L, -1));
        o.wandb.tags.push_back(lua_tostring(L, -1));
        lua_pop(L, 1);
      }
    } else {
      LT_CHECK(lua_isnil(L, -1),
               "metrics.open: wandb.tags must be a list of strings, got " << luaL_typename(L, -1));
    }
    lua_pop(L, 1);
  } else {
    LT_CHECK(lua_isnil(L, w), "metrics.open: wandb must be a project name or a table of W&B settings, got "
                                  << luaL_typename(L, w));
  }
  lua_pop(L, 1);
  o.wandb.resume = o.jsonl.resume;
  if (!o.jsonl.path.empty()) {
    std::filesystem::path parent = std::filesystem::path(o.jsonl.path).parent_path();
    o.wandb.default_dir = (parent.empty() ? std::filesystem::path("wandb") : parent / "wandb").string();
  }
}

// What metrics.jsonl records of the run's hardware: the config's `device` resolved here, as the
// recipe's own torch.device / models.load resolved it ("auto" -> "cuda:0"), and the GPU's (or CPU's)
// name, as {"device": ..., "name": ...}; "" when the config has no device string or it does not
// resolve (the recipe then failed on it already).
std::string hardware_of(const std::string& config_json) {
  if (config_json.empty()) return "";
  const nlohmann::json c = nlohmann::json::parse(config_json, nullptr, false);
  if (!c.is_object() || !c.contains("device") || !c["device"].is_string()) return "";
  try {
    std::string resolved;
    const std::string name = hw_device_name(c["device"].get<std::string>(), &resolved);
    nlohmann::ordered_json h;
    h["device"] = resolved;
    h["name"] = name;
    return h.dump();
  } catch (const std::exception&) {
    return "";
  }
}

// ============================================================================================
// Module functions

// progress_seconds, when given, wins over $LUATUNE_PROGRESS_SECONDS, which wins over the default 30.
int l_metrics_open(lua_State* L) {
  MetricsOptions o;
  if (lt_check_options(L, 1, lt_api("metrics.open"))) {
    o.console = lt_opt_bool(L, 1, "console", true);
    o.report = lt_opt_bool(L, 1, "report", true);
    o.console_options.total_steps = lt_opt_int(L, 1, "total_steps", 0);
    lua_getfield(L, 1, "progress_seconds");
    if (!lua_isnil(L, -1)) {
      double s = lt_opt_number(L, 1, "progress_seconds", 0);
      LT_CHECK(std::isfinite(s) && s >= 0, "metrics.open: progress_seconds must be 0 or more, got " << s);
      o.console_options.progress_seconds = s;
    }
    lua_pop(L, 1);
    o.jsonl.path = lt_opt_string(L, 1, "jsonl", "");
    lua_getfield(L, 1, "resume");  // true, or the step trainer:resume() returned (0: a fresh run)
    if (lua_type(L, -1) == LUA_TNUMBER) {
      o.jsonl.resume_step = static_cast<int64_t>(lua_tonumber(L, -1));
      o.jsonl.resume = o.jsonl.resume_step > 0;
    } else {
      o.jsonl.resume = lt_opt_bool(L, 1, "resume", false);
    }
    lua_pop(L, 1);
    lua_getfield(L, 1, "config");
    if (lua_type(L, -1) == LUA_TSTRING) {
      o.jsonl.config_json = lua_tostring(L, -1);  // config.json()
    } else if (lua_istable(L, -1)) {
      ConfigValue c = lt_to_config(L, lua_gettop(L), "config");
      LT_CHECK(c.kind == ConfigValue::Kind::table || c.items.empty(),
               "metrics.open: config must be a table of named values, not a list");
      o.jsonl.config_json = c.kind == ConfigValue::Kind::table ? config_to_json(c) : "{}";
      auto steps = c.fields.find("max_steps");  // the run's length, unless total_steps says otherwise
      if (!lt_has_field(L, 1, "total_steps") && steps != c.fields.end() &&
          steps->second.kind == ConfigValue::Kind::number && steps->second.number >= 0 &&
          steps->second.number <= static_cast<double>(kLuaMaxExactInt))
        o.console_options.total_steps = static_cast<int64_t>(steps->second.number);
    } else {
      LT_CHECK(lua_isnil(L, -1), "metrics.open: config must be the config table (or config.json()), got "
                                     << luaL_typename(L, -1));
    }
    lua_pop(L, 1);
    o.jsonl.hardware_json = hardware_of(o.jsonl.config_json);
    o.wandb.config_json = o.jsonl.config_json;
    read_wandb(L, 1, o);
  }
  lt_push<MetricsPtr>(L, MetricsPtr(metrics_open(o)));
  return 1;
}
LT_REGISTER("metrics.open", l_metrics_open);

int l_metrics_print(lua_State* L) {
  int n = lua_gettop(L);
  std::string line;
  lua_getglobal(L, "tostring");
  for (int i = 1; i <= n; i++) {
    lua_pushvalue(L, -1);
    lua_pushvalue(L, i);
    lua_call(L, 1, 1);
    size_t len;
    const char* s = lua_tolstring(L, -1, &len);
    if (!s) return luaL_error(L, "'tostring' must return a string to 'print'");
    if (i > 1) line += '\t';
    line.append(s, len);
    lua_pop(L, 1);
  }
  metrics_console_println(line, stdout);
  return 0;
}
LT_REGISTER("metrics.print", l_metrics_print);

// ============================================================================================
// Metrics methods

int l_metrics_write(lua_State* L) {
  Metrics& m = check_metrics(L, 1);
  int64_t step = lt_check_int(L, 2);
  m.write(step, check_values(L, 3, "log:write"));
  return 0;
}
LT_REGISTER("Metrics:write", l_metrics_write);

int l_metrics_summary(lua_State* L) {
  Metrics& m = check_metrics(L, 1);
  m.summary(check_values(L, 2, "log:summary"));
  return 0;
}
LT_REGISTER("Metrics:summary", l_metrics_summary);

// log:table(title, columns, rows): columns a list of names, rows a list of lists of strings (numbers
// are written as Lua prints them), each as long as columns.
int l_metrics_table(lua_State* L) {
  Metrics& m = check_metrics(L, 1);
  MetricTable t;
  t.title = luaL_checkstring(L, 2);
  auto cell = [&](int idx, const std::string& where) {
    LT_CHECK(lua_type(L, idx) == LUA_TSTRING || lua_type(L, idx) == LUA_TNUMBER,
             "log:table: " << where << " must be a string, got " << luaL_typename(L, idx));
    return std::string(lua_tostring(L, idx));
  };
  LT_CHECK(lua_istable(L, 3) && lt_is_list(L, 3), "log:table: columns must be a list of names");
  for (int i = 1, n = static_cast<int>(lua_objlen(L, 3)); i <= n; i++) {
    lua_rawgeti(L, 3, i);
    t.columns.push_back(cell(-1, "columns[" + std::to_string(i) + "]"));
    lua_pop(L, 1);
  }
  LT_CHECK(lua_istable(L, 4) && lt_is_list(L, 4), "log:table: rows must be a list of lists");
  for (int i = 1, n = static_cast<int>(lua_objlen(L, 4)); i <= n; i++) {
    lua_rawgeti(L, 4, i);
    LT_CHECK(lua_istable(L, -1) && lt_is_list(L, -1), "log:table: rows[" << i << "] must be a list of cells");
    t.rows.emplace_back();
    for (int k = 1, w = static_cast<int>(lua_objlen(L, -1)); k <= w; k++) {
      lua_rawgeti(L, -1, k);
      t.rows.back().push_back(cell(-1, "rows[" + std::to_string(i) + "][" + std::to_string(k) + "]"));
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  m.table(t);
  return 0;
}
LT_REGISTER("Metrics:table", l_metrics_table);

int l_metrics_close(lua_State* L) {
  Metrics& m = check_metrics(L, 1);
  m.close(lua_isnoneornil(L, 2) ? 0 : static_cast<int>(lt_check_int(L, 2)));
  return 0;
}
LT_REGISTER("Metrics:close", l_metrics_close);

int l_metrics_stopped(lua_State* L) {
  lua_pushboolean(L, check_metrics(L, 1).stopped());
  return 1;
}
LT_REGISTER("Metrics:stopped", l_metrics_stopped);

// Written to a temporary name and renamed, so a crash never leaves half a results file.
int l_metrics_write_json(lua_State* L) {
  std::string path = luaL_checkstring(L, 1);
  luaL_checkany(L, 2);
  ConfigValue v = lt_to_config(L, 2, "metrics.write_json: value");
  std::error_code ec;
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  file_write_atomic(path, config_to_json(v) + "\n");
  return 0;
}
LT_REGISTER("metrics.write_json", l_metrics_write_json);

// mkdir -p without a shell: nothing to quote, and a file in the way is one line naming it.
int l_metrics_mkdir(lua_State* L) {
  const std::string path = luaL_checkstring(L, 1);
  try {
    dir_create(path);
  } catch (const Error& e) {
    fail(std::string("metrics.mkdir: ") + e.what());
  }
  return 0;
}
LT_REGISTER("metrics.mkdir", l_metrics_mkdir);

// While the module is loaded, the global print is metrics.print (see the top of the file).
void open_print(lua_State* L) {
  lua_getfield(L, -1, "print");
  lua_setglobal(L, "print");
}
LT_ON_OPEN("metrics", open_print);

int l_metrics_clock(lua_State* L) {
  lua_pushnumber(L,
                 std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count());
  return 1;
}
LT_REGISTER("metrics.clock", l_metrics_clock);

}  // namespace

}  // namespace luatune
