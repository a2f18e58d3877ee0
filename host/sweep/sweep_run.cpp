// Running a sweep: each trial a child process (the runner itself, `run RECIPE key=value ...`) in
// its own process group with its output in trial-NNN/trial.log, up to `parallel` at once, each
// finished one appended to trials.jsonl (fsync'd) before the next line is printed. A crash, an
// OOM or a NaN in one trial is recorded and the sweep goes on; Ctrl-C / SIGTERM stop the running
// trials (SIGTERM, then SIGKILL after a grace period) without recording them, so a resume reruns them.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "host/cli/recipes.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/core/process.h"
#include "host/core/strings.h"
#include "host/sweep/sweep_engine.h"
#include "host/train/run_dir.h"

namespace luatune {

namespace {

// ============================================================================================
// Child processes

int open_log(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("sweep: cannot write '" + path + "': " + std::strerror(errno));
  return fd;
}

// A trial: stdout and stderr to `log_path`, or stderr to `err_path` when given (see process_spawn
// for the rest).
pid_t spawn(const std::string& exe, const std::vector<std::string>& args, const std::vector<std::string>& env,
            const std::string& log_path, const std::string& err_path = "") {
  struct Close {
    int fd;
    ~Close() {
      if (fd >= 0) ::close(fd);
    }
  } log{open_log(log_path)}, err{err_path.empty() ? -1 : open_log(err_path)};
  return process_spawn(exe, args, env, log.fd, err.fd >= 0 ? err.fd : log.fd, "sweep");
}

// The last 64 KiB of a log: where errors are, without reading a long training log whole.
std::string log_tail(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return "";
  std::fseek(f, 0, SEEK_END);
  long size = std::ftell(f);
  long from = size > 65536 ? size - 65536 : 0;
  std::fseek(f, from, SEEK_SET);
  std::string out(static_cast<size_t>(size - from), '\0');
  size_t n = std::fread(out.data(), 1, out.size(), f);
  std::fclose(f);
  out.resize(n);
  return out;
}

void append_text(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) fail("sweep: cannot append to '" + path + "': " + std::strerror(errno));
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = ::fsync(fd) == 0 && ok;
  int saved = errno;
  ::close(fd);
  if (!ok) fail("sweep: cannot append to '" + path + "': " + std::strerror(saved));
}

void append_line(const std::string& path, const std::string& line) {
  append_text(path, line + "\n");
}

std::string show_values(const SweepValues& values) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : values) parts.push_back(k + "=" + sweep_show(v));
  return str_join(parts, " ");
}

// One running trial.
struct Running {
  pid_t pid = 0;
  SweepPlan plan;
  std::string dir, device;
  double start = 0;
  double term_sent = -1;  // when SIGTERM went to its group (timeout or interrupt)
  bool timed_out = false;
  bool killed = false;
};

// A trial's settings that `runner validate` refused.
struct Refusal {
  int exit_code = 0;
  std::string error;  // the runner's error (sweep_log_error)
  std::string log;    // the whole output: OUTPUT_DIR/validate/trial-NNN.log
};

// `runner validate RECIPE ...` with each trial's settings, a few at once (a process start-up and
// the config checks each): a value the recipe's config checks refuse (lora.r = -1), a misspelt key
// or a wrong type shows up before any trial runs. Returns the refused ones by index;
// a passing trial's log is removed. Interrupted, it stops the checks and returns what it has.
std::map<int64_t, Refusal> check_settings(const std::string& exe, const SweepSpec& spec,
                                          const std::string& recipe_path,
                                          const std::vector<SweepPlan>& plans) {
  std::map<int64_t, Refusal> refused;
  if (plans.empty()) return refused;
  const std::string dir = spec.output_dir + "/validate";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const size_t at_once = static_cast<size_t>(std::min(8, process_cpu_count()));
  std::vector<std::pair<pid_t, const SweepPlan*>> running;
  struct KillOnError {  // should spawning fail midway, no check outlives the sweep
    std::vector<std::pair<pid_t, const SweepPlan*>>& running;
    ~KillOnError() {
      for (auto& [pid, p] : running) {
        kill(-pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } kill_on_error{running};
  const std::vector<std::string> env = process_env({});
  size_t next = 0;
  bool stopping = false;
  while ((!stopping && next < plans.size()) || !running.empty()) {
    if (!stopping && InterruptCounter::count()) {
      stopping = true;
      for (auto& [pid, p] : running) kill(-pid, SIGTERM);
    }
    while (!stopping && next < plans.size() && running.size() < at_once) {
      const SweepPlan& p = plans[next++];
      pid_t pid = spawn(exe, sweep_trial_args(spec, "validate", recipe_path, p), env,
                        dir + "/" + p.name + ".log", dir + "/" + p.name + ".err");
      running.emplace_back(pid, &p);
    }
    for (size_t i = 0; i < running.size();) {
      int status = 0;
      pid_t got = waitpid(running[i].first, &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) {
        i++;
        continue;
      }
      // The error from stderr alone: a usage error has no "error: " to find it by in the config
      // listing validate prints to stdout. The log gets both, stderr last.
      const SweepPlan& p = *running[i].second;
      std::string log = dir + "/" + p.name + ".log", err_path = dir + "/" + p.name + ".err";
      int code = got < 0 ? 1 : process_exit_code(status);
      std::string err = log_tail(err_path);
      std::filesystem::remove(err_path, ec);
      if (code == 0) {
        std::filesystem::remove(log, ec);
      } else if (!stopping) {
        append_text(log, err);
        refused[p.index] = {code, sweep_log_error(err), log};
      }
      running.erase(running.begin() + static_cast<long>(i));
    }
    if (!running.empty()) {
      struct timespec ts {
        0, 20 * 1000 * 1000
      };
      nanosleep(&ts, nullptr);
    }
  }
  std::filesystem::remove(dir, ec);  // only when empty: refused trials' logs stay until recorded
  return refused;
}

// Whether an earlier attempt of the trial in `dir` stopped with a complete checkpoint that a run of
// its recipe can resume: its run.json's config has a resume key, and checkpoints/ has a checkpoint.
bool trial_resumable(const std::string& dir) {
  if (!file_exists(dir + "/run.json")) return false;
  nlohmann::json run = json_parse_or_discard(file_read(dir + "/run.json"));
  if (!run.is_object() || !run.contains("config") || !run["config"].is_object() ||
      !run["config"].contains("resume"))
    return false;
  return !checkpoints_list(dir + "/checkpoints").empty();
}

}  // namespace

// ============================================================================================
// The sweep

SweepOutcome sweep_run(const SweepSpec& spec, const SweepRunOptions& options) {
  std::string recipe_path = recipe_resolve(spec.recipe);
  std::vector<SweepPlan> plan = sweep_plan(spec);
  std::error_code ec;
  std::filesystem::create_directories(spec.output_dir, ec);
  if (!dir_exists(spec.output_dir))
    fail("sweep: cannot create output_dir '" + spec.output_dir + "': " + ec.message());

  // One sweep per directory at a time: a second one would run the same trials again.
  std::string lock_path = spec.output_dir + "/.sweep.lock";
  int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0) fail("sweep: cannot open '" + lock_path + "': " + std::strerror(errno));
  struct LockFd {
    int fd;
    ~LockFd() { ::close(fd); }
  } lock_guard{lock};
  if (flock(lock, LOCK_EX | LOCK_NB) != 0)
    fail_usage("sweep.run: another sweep is running in " + spec.output_dir + " (it holds " + lock_path + ")",
               "wait for it, or watch it with: runner sweep --report " + spec.output_dir);

  sweep_check_resume(spec, plan);
  std::map<int64_t, SweepTrial> done = sweep_read_trials(spec.output_dir);
  std::vector<SweepPlan> pending = sweep_pending(plan, done, spec.retry_failed);
  int64_t recorded = 0;
  for (const auto& p : plan) recorded += done.count(p.index) ? 1 : 0;

  std::string exe = options.runner.empty() ? process_self_exe("sweep") : options.runner;
  std::string trials_path = spec.output_dir + "/trials.jsonl";
  SweepInfo info = sweep_info(spec, static_cast<int64_t>(plan.size()));
  int64_t total = static_cast<int64_t>(plan.size());
  std::printf(
      "sweep %s: %lld trials of %s (%s over %s), %d at a time; %lld recorded before, %lld to run; in %s\n",
      spec.name.c_str(), static_cast<long long>(total), spec.recipe.c_str(), sweep_method_name(spec.method),
      str_join(info.keys, ", ").c_str(), spec.parallel, static_cast<long long>(recorded),
      static_cast<long long>(pending.size()), spec.output_dir.c_str());
  if (pending.empty())
    std::printf("sweep %s: nothing to run: every trial is recorded in %s%s\n", spec.name.c_str(),
                trials_path.c_str(),
                spec.retry_failed ? "" : " (retry_failed = true reruns the ones not ok)");
  std::fflush(stdout);

  SweepOutcome out;
  InterruptCounter signals;
  // Every pending trial's settings, before any runs. When the recipe refuses them all, the sweep's
  // own settings are wrong (a misspelt key, a missing data file) and it fails, unless a trial
  // recorded before still passes: then these values alone are invalid (a resumed sweep whose
  // pending trials are the invalid ones, retry_failed) and are recorded like the others.
  std::filesystem::remove_all(spec.output_dir + "/validate", ec);  // an earlier sweep's refusals
  std::map<int64_t, Refusal> refused = check_settings(exe, spec, recipe_path, pending);
  if (!signals.count() && !pending.empty() && refused.size() == pending.size()) {
    const SweepPlan* before = nullptr;  // a trial recorded before and not to run now, an ok one if any
    for (const auto& p : plan) {
      auto d = done.find(p.index);
      bool to_run =
          std::any_of(pending.begin(), pending.end(), [&](const SweepPlan& q) { return q.index == p.index; });
      if (d != done.end() && !to_run && (!before || d->second.status == SweepStatus::ok)) before = &p;
      if (before && done.at(before->index).status == SweepStatus::ok) break;
    }
    bool values_only = before && check_settings(exe, spec, recipe_path, {*before}).empty();
    const Refusal& r = refused.begin()->second;
    if (!values_only && !signals.count())
      fail_usage(
          "sweep.run: recipe " + spec.recipe + " refuses " + pending.front().name +
              "'s settings (runner validate, exit " + std::to_string(r.exit_code) + "):\n" + r.error,
          "fix the key or value in sweep.run's fixed or parameters (no trial's settings pass); the whole "
          "output is in " +
              r.log);
  }
  // Only a sweep whose settings the recipe accepts is recorded: fixing a typo is not "another sweep".
  if (!signals.count()) file_write_atomic(spec.output_dir + "/sweep.json", sweep_json(spec, plan));

  // The invalid trials: one line each, recorded as failed (trial.log holds the check's output), not run.
  if (!signals.count() && !refused.empty()) {
    std::printf(
        "sweep %s: recipe %s refuses the settings of %zu of the %zu trials to run; recorded as failed:\n",
        spec.name.c_str(), spec.recipe.c_str(), refused.size(), pending.size());
    std::vector<SweepPlan> valid;
    for (const auto& p : pending) {
      auto it = refused.find(p.index);
      if (it == refused.end()) {
        valid.push_back(p);
        continue;
      }
      SweepTrial t;
      t.index = p.index;
      t.name = p.name;
      t.dir = spec.output_dir + "/" + p.name;
      t.values = p.values;
      t.status = SweepStatus::failed;
      t.exit_code = it->second.exit_code;
      t.error = "invalid settings (runner validate): " + sweep_error_line(it->second.error);
      std::filesystem::remove_all(t.dir, ec);
      std::filesystem::create_directories(t.dir, ec);
      std::filesystem::rename(it->second.log, t.dir + "/trial.log", ec);
      append_line(trials_path, sweep_trial_json(t));
      out.invalid++;
      std::printf("%s %s: %s\n", p.name.c_str(), show_values(p.values).c_str(), t.error.c_str());
    }
    std::filesystem::remove(spec.output_dir + "/validate", ec);
    pending = std::move(valid);
    std::fflush(stdout);
  }

  // Environment every trial shares: threads split between parallel trials, W&B grouping, env{}.
  std::vector<std::pair<std::string, std::string>> shared_env;
  int at_once = static_cast<int>(
      std::min<size_t>(static_cast<size_t>(spec.parallel), std::max<size_t>(1, pending.size())));
  if (at_once > 1)  // env{} may still set its own
    shared_env.emplace_back("OMP_NUM_THREADS", std::to_string(std::max(1, process_cpu_count() / at_once)));
  if (!spec.wandb_project.empty()) {
    shared_env.emplace_back("WANDB_RUN_GROUP", spec.name);
    shared_env.emplace_back("WANDB_JOB_TYPE", "trial");
  }
  for (const auto& [k, v] : spec.env) shared_env.emplace_back(k, v.string);

  std::vector<Running> running;
  std::map<std::string, int> busy;  // device -> trials on it now
  size_t next = 0;
  bool stopping = false;
  int stop_signals = 0;
  auto label = [&](const SweepPlan& p) {
    return "trial " + std::to_string(p.index) + "/" + std::to_string(total) + " " + show_values(p.values);
  };

  // Should the sweep itself fail (a full disk), its trials must not outlive it.
  struct KillOnError {
    std::vector<Running>& running;
    ~KillOnError() {
      for (auto& r : running) {
        kill(-r.pid, SIGKILL);
        waitpid(r.pid, nullptr, 0);
      }
    }
  } kill_on_error{running};

  while ((signals.count() == 0 && next < pending.size()) || !running.empty()) {
    // Start trials while there is room.
    while (!stopping && signals.count() == 0 && next < pending.size() &&
           static_cast<int>(running.size()) < spec.parallel) {
      Running r;
      r.plan = pending[next++];
      r.dir = spec.output_dir + "/" + r.plan.name;
      // A trial a stop interrupted after saving a checkpoint continues from it (resume=true); any
      // other interrupted or retried attempt leaves nothing behind.
      const bool resume = trial_resumable(r.dir);
      if (!resume) std::filesystem::remove_all(r.dir, ec);
      std::filesystem::create_directories(r.dir, ec);
      auto env = shared_env;
      if (!spec.devices.empty()) {
        r.device = spec.devices.front();
        for (const auto& d : spec.devices)
          if (busy[d] < busy[r.device]) r.device = d;
        busy[r.device]++;
        env.emplace_back("CUDA_VISIBLE_DEVICES", r.device);
      }
      if (!spec.wandb_project.empty()) env.emplace_back("WANDB_NAME", spec.name + "-" + r.plan.name);
      r.start = process_now_seconds();
      std::vector<std::string> args = sweep_trial_args(spec, "run", recipe_path, r.plan);
      if (resume) args.push_back("resume=true");
      r.pid = spawn(exe, args, process_env(env), r.dir + "/trial.log");
      std::printf("%s: started (%s)%s\n", label(r.plan).c_str(), r.dir.c_str(),
                  resume ? ", resuming from its checkpoint" : "");
      std::fflush(stdout);
      running.push_back(std::move(r));
    }

    // Reap the finished ones.
    for (size_t i = 0; i < running.size();) {
      Running& r = running[i];
      int status = 0;
      pid_t got = waitpid(r.pid, &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) {
        i++;
        continue;
      }
      if (!r.device.empty()) busy[r.device]--;
      int code = got < 0 ? 1 : process_exit_code(status);
      if (stopping && code != 0 && !r.timed_out) {  // stopped by the interrupt: a resume reruns it
        std::printf("%s: interrupted\n", label(r.plan).c_str());
        running.erase(running.begin() + static_cast<long>(i));
        continue;
      }
      SweepTrial t;
      t.index = r.plan.index;
      t.name = r.plan.name;
      t.dir = r.dir;
      t.values = r.plan.values;
      t.seconds = process_now_seconds() - r.start;
      t.metrics = sweep_read_metrics(r.dir);
      sweep_classify(t, spec.metric, code, r.timed_out, log_tail(r.dir + "/trial.log"));
      append_line(trials_path, sweep_trial_json(t));
      out.ran++;
      std::string result = sweep_status_name(t.status);
      if (t.metric) result += " " + spec.metric + " " + sweep_show_metric(*t.metric);
      if (t.status != SweepStatus::ok && t.status != SweepStatus::nan) {
        if (t.exit_code != 0) result += " (exit " + std::to_string(t.exit_code) + ")";
        std::string first = t.error.substr(0, t.error.find('\n'));
        if (!first.empty()) result += ": " + first;
      }
      std::printf("%s: %s (%.0fs)\n", label(r.plan).c_str(), result.c_str(), t.seconds);
      std::fflush(stdout);
      running.erase(running.begin() + static_cast<long>(i));
    }

    // Timeouts, interrupts, and the grace period after SIGTERM.
    double now = process_now_seconds();
    if (signals.count() > stop_signals) {
      if (!stopping && !running.empty())
        std::printf("sweep %s: interrupted by %s; stopping %zu running trial(s) (again to kill them now)\n",
                    spec.name.c_str(), signals.first_signal() == SIGTERM ? "SIGTERM" : "Ctrl-C",
                    running.size());
      std::fflush(stdout);
      for (auto& r : running) {
        if (stop_signals == 0) {
          kill(-r.pid, SIGTERM);
          r.term_sent = now;
        } else {
          kill(-r.pid, SIGKILL);
          r.killed = true;
        }
      }
      stopping = true;
      stop_signals = signals.count();
    }
    for (auto& r : running) {
      if (spec.timeout > 0 && r.term_sent < 0 && now - r.start > spec.timeout) {
        r.timed_out = true;
        r.term_sent = now;
        kill(-r.pid, SIGTERM);
      }
      if (r.term_sent >= 0 && !r.killed && now - r.term_sent > options.stop_grace_seconds) {
        kill(-r.pid, SIGKILL);
        r.killed = true;
      }
    }
    if (!running.empty()) {
      struct timespec ts {
        0, 50 * 1000 * 1000
      };  // 50 ms: trials run for seconds to hours
      nanosleep(&ts, nullptr);
    }
  }

  // Results: every recorded trial of the plan, best first, to results.md and stdout.
  done = sweep_read_trials(spec.output_dir);
  for (const auto& p : plan) {
    auto it = done.find(p.index);
    if (it != done.end()) out.trials.push_back(it->second);
  }
  sweep_sort(out.trials, spec.goal);
  std::string md = sweep_results_markdown(info, out.trials);
  file_write_atomic(spec.output_dir + "/results.md", md);
  std::printf("\n%s\nwrote %s/results.md\n", md.c_str(), spec.output_dir.c_str());
  if (signals.count()) {
    out.interrupted = true;
    out.signal = signals.first_signal();
  }
  std::fflush(stdout);
  return out;
}

}  // namespace luatune
