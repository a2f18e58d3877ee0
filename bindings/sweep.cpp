// Lua module `sweep` over host/sweep/: sweep.run{...} runs a hyperparameter sweep of a recipe and
// returns its trials best first; sweep.pareto marks the trials no other beats on two objectives;
// sweep.table renders trials as Markdown. Format and behaviour: docs/sweeps.md.
#include <cmath>
#include <csignal>

#include "bindings/lua_util.h"
#include "host/core/error.h"
#include "host/sweep/sweep_engine.h"
#include "host/train/stop.h"

namespace luatune {
namespace {

void push_values(lua_State* L, const SweepValues& values) {
  lua_createtable(L, 0, static_cast<int>(values.size()));
  for (const auto& [k, v] : values) {
    lt_push_config(L, v);
    lua_setfield(L, -2, k.c_str());
  }
}

void push_trial(lua_State* L, const SweepTrial& t) {
  lua_createtable(L, 0, 10);
  lt_set_number(L, "index", static_cast<double>(t.index));
  lt_set_string(L, "name", t.name);
  lt_set_string(L, "dir", t.dir);
  push_values(L, t.values);
  lua_setfield(L, -2, "config");
  lt_set_string(L, "status", sweep_status_name(t.status));
  lt_set_number(L, "exit_code", t.exit_code);
  if (t.metric) lt_set_number(L, "metric", *t.metric);
  lua_createtable(L, 0, static_cast<int>(t.metrics.size()));
  for (const auto& [k, v] : t.metrics) lt_set_number(L, k.c_str(), v);
  lua_setfield(L, -2, "metrics");
  lt_set_number(L, "seconds", t.seconds);
  if (!t.error.empty()) {
    lt_set_string(L, "error", t.error);
  }
}

// host/sweep checks the values with its own messages (and the same keys: lt_api_problems).
int l_sweep_run(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lt_check_option_names(L, 1, lt_api("sweep.run"));
  lt_check_defaults(L, 1, sweep_option_defaults());
  SweepSpec spec = sweep_spec_parse(lt_to_config(L, 1, "sweep.run"));
  RunState& st = lt_run_state(L);
  st.sweeps_run++;
  SweepOutcome out = sweep_run(spec);
  if (out.interrupted) {  // the runner ends quietly with exit status 130, as for a trainer's stop
    st.interrupted_by = out.signal;
    stop_request(out.signal);
    stop_note(
        "; sweep.run stopped the running trials: run the sweep again to finish them (a trial that "
        "saved a checkpoint continues from it)");
    throw StopRequested("sweep.run: interrupted");
  }
  lua_createtable(L, static_cast<int>(out.trials.size()), 0);
  for (size_t i = 0; i < out.trials.size(); i++) {
    push_trial(L, out.trials[i]);
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
  return 1;
}
LT_REGISTER("sweep.run", l_sweep_run);

// A trial table's value named `key`: the trial's own field (seconds, index, ...), else its
// config's, else its metrics'. Leaves it on the stack (nil when none has it).
void push_trial_value(lua_State* L, int trial, const std::string& key) {
  lua_getfield(L, trial, key.c_str());
  if (!lua_isnil(L, -1)) return;
  lua_pop(L, 1);
  for (const char* part : {"config", "metrics"}) {
    lua_getfield(L, trial, part);
    if (lua_istable(L, -1)) {
      lua_getfield(L, -1, key.c_str());
      lua_remove(L, -2);
      if (!lua_isnil(L, -1)) return;
    }
    lua_pop(L, 1);
  }
  lua_pushnil(L);
}

// Checks argument `idx` is a list of tables (trials) and returns its length.
int check_trials(lua_State* L, int idx) {
  luaL_checktype(L, idx, LUA_TTABLE);
  int n = static_cast<int>(lua_objlen(L, idx));
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, idx, i);
    bool ok = lua_istable(L, -1);
    lua_pop(L, 1);
    if (!ok) luaL_argerror(L, idx, ("trials[" + std::to_string(i) + "] is not a trial table").c_str());
  }
  return n;
}

SweepGoal goal_option(lua_State* L, int idx, const char* key) {
  std::string g = lt_opt_string(L, idx, key, "minimize");
  if (g != "minimize" && g != "maximize")
    fail_usage(std::string("sweep.pareto: ") + key + " must be \"minimize\" or \"maximize\", got \"" + g +
               "\"");
  return g == "minimize" ? SweepGoal::minimize : SweepGoal::maximize;
}

// A trial missing either value is never on the front.
int l_sweep_pareto(lua_State* L) {
  int n = check_trials(L, 1);
  lt_check_required_options(L, 2, lt_api("sweep.pareto"));
  std::string x = lt_opt_string(L, 2, "x", ""), y = lt_opt_string(L, 2, "y", "");
  if (x.empty() || y.empty()) fail_usage("sweep.pareto: options x and y (metric names) are required");
  std::vector<SweepGoal> goals = {goal_option(L, 2, "x_goal"), goal_option(L, 2, "y_goal")};
  std::vector<std::vector<double>> points;
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, 1, i);
    int t = lua_gettop(L);
    std::vector<double> p;
    for (const auto& key : {x, y}) {
      push_trial_value(L, t, key);
      p.push_back(lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : std::nan(""));
      lua_pop(L, 1);
    }
    points.push_back(p);
    lua_pop(L, 1);
  }
  std::vector<bool> front = sweep_pareto(points, goals);
  lua_newtable(L);
  int out = 0;
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, 1, i);
    lt_set_bool(L, "pareto", front[static_cast<size_t>(i - 1)]);
    if (front[static_cast<size_t>(i - 1)])
      lua_rawseti(L, -2, ++out);
    else
      lua_pop(L, 1);
  }
  return 1;
}
LT_REGISTER("sweep.pareto", l_sweep_pareto);

int l_sweep_table(lua_State* L) {
  int n = check_trials(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  std::vector<std::string> keys, headers;
  for (int c = 1; c <= static_cast<int>(lua_objlen(L, 2)); c++) {
    lua_rawgeti(L, 2, c);
    if (lua_istable(L, -1)) {
      lua_rawgeti(L, -1, 1);
      lua_rawgeti(L, -2, 2);
      if (lua_type(L, -2) != LUA_TSTRING) luaL_argerror(L, 2, "a column is a name or {name, \"Heading\"}");
      keys.push_back(lua_tostring(L, -2));
      headers.push_back(lua_isstring(L, -1) ? lua_tostring(L, -1) : keys.back());
      lua_pop(L, 2);
    } else if (lua_type(L, -1) == LUA_TSTRING) {
      keys.push_back(lua_tostring(L, -1));
      headers.push_back(keys.back());
    } else {
      luaL_argerror(L, 2, "a column is a name or {name, \"Heading\"}");
    }
    lua_pop(L, 1);
  }
  if (keys.empty()) luaL_argerror(L, 2, "a list of column names expected");
  std::vector<std::vector<std::string>> rows;
  for (int i = 1; i <= n; i++) {
    lua_rawgeti(L, 1, i);
    int t = lua_gettop(L);
    std::vector<std::string> row;
    for (const auto& key : keys) {
      lua_getfield(L, t, "config");
      bool in_config = false;
      if (lua_istable(L, -1)) {
        lua_getfield(L, -1, key.c_str());
        in_config = !lua_isnil(L, -1);
        lua_pop(L, 1);
      }
      lua_pop(L, 1);
      push_trial_value(L, t, key);
      int type = lua_type(L, -1);
      if (type == LUA_TNUMBER && !in_config) {  // a metric: fixed precision, as results.md shows them
        double v = lua_tonumber(L, -1);
        row.push_back(key == "seconds" ? sweep_show_seconds(v) : sweep_show_metric(v));
      } else if (type == LUA_TBOOLEAN) {
        row.push_back(lua_toboolean(L, -1) ? "yes" : "no");
      } else if (type == LUA_TNIL) {
        row.push_back("");
      } else {
        row.push_back(sweep_show(lt_to_config(L, -1, key)));
      }
      lua_pop(L, 1);
    }
    rows.push_back(std::move(row));
    lua_pop(L, 1);
  }
  std::string md = sweep_markdown_table(headers, rows);
  lua_pushlstring(L, md.data(), md.size());
  return 1;
}
LT_REGISTER("sweep.table", l_sweep_table);

}  // namespace

}  // namespace luatune
