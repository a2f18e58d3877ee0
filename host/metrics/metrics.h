// Training metrics: what the trainer reports each step goes to sinks through one fan-out. A sink
// is anything with write/summary/close: the console (a live progress line on a terminal, plain
// lines in CI logs), a JSONL file, and Weights & Biases over HTTP (host/metrics/wandb.h).
// Plain C++ with no LibTorch: the numbers arrive as doubles, already pulled off the device.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/metrics/wandb.h"

namespace luatune {

// ============================================================================================
// Values and sinks

// One step's numbers, in the order they are shown and written, plus optional free text
// ("warmup done", a phase name) that sinks show beside them.
struct MetricValues {
  std::vector<std::pair<std::string, double>> numbers;
  std::string note;
  bool empty() const { return numbers.empty() && note.empty(); }
};

// A small table of text a run shows once, e.g. a model's answers before and after training: the
// JSONL line {"table": {"title", "columns", "rows"}} and a section of the run report.
struct MetricTable {
  std::string title;
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;  // each as long as columns
};

class MetricSink {
 public:
  virtual ~MetricSink() = default;
  virtual void write(int64_t step, const MetricValues& values) = 0;
  virtual void summary(const MetricValues& values) = 0;  // the run's final numbers
  virtual void table(const MetricTable&) {}              // only the JSONL sink keeps tables
  virtual void close(int exit_code) = 0;                 // called once; the sink flushes and lets go
  // True once the run was stopped from outside (the W&B UI); the recipe ends its loop cleanly.
  virtual bool stopped() const { return false; }
};

// Eval values (keys starting with "eval_") are shown on their own line by the console.
bool metrics_is_eval_key(const std::string& name);
// Orders numbers that arrive unordered (a Lua table) as their producer listed them: the keys in
// `order` first, in that order (trainer:step gives its own), then the rest by name.
void metrics_order(MetricValues& values, const std::vector<std::string>& order = {});

// ============================================================================================
// The fan-out a recipe holds: every call goes to every sink, in the order they were added.

class Metrics {
 public:
  Metrics();   // registers itself so metrics_close_open() can reach it
  ~Metrics();  // closes with exit code 0 if close() was never called
  void add(std::unique_ptr<MetricSink> sink);
  void write(int64_t step, const MetricValues& values);
  void summary(const MetricValues& values);
  // Checks that every row is as long as the columns (else a one-line error naming the row).
  void table(const MetricTable& t);
  // Idempotent. After the sinks close, writes the run report beside the JSONL file when
  // report_on_close named one (host/metrics/run_report.h) and prints "report: PATH"; a report
  // that cannot be written is a one-line warning, never a failure of the run.
  void close(int exit_code);
  bool closed() const { return closed_; }
  bool stopped() const;  // any sink says the run was stopped from outside
  size_t sink_count() const { return sinks_.size(); }
  void report_on_close(const std::string& jsonl_path) { report_jsonl_ = jsonl_path; }

 private:
  std::vector<std::unique_ptr<MetricSink>> sinks_;
  bool closed_ = false;
  std::string report_jsonl_;
};

// ============================================================================================
// Console sink

struct ConsoleOptions {
  int64_t total_steps = 0;  // 0: unknown (no bar, no ETA)
  // Not a terminal: a plain line at the first step, then at most one every `progress_seconds`
  // (0: every step), at the last step, and at every eval. Below 0: metrics_progress_seconds decides.
  double progress_seconds = -1;
  std::FILE* out = stdout;
  int tty = -1;                   // -1: isatty(out); 0 or 1 forces plain lines or the live line (tests)
  int width = 0;                  // terminal columns; 0: ask the terminal, 100 when it cannot say
  double redraw_interval = 0.1;   // seconds between live redraws (the last step always draws)
  std::function<double()> clock;  // monotonic seconds; default std::chrono::steady_clock
};

std::unique_ptr<MetricSink> console_sink_new(const ConsoleOptions& options);

// The seconds between plain progress lines: `option` when it is 0 or more (metrics.open's
// progress_seconds), else $LUATUNE_PROGRESS_SECONDS when set and non-empty, else 30. A variable that
// is not a number of seconds >= 0 is a usage error naming it.
double metrics_progress_seconds(double option);

// Prints one line on `out` without garbling a live progress line: clears it, prints, redraws it.
// Lua's print goes through this while the metrics module is loaded. The line also goes to the
// console taps.
void metrics_console_println(const std::string& line, std::FILE* out = stdout);

// Console taps: everything the run shows as lines (print, the console sink's step, eval and
// summary lines, the runner's error message) is also handed to each tap, for W&B's output.log.
// On a terminal the console sink taps the plain step lines it would print elsewhere (first step,
// every progress_seconds, last step) in place of its live line, so W&B's output.log reads like a CI
// log. Taps are called on the thread that prints (the training thread) and must not block.
void metrics_console_add_tap(const void* owner, std::function<void(const std::string&)> tap);
void metrics_console_remove_tap(const void* owner);
void metrics_console_tap(const std::string& line);  // hands a line to the taps without printing it
// Clears a live progress line and forgets it (before an error message ends the run).
void metrics_console_clear_live();

// Smoothed seconds per step, from the steps and times the console sees, for the ETA.
class StepTimer {
 public:
  explicit StepTimer(double alpha = 0.1) : alpha_(alpha) {}
  // Records that `step` was reached at `now` seconds. The first call only sets the origin, so
  // start-up time before the first step never counts as step time.
  void tick(int64_t step, double now);
  double seconds_per_step() const { return per_step_; }   // 0 until two ticks
  double eta_seconds(int64_t step, int64_t total) const;  // 0 when unknown or done

 private:
  double alpha_;
  int64_t last_step_ = -1;
  double last_time_ = 0;
  double per_step_ = 0;
};

// Formatting used by the console, exposed for tests.
std::string metrics_format_value(const std::string& name, double v);  // lr 2.0e-04, loss 1.2346
std::string metrics_format_thousands(double v);                       // 12345.6 -> "12,346"
std::string metrics_format_duration(double seconds);                  // 83 -> "1m23s"
// The live line for a terminal of `width` columns:
// "step 12/100 [===>   ]  12% | loss ... | elapsed 4m12s | eta 1m23s". elapsed_s < 0: not shown.
std::string metrics_progress_line(int64_t step, int64_t total, const MetricValues& values, double eta_s,
                                  int width, double elapsed_s = -1);
// The plain line for logs: "step 10/100 | loss 2.3456 | lr 2.0e-04 | elapsed 4m12s | eta 47s".
std::string metrics_plain_line(int64_t step, int64_t total, const MetricValues& values, double eta_s,
                               double elapsed_s = -1);

// ============================================================================================
// JSONL sink

struct JsonlOptions {
  std::string path;
  bool resume = false;      // append to an existing file; else start it afresh
  std::string config_json;  // when non-empty, written once as the first line {"config": ...}
  // What the config's device resolved to, {"device": "cuda:0", "name": "NVIDIA H200"} (metrics.open
  // fills it in): when non-empty, the first line carries it too, {"config": ..., "hardware": ...}.
  std::string hardware_json;
  // With resume: the step the run resumed from. Lines of later steps (logged after that checkpoint
  // by the run that stopped) are dropped first, so every step appears once. -1: keep every line.
  int64_t resume_step = -1;
};

// One JSON object per write, {"step": N, "time": unix, "elapsed": s, ...values, "note": "..."},
// flushed every write so a crash keeps everything written before it. NaN and infinities are
// written as null (JSON has no such numbers). The summary is a line {"summary": {...}}.
std::unique_ptr<MetricSink> jsonl_sink_new(const JsonlOptions& options);

// ============================================================================================
// What metrics.open builds

struct MetricsOptions {
  bool console = true;
  ConsoleOptions console_options;
  JsonlOptions jsonl;  // no JSONL sink when path is empty
  WandbOptions wandb;  // a W&B sink when wandb_enabled(wandb)
  bool report = true;  // with a JSONL file: report.html and report.md beside it at close
};

// Sinks open on rank 0 only (RANK or SLURM_PROCID unset or 0); other ranks get an empty fan-out,
// so recipes never branch on the rank to log. The run report, too, is rank 0's.
std::unique_ptr<Metrics> metrics_open(const MetricsOptions& options);
bool metrics_is_rank0();

// Closes every Metrics still open with `exit_code`: the runner calls it when a recipe fails, so
// W&B hears exit code 1 (or 130 for Ctrl-C) rather than the 0 a garbage-collected log would send.
void metrics_close_open(int exit_code);

}  // namespace luatune
