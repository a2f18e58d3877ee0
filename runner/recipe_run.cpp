// Runs a recipe in a fresh Lua state (see recipe_run.h).
#include "runner/recipe_run.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "bindings/lua_util.h"
#include "bindings/modules.h"
#include "host/cli/config_file.h"
#include "host/cli/recipes.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/seed.h"
#include "host/core/strings.h"
#include "host/dist/dist.h"
#include "host/metrics/metrics.h"
#include "host/train/stop.h"

namespace luatune {

namespace {

// ============================================================================================
// Ctrl-C (and SIGTERM, which Slurm, spot instances and job schedulers send before killing): a stop
// that saves (host/train/stop.h). The handler records the signal and arms a hook; at the next Lua
// instruction (a C++ step already running finishes first) the hook either waits for the trainers'
// safe point, where the step is logged and its checkpoint can be written, or, when none is due,
// saves what the live trainers have not saved and stops the recipe there. A second signal kills
// the process.

lua_State* g_state = nullptr;
volatile std::sig_atomic_t g_interrupted = 0;

void interrupt_hook(lua_State* L, lua_Debug*) {
  if (stop_defer_to_safe_point()) {  // look again a little later
    lua_sethook(L, interrupt_hook, LUA_MASKCOUNT, 1000);
    return;
  }
  lua_sethook(L, nullptr, 0, 0);
  if (dist_active()) {
    stop_note("; outside a training loop, so nothing was saved (ranks save together only at a step)");
  } else {
    try {
      stop_save_now();
    } catch (const std::exception& e) {
      stop_note("; saving on the way out failed: " + std::string(e.what()));
    }
  }
  lua_pushlightuserdata(L, lt_stop_token());
  lua_error(L);
}

// A second Ctrl-C more than a second after the first ends the process at once (a step that never
// returns cannot be stopped between steps). Signals closer together count as one: `timeout` and
// terminals may deliver the same interrupt to the process and to its group.
volatile std::sig_atomic_t g_first_interrupt_s = 0;

void on_sigint(int sig) {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (g_interrupted && now.tv_sec - g_first_interrupt_s >= 1) {
    const char msg[] = "runner: second Ctrl-C; exiting now\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(kExitInterrupted);
  }
  if (!g_interrupted) {
    g_first_interrupt_s = static_cast<std::sig_atomic_t>(now.tv_sec);
    stop_request(sig);
  }
  g_interrupted = 1;
  if (g_state) lua_sethook(g_state, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

// ============================================================================================
// Error handling

// What ended a run, as the message handler classified it (docs/recipes.md, "Errors"):
//   usage     a UsageError from a binding (bad config or call): one line, exit status 2;
//   user      the user's data, paths or values, found at run time: one line, exit status 1. That
//             is a luatune::Error a binding raised (not an InternalError), an allocation failure,
//             or a string a script raised on purpose with error() or assert(cond, "message");
//   internal  everything else, a bug somewhere: Lua runtime errors ("attempt to index a nil
//             value"), LibTorch's and other C++ exceptions, luatune's internal errors, a bare
//             assert(cond), error values that are not strings: the message and a traceback.
// LUATUNE_TRACEBACK=1 (or runner --traceback, which sets it) adds the traceback to every kind.
enum class Failure { usage, user, internal };
Failure g_failure = Failure::internal;

// Registry keys of the original error and assert functions (a recipe may shadow the globals).
char g_error_key, g_assert_key;

bool traceback_wanted() {
  const char* v = std::getenv("LUATUNE_TRACEBACK");
  return v && *v && std::string(v) != "0";
}

// Whether the function that raised the error being handled (level 1) is the one under `key`.
bool raised_by(lua_State* L, void* key) {
  lua_Debug ar;
  if (!lua_getstack(L, 1, &ar) || !lua_getinfo(L, "f", &ar)) return false;
  lua_pushlightuserdata(L, key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  const bool same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same;
}

Failure classify(lua_State* L, const char* msg) {
  const RunState& st = lt_run_state(L);
  if (!msg || lua_type(L, 1) != LUA_TSTRING) return Failure::internal;
  if (msg == st.usage_message) return Failure::usage;
  if (msg == st.user_message) return Failure::user;
  if (raised_by(L, &g_error_key)) return Failure::user;
  // assert(cond) without a message says "FILE:LINE: assertion failed!": a check that explains
  // nothing is a bug.
  if (raised_by(L, &g_assert_key) && !str_ends_with(msg, "assertion failed!")) return Failure::user;
  return Failure::internal;
}

// Message handler for the recipe's pcall: classifies the error (above) and adds a traceback to
// internal ones; leaves the validate and stop tokens as they are.
int message_handler(lua_State* L) {
  if (lua_touserdata(L, 1) == lt_validate_done_token() || lua_touserdata(L, 1) == lt_stop_token()) return 1;
  const char* msg = lua_tostring(L, 1);
  g_failure = classify(L, msg);
  if (g_failure != Failure::internal && !traceback_wanted()) return 1;
  if (!msg) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
      msg = lua_tostring(L, -1);
    else
      msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

// A run that failed before writing anything but run.json into its output_dir (a bad data line, a
// wrong path found at run time) leaves the directory as it found it: the run.json it held (or
// none), and no directory at all when config{} made it.
void output_dir_restore(const RunState& st) {
  const auto& c = st.output_dir_claimed;
  if (c.dir.empty()) return;
  auto without_run_json = [](DirListing l) {
    l.erase(std::remove_if(l.begin(), l.end(), [](const auto& e) { return e.first == "run.json"; }), l.end());
    return l;
  };
  if (without_run_json(dir_listing(c.dir)) != without_run_json(c.before)) return;  // it wrote something
  const std::string run_json = c.dir + "/run.json";
  std::error_code ec;
  try {
    if (!c.had_run_json)
      std::filesystem::remove(run_json, ec);
    else if (!file_exists(run_json) || file_read(run_json) != c.run_json)  // the claim wrote its own
      file_write_atomic(run_json, c.run_json);
  } catch (const std::exception&) {
    return;  // the run's own run.json stays: better than none
  }
  if (!c.existed) std::filesystem::remove(c.dir, ec);  // removes only an empty directory
}

// A Lua error outside any pcall (the runner's own set-up code) would otherwise abort.
int on_panic(lua_State* L) {
  const char* msg = lua_tostring(L, -1);
  std::fprintf(stderr, "error: %s (outside the recipe)\n", msg ? msg : "unprotected Lua error");
  std::fflush(stdout);
  _exit(kExitFailed);
}

lua_State* open_state(const std::string& recipe_path) {
  lua_State* L = luaL_newstate();
  if (!L) fail("cannot create a Lua state (out of memory)");
  lua_atpanic(L, on_panic);
  luaL_openlibs(L);
  for (auto [key, name] : {std::pair<void*, const char*>{&g_error_key, "error"}, {&g_assert_key, "assert"}}) {
    lua_pushlightuserdata(L, key);
    lua_getglobal(L, name);
    lua_rawset(L, LUA_REGISTRYINDEX);
  }
  lt_open_modules(L);
  std::string home = luatune_home();
  std::string path = path_dirname(recipe_path) + "/?.lua;";
  if (!home.empty()) path = home + "/scripts/lua/?.lua;" + path;
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "path");
  path += lua_tostring(L, -1);
  lua_pop(L, 1);
  lua_pushstring(L, path.c_str());
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
  lt_seed_all(L, seed_from_env());  // for scripts without config{}, which reseeds (docs/reproducibility.md)
  return L;
}

// Reads each --config FILE into overrides, in order: JSON and YAML in host/cli/config_file.cpp,
// a Lua chunk returning a table here.
void load_config_files(lua_State* L, const Command& cmd, RunState& st) {
  for (const auto& file : cmd.config_files) {
    if (config_file_format(file) != ConfigFileFormat::lua) {
      for (auto& o : config_file_read(file)) st.overrides.push_back(std::move(o));
      continue;
    }
    if (luaL_loadfile(L, file.c_str()) != 0 || lua_pcall(L, 0, 1, 0) != 0) {
      std::string msg = lua_tostring(L, -1) ? lua_tostring(L, -1) : "?";
      fail_usage("config: cannot read overrides file " + msg);
    }
    if (!lua_istable(L, -1))
      fail_usage("config: overrides file '" + file +
                 "' must return a table, e.g. return { lr = 1e-4 }; it returned a " + luaL_typename(L, -1));
    ConfigValue t = lt_to_config(L, -1, "");
    if (t.kind == ConfigValue::Kind::list && t.items.empty())
      t = ConfigValue::of_table();  // {}: no overrides
    if (t.kind != ConfigValue::Kind::table)
      fail_usage("config: overrides file '" + file + "' must return a table of named values, not a list");
    for (auto& o : config_flatten(t, file)) st.overrides.push_back(std::move(o));
    lua_pop(L, 1);
  }
  for (const auto& arg : cmd.overrides) st.overrides.push_back(config_parse_override(arg));
}

int run_in_state(lua_State* L, const std::string& path, const Command& cmd, ConfigValue* resolved) {
  RunState& st = lt_run_state(L);
  st.recipe = path;
  st.validate_only = cmd.verb == Command::Verb::validate || cmd.verb == Command::Verb::plan ||
                     cmd.verb == Command::Verb::recipe_help;
  st.check_paths = cmd.verb != Command::Verb::plan;
  st.describe_only = cmd.verb == Command::Verb::recipe_help;
  load_config_files(L, cmd, st);

  lua_pushcfunction(L, message_handler);
  g_failure = Failure::internal;
  if (luaL_loadfile(L, path.c_str()) != 0) {
    std::fprintf(stderr, "error: %s\n", lua_tostring(L, -1));
    return kExitFailed;
  }
  g_state = L;
  auto previous = std::signal(SIGINT, on_sigint);
  auto previous_term = std::signal(SIGTERM, on_sigint);
  int rc = lua_pcall(L, 0, 0, -2);
  std::signal(SIGINT, previous);
  std::signal(SIGTERM, previous_term);
  g_state = nullptr;

  if (rc != 0) {
    metrics_console_clear_live();  // an error message must not land inside a progress line
    if (lua_touserdata(L, -1) == lt_validate_done_token()) {
      if (resolved) *resolved = st.resolved;
      if (cmd.verb == Command::Verb::validate)
        std::printf("validate: %s: config resolved; nothing was run\n", path.c_str());
      return kExitOk;
    }
    if (lua_touserdata(L, -1) == lt_stop_token()) {
      const char* by = stop_signal() == SIGTERM ? "SIGTERM" : "Ctrl-C (SIGINT)";
      std::string text = "runner: stopped by " + std::string(by) + stop_report();
      std::fprintf(stderr, "%s\n", text.c_str());
      metrics_console_tap(text);
      return kExitInterrupted;
    }
    const char* msg = lua_tostring(L, -1);
    const bool usage = g_failure == Failure::usage;
    std::string text = std::string(usage ? "" : "error: ") + (msg ? msg : "(no message)");
    std::fprintf(stderr, "%s\n", text.c_str());
    for (const auto& line : str_split(text, '\n')) metrics_console_tap(line);  // W&B's output.log
    if (g_interrupted || st.interrupted_by) {  // the runner's handler, or sweep.run's while it waited
      int sig = g_interrupted ? stop_signal() : st.interrupted_by;
      std::fprintf(stderr, "runner: interrupted by %s; stopped between steps\n",
                   sig == SIGTERM ? "SIGTERM" : "Ctrl-C");
      return kExitInterrupted;
    }
    return usage ? kExitUsage : kExitFailed;
  }
  if (cmd.verb == Command::Verb::sweep && st.sweeps_run == 0) {
    std::fprintf(stderr,
                 "runner sweep: %s ran no sweep (it never called sweep.run{...}); see docs/sweeps.md\n",
                 path.c_str());
    return kExitUsage;
  }
  if (!st.config_resolved && (st.validate_only || !st.overrides.empty())) {
    std::fprintf(stderr, "config: %s never called config{}, so %s\n", path.c_str(),
                 st.validate_only ? "there is no config to validate" : "its overrides cannot apply");
    return kExitUsage;
  }
  return kExitOk;
}

}  // namespace

int recipe_run(const std::string& path, const Command& cmd, ConfigValue* resolved) {
  lua_State* L = open_state(path);
  int rc;
  try {
    // One of several processes (torchrun, Slurm, runner --nproc): join the job first, so the
    // recipe's trainer, data and saves see their rank.
    if (cmd.verb == Command::Verb::run) {
      DistEnv env = dist_env();
      if (env.world_size > 1) dist_init(env, dist_options_from_env());
    }
    rc = run_in_state(L, path, cmd, resolved);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    rc = kExitUsage;
  } catch (const std::bad_alloc&) {  // one no caller named: say so rather than "std::bad_alloc"
    std::fprintf(stderr, "error: %s: out of memory (std::bad_alloc)\n", path.c_str());
    rc = kExitFailed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    metrics_console_tap(std::string("error: ") + e.what());
    rc = kExitFailed;
  }
  // A failed run's logs hear its exit status (W&B shows it); lua_close would close them with 0.
  if (rc != kExitOk) metrics_close_open(rc);
  if (rc != kExitOk) output_dir_restore(lt_run_state(L));
  std::fflush(stdout);
  lua_close(L);
  dist_shutdown();
  return rc;
}

}  // namespace luatune
