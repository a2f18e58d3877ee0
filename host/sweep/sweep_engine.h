// Hyperparameter sweeps: a search space over a recipe's config keys (grid, or seeded random draws),
// each trial a child runner process with its own output directory (and W&B run grouped under the
// sweep), finished trials appended to OUTPUT_DIR/trials.jsonl so a rerun resumes, and the results
// as a Markdown table sorted by the metric. The engine knows nothing of Lua: bindings/sweep.cpp
// hands it the sweep.run{...} table as a ConfigValue. Format and behaviour: docs/sweeps.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "host/cli/config.h"

namespace luatune {

// ============================================================================================
// The spec (sweep_space.cpp)

enum class SweepMethod { grid, random };
enum class SweepGoal { minimize, maximize };

// One swept parameter: a config key with a list of values or a distribution, or a tied group of
// keys that change together (each choice one value per key).
struct SweepParam {
  std::string name;                              // the parameters{} key: a config key, or the group's name
  std::vector<std::string> keys;                 // the config keys it sets ({name} unless tied)
  std::vector<std::vector<ConfigValue>> values;  // the choices, one value per key; empty with a distribution
  std::string distribution;                      // "" (values), uniform, int_uniform, log_uniform_values, ...
  double min = 0, max = 0, q = 0;                // the distribution's range; q: round to multiples (q_*)
};

using SweepValues = std::vector<std::pair<std::string, ConfigValue>>;  // config key -> value, in order

struct SweepSpec {
  std::string recipe;      // a shipped recipe's name or a path, as given
  std::string name;        // the sweep's name (W&B run group); default: output_dir's last component
  std::string output_dir;  // sweep.json, trials.jsonl, results.md and one trial-NNN/ per trial
  SweepValues fixed;       // overrides every trial gets, flattened ("lora.r"), sorted by key
  SweepMethod method = SweepMethod::grid;
  uint64_t seed = 0;   // random draws
  int64_t trials = 0;  // budget; grid: a cap (0 = every point); random: required
  int parallel = 1;    // trials running at once
  std::string metric;  // what the table sorts by, read from the trial's metrics
  SweepGoal goal = SweepGoal::minimize;
  std::vector<SweepParam> params;  // sorted by name: the order trials are generated and shown in
  double timeout = 0;              // seconds a trial may run (0 = no limit)
  // Given (even ""), every trial gets wandb_project=... so the sweep's setting overrides the
  // recipe's default; non-empty, trials also get WANDB_RUN_GROUP, WANDB_NAME, WANDB_JOB_TYPE.
  std::string wandb_project;
  bool wandb_given = false;
  SweepValues env;                   // extra environment for every trial
  std::vector<std::string> devices;  // CUDA_VISIBLE_DEVICES values handed to running trials in turn
  std::vector<std::string> columns;  // extra metric columns for the table
  bool retry_failed = false;         // rerun recorded trials whose status is not ok
};

const char* sweep_method_name(SweepMethod m);  // "grid", "random"
const char* sweep_goal_name(SweepGoal g);      // "minimize", "maximize"

// The option names sweep.run accepts (the binding rejects others with the usual message).
const std::vector<std::string>& sweep_option_names();
// The defaults sweep_spec_parse uses for the options a table leaves out (method, seed, trials,
// parallel, goal, timeout, retry_failed), made from SweepSpec's initializers: the binding holds them
// against bindings/api/sweep.yaml's declarations (tests/lua/test_api_defaults.lua).
std::vector<std::pair<std::string, ConfigValue>> sweep_option_defaults();
// The sweep.run{...} table -> a validated spec. Every problem is a UsageError with a one-line
// message starting "sweep.run: " and naming the option or parameter.
SweepSpec sweep_spec_parse(const ConfigValue& options);

// A planned trial: its number (1-based), name ("trial-003") and the values it sweeps.
struct SweepPlan {
  int64_t index = 0;
  std::string name;
  SweepValues values;  // the swept keys in parameter order (tied groups in their keys' order)
};

// Every trial of the sweep, generated up front: grid points in order (the first parameter varies
// slowest) up to the budget, or `trials` random draws, each drawn from (seed, index) alone so the
// same seed gives the same list on every resume and a larger budget only appends.
std::vector<SweepPlan> sweep_plan(const SweepSpec& spec);
// The config keys the trials set, in parameter order.
std::vector<std::string> sweep_swept_keys(const SweepSpec& spec);
// key=value command-line text: numbers that read back to the same double, lists comma-separated.
std::string sweep_arg(const std::string& key, const ConfigValue& v);
// The child's arguments after the executable: VERB RECIPE_PATH fixed... values... output_dir=DIR.
std::vector<std::string> sweep_trial_args(const SweepSpec& spec, const std::string& verb,
                                          const std::string& recipe_path, const SweepPlan& plan);
// Short text of a value for progress lines and tables: 16, 0.05, 3.16e-04, "q_proj,v_proj".
std::string sweep_show(const ConfigValue& v);
std::string sweep_show_number(double v);
// A metric for progress lines and tables: 2.3101, 1234.5000, 3.2000e-05, 1024, nan.
std::string sweep_show_metric(double v);
std::string sweep_show_seconds(double s);  // 41, 3.5

// ============================================================================================
// Trials and their results (sweep_results.cpp)

enum class SweepStatus { ok, failed, oom, timeout, no_metric, nan };
const char* sweep_status_name(SweepStatus s);
SweepStatus sweep_status_parse(const std::string& name);  // fails on an unknown name

// A finished trial: one line of trials.jsonl.
struct SweepTrial {
  int64_t index = 0;
  std::string name;  // trial-003
  std::string dir;   // OUTPUT_DIR/trial-003
  SweepValues values;
  SweepStatus status = SweepStatus::failed;
  int exit_code = 0;             // 128 + N when killed by signal N
  std::optional<double> metric;  // absent when the trial never reported it
  std::map<std::string, double> metrics;
  double seconds = 0;
  std::string error;  // failures: the end of trial.log
};

// A trial directory's numbers: from metrics.jsonl, the last value of each key over the step lines
// (null, how NaN is written, reads as NaN), then its summary lines; then summary.json's numbers,
// nested objects flattened with dots ("perplexity.after_recovery"). Missing files give nothing.
std::map<std::string, double> sweep_read_metrics(const std::string& dir);
// What trial.log says went wrong: the runner's last "error: ..." message (without the Lua
// traceback), else the last few non-empty lines.
std::string sweep_log_error(const std::string& log_text);
// An error as one line: without "error: ", HINT and warning lines; a heading ending in ':'
// ("config: 2 problems in X's config:") gives way to what it introduces; the rest joined with "; ".
std::string sweep_error_line(const std::string& error);
// True when the log says a device or the host ran out of memory.
bool sweep_log_oom(const std::string& log_text);
// Fills status, metric and error from how the child ended and what it wrote.
// `exit_code` is the exit status, or 128 + signal; `timed_out` wins over everything else.
void sweep_classify(SweepTrial& t, const std::string& metric, int exit_code, bool timed_out,
                    const std::string& log_text);

// ok trials by the metric (best first, ties by index), then every other status by index.
void sweep_sort(std::vector<SweepTrial>& trials, SweepGoal goal);
// Which points are Pareto-optimal: no other point is at least as good in every objective and
// better in one. Points with a missing (NaN) coordinate are never on the front.
std::vector<bool> sweep_pareto(const std::vector<std::vector<double>>& points,
                               const std::vector<SweepGoal>& goals);

// ============================================================================================
// What a sweep keeps in OUTPUT_DIR (sweep_store.cpp)

// One trials.jsonl line (no newline).
std::string sweep_trial_json(const SweepTrial& t);
// The trials recorded in OUTPUT_DIR/trials.jsonl, the last line of each index winning (a retried
// trial appends again). A torn last line (a crash mid-write) is skipped.
std::map<int64_t, SweepTrial> sweep_read_trials(const std::string& output_dir);
// The planned trials that still have to run: never recorded, or (retry_failed) recorded not ok.
std::vector<SweepPlan> sweep_pending(const std::vector<SweepPlan>& plan,
                                     const std::map<int64_t, SweepTrial>& done, bool retry_failed);

// What the report needs besides the trials: kept in sweep.json.
struct SweepInfo {
  std::string name, recipe, metric;
  SweepGoal goal = SweepGoal::minimize;
  std::vector<std::string> keys;     // swept config keys
  std::vector<std::string> columns;  // extra metric columns
  int64_t planned = 0;               // trials in the plan
};
SweepInfo sweep_info(const SweepSpec& spec, int64_t planned);

// sweep.json's text: the spec's identity (recipe, method, seed, metric, fixed, parameters), the
// trial list and the report's settings.
std::string sweep_json(const SweepSpec& spec, const std::vector<SweepPlan>& plan);
// Resume check: fails (UsageError naming what differs) when OUTPUT_DIR/sweep.json describes
// another sweep: a different identity or a trial list that disagrees on the trials both have.
// A different budget is fine (a larger one appends trials). Nothing to check without sweep.json.
void sweep_check_resume(const SweepSpec& spec, const std::vector<SweepPlan>& plan);
SweepInfo sweep_info_read(const std::string& output_dir);

// ============================================================================================
// Tables (sweep_results.cpp)

// Markdown: a heading, a summary line, the table sorted by the metric (rank, trial, swept keys,
// metric, extra columns, status, seconds) and the failures with their errors.
std::string sweep_results_markdown(const SweepInfo& info, std::vector<SweepTrial> trials);
// A Markdown table of `rows` under `headers` (numbers right-aligned when every cell is one).
std::string sweep_markdown_table(const std::vector<std::string>& headers,
                                 const std::vector<std::vector<std::string>>& rows);

// `runner sweep --report DIR`: the results table of the sweep whose output_dir is DIR, from what
// trials.jsonl holds now (a running sweep included).
std::string sweep_report(const std::string& dir);

// ============================================================================================
// Running (sweep_run.cpp)

struct SweepRunOptions {
  std::string runner;              // the executable each trial runs; "" = this process's own (/proc/self/exe)
  double stop_grace_seconds = 30;  // after SIGTERM (timeout, interrupt), SIGKILL follows this late
};

struct SweepOutcome {
  std::vector<SweepTrial> trials;  // every recorded trial of the plan, sorted by the metric
  int64_t ran = 0;                 // trials run by this call
  int64_t invalid = 0;             // refused by runner validate: recorded as failed, not run
  bool interrupted = false;        // Ctrl-C / SIGTERM: running trials were stopped, not recorded
  int signal = 0;                  // the signal that interrupted it
};

// Runs the pending trials, records each in trials.jsonl, writes results.md and prints one line per
// trial start and finish and the table at the end. A failing trial is recorded and the sweep goes
// on. Before any runs, every pending trial's settings go through `runner validate`: the refused
// ones are printed (one line each) and recorded as failed without running, unless the recipe
// refuses every trial's settings (none recorded before passing either): then it fails (UsageError).
SweepOutcome sweep_run(const SweepSpec& spec, const SweepRunOptions& options = {});

}  // namespace luatune
