// The sweep engine (host/sweep/): grid and random trial lists, tied groups, spec validation
// messages, metric extraction from a trial directory, status classification, ordering, the Pareto
// front, trials.jsonl / sweep.json bookkeeping for resume, and the process runner itself with a
// shell script standing in for the runner (a failing trial, a timeout, a resume that runs nothing,
// the environment trials get, invalid settings recorded as failed trials in a first run and a resume).
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include "host/core/files.h"
#include "host/core/strings.h"
#include "host/sweep/sweep_engine.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace luatune;

namespace {

ConfigValue num(double v) {
  return ConfigValue::of_number(v);
}
ConfigValue str(const std::string& s) {
  return ConfigValue::of_string(s);
}
ConfigValue list(std::vector<ConfigValue> items) {
  return ConfigValue::of_list(std::move(items));
}
ConfigValue table(std::vector<std::pair<std::string, ConfigValue>> fields) {
  ConfigValue t = ConfigValue::of_table();
  for (auto& [k, v] : fields) t.fields[k] = std::move(v);
  return t;
}

// sweep.run{ recipe = "probe", output_dir = dir, metric = "loss", parameters = params, ...extra }
ConfigValue options(ConfigValue params, std::vector<std::pair<std::string, ConfigValue>> extra = {},
                    const std::string& dir = "out/s") {
  ConfigValue o = table({{"recipe", str("probe")},
                         {"output_dir", str(dir)},
                         {"metric", str("loss")},
                         {"parameters", std::move(params)}});
  for (auto& [k, v] : extra) o.fields[k] = std::move(v);
  return o;
}

std::string shown(const SweepPlan& p) {
  std::string s;
  for (const auto& [k, v] : p.values) s += (s.empty() ? "" : " ") + k + "=" + sweep_show(v);
  return s;
}

std::string temp_dir(const std::string& name) {
  return test_temp_dir("sweep_" + name, /*create=*/true);
}

SweepTrial trial(int64_t index, SweepStatus status, std::optional<double> metric) {
  SweepTrial t;
  t.index = index;
  t.name = "trial-00" + std::to_string(index);
  t.status = status;
  t.metric = metric;
  t.values = {{"x", num(static_cast<double>(index))}};
  return t;
}

std::vector<int64_t> order(const std::vector<SweepTrial>& trials) {
  std::vector<int64_t> out;
  for (const auto& t : trials) out.push_back(t.index);
  return out;
}

// Writes dir/probe.lua (a recipe for the sweep to name) and dir/fake_runner.sh, a stand-in for the
// runner: `validate` runs the shell lines `validate` (then passes), a trial the lines `trial`, both
// with $out and $x set from the output_dir= and x= arguments. Returns the runner's path.
std::string fake_runner(const std::string& dir, const std::string& trial, const std::string& validate = "") {
  const std::string runner = dir + "/fake_runner.sh";
  write_text(dir + "/probe.lua", "-- probe\n");
  write_text(
      runner,
      "#!/bin/sh\n"
      "verb=$1; shift; shift\n"
      "for a in \"$@\"; do case $a in output_dir=*) out=${a#output_dir=};; x=*) x=${a#x=};; esac; done\n"
      "if [ \"$verb\" = validate ]; then\n" +
          validate + "\nexit 0\nfi\n" + trial);
  ::chmod(runner.c_str(), 0755);
  return runner;
}

}  // namespace

// ============================================================================================
// The space

TEST(SweepSpace, GridExpandsInOrderTheFirstParameterSlowest) {
  SweepSpec s =
      sweep_spec_parse(options(table({{"b", table({{"values", list({str("x"), str("y"), str("z")})}})},
                                      {"a", list({num(1), num(2)})}})));  // a list: values shorthand
  auto plan = sweep_plan(s);
  ASSERT_EQ(plan.size(), 6u);
  std::vector<std::string> got;
  for (const auto& p : plan) got.push_back(p.name + " " + shown(p));
  EXPECT_EQ(got, (std::vector<std::string>{"trial-001 a=1 b=x", "trial-002 a=1 b=y", "trial-003 a=1 b=z",
                                           "trial-004 a=2 b=x", "trial-005 a=2 b=y", "trial-006 a=2 b=z"}));
  // A budget caps the grid at its first points.
  s.trials = 4;
  EXPECT_EQ(sweep_plan(s).size(), 4u);
  s.trials = 100;
  EXPECT_EQ(sweep_plan(s).size(), 6u);
}

TEST(SweepSpace, TiedGroupsChangeTogetherAndTrialArgsFollowFixed) {
  SweepSpec s = sweep_spec_parse(
      options(table({{"rank", table({{"keys", list({str("lora.r"), str("lora.alpha")})},
                                     {"values", list({list({num(8), num(16)}), list({num(16), num(32)})})}})},
                     {"lr", table({{"values", list({num(1e-4), num(3.2e-4)})}})},
                     {"targets", table({{"value", list({str("q_proj"), str("v_proj")})}})}}),
              {{"fixed", table({{"steps", num(20)}, {"lora", table({{"dropout", num(0.1)}})}})},
               {"wandb_project", str("proj")}}));
  auto plan = sweep_plan(s);
  ASSERT_EQ(plan.size(), 4u);
  EXPECT_EQ(shown(plan[0]), "lr=1e-04 lora.r=8 lora.alpha=16 targets=q_proj,v_proj");
  EXPECT_EQ(shown(plan[3]), "lr=3.2e-04 lora.r=16 lora.alpha=32 targets=q_proj,v_proj");
  EXPECT_EQ(sweep_swept_keys(s), (std::vector<std::string>{"lr", "lora.r", "lora.alpha", "targets"}));
  EXPECT_EQ(sweep_trial_args(s, "run", "recipes/probe.lua", plan[1]),
            (std::vector<std::string>{"run", "recipes/probe.lua", "lora.dropout=0.1", "steps=20", "lr=0.0001",
                                      "lora.r=16", "lora.alpha=32", "targets=q_proj,v_proj",
                                      "output_dir=out/s/trial-002", "wandb_project=proj"}));
  EXPECT_EQ(s.name, "s");  // output_dir's last component
}

TEST(SweepSpace, NumbersOnTheCommandLineReadBackExactly) {
  for (double v : {0.1, 1.0 / 3.0, 3.1622776601683794e-4, 2e-5, 1e300, 123456789.0, -0.5}) {
    std::string arg = sweep_arg("lr", num(v));
    EXPECT_EQ(std::strtod(arg.c_str() + 3, nullptr), v) << arg;
  }
  EXPECT_EQ(sweep_arg("flag", ConfigValue::of_boolean(true)), "flag=true");
  EXPECT_EQ(sweep_show_number(3.1622776601683794e-4), "3.16e-04");
  EXPECT_EQ(sweep_show_number(0.05), "0.05");
  EXPECT_EQ(sweep_show_metric(2.310123), "2.3101");
  EXPECT_EQ(sweep_show_metric(3.2e-5), "3.2000e-05");
}

TEST(SweepSpace, RandomDrawsAreSeededReproducibleAndInRange) {
  auto spec = [](double seed, double trials) {
    return sweep_spec_parse(options(
        table(
            {{"lr",
              table({{"distribution", str("log_uniform_values")}, {"min", num(1e-5)}, {"max", num(1e-1)}})},
             {"drop", table({{"distribution", str("uniform")}, {"min", num(0.1)}, {"max", num(0.3)}})},
             {"n", table({{"min", num(2)}, {"max", num(4)}})},  // whole min/max: int_uniform
             {"bs",
              table({{"distribution", str("q_uniform")}, {"min", num(8)}, {"max", num(64)}, {"q", num(8)}})},
             {"opt", table({{"values", list({str("adamw"), str("sgd")})}})}}),
        {{"method", str("random")}, {"seed", num(seed)}, {"trials", num(trials)}}));
  };
  auto a = sweep_plan(spec(7, 400)), b = sweep_plan(spec(7, 400)), c = sweep_plan(spec(8, 400));
  auto prefix = sweep_plan(spec(7, 5));
  ASSERT_EQ(a.size(), 400u);
  int below_mid = 0, differ = 0;
  std::set<double> ns;
  std::set<std::string> opts;
  for (size_t i = 0; i < a.size(); i++) {
    EXPECT_EQ(shown(a[i]), shown(b[i]));
    if (i < prefix.size()) {
      EXPECT_EQ(shown(a[i]), shown(prefix[i]));  // a bigger budget only appends
    }
    differ += shown(a[i]) != shown(c[i]);
    std::map<std::string, ConfigValue> v(a[i].values.begin(), a[i].values.end());
    EXPECT_GE(v["lr"].number, 1e-5);
    EXPECT_LE(v["lr"].number, 1e-1);
    below_mid += v["lr"].number < 1e-3;  // the log-space midpoint
    EXPECT_GE(v["drop"].number, 0.1);
    EXPECT_LT(v["drop"].number, 0.3);
    ns.insert(v["n"].number);
    EXPECT_EQ(std::fmod(v["bs"].number, 8), 0);
    EXPECT_GE(v["bs"].number, 8);
    EXPECT_LE(v["bs"].number, 64);
    opts.insert(v["opt"].string);
  }
  EXPECT_GT(differ, 390);
  EXPECT_EQ(ns, (std::set<double>{2, 3, 4}));  // both ends included
  EXPECT_EQ(opts.size(), 2u);
  EXPECT_GT(below_mid, 160);  // log-uniform: about half below the geometric mean (uniform: ~1%)
  EXPECT_LT(below_mid, 240);
}

TEST(SweepSpace, ValidationErrorsNameTheParameter) {
  auto err = [](ConfigValue params, std::vector<std::pair<std::string, ConfigValue>> extra = {}) {
    return error_of([&] { sweep_spec_parse(options(params, extra)); });
  };
  auto range = [](const char* dist, double min, double max) {
    return table({{"distribution", str(dist)}, {"min", num(min)}, {"max", num(max)}});
  };
  auto random =
      std::vector<std::pair<std::string, ConfigValue>>{{"method", str("random")}, {"trials", num(4)}};
  EXPECT_EQ(
      err(table({{"lr", table({{"vals", list({num(1)})}})}})),
      "sweep.run: parameter 'lr': unknown key 'vals' (did you mean 'values'?); valid keys: values, value, "
      "distribution, min, max, q, keys");
  EXPECT_EQ(err(table({{"lr", range("uniform", 0.1, 0.01)}}), random),
            "sweep.run: parameter 'lr': min (0.1) must be less than max (0.01)");
  EXPECT_EQ(err(table({{"lr", range("log_uniform_values", 0, 0.1)}}), random),
            "sweep.run: parameter 'lr': log_uniform_values needs 0 < min < max, got min 0");
  EXPECT_EQ(err(table({{"lr", table({{"values", list({})}})}})),
            "sweep.run: parameter 'lr': values is empty");
  EXPECT_EQ(err(table({{"ra", table({{"keys", list({str("lora.r"), str("lora.alpha")})},
                                     {"values", list({list({num(8), num(16)}), list({num(4)})})}})}})),
            "sweep.run: parameter 'ra': values[2] has 1 values for 2 keys (lora.r, lora.alpha)");
  EXPECT_EQ(
      err(table({{"lr", range("log_uniform_values", 1e-5, 1e-3)}})),
      "sweep.run: parameter 'lr': grid search needs values (it has distribution log_uniform_values); list "
      "the values or use method = \"random\"");
  EXPECT_EQ(err(table({{"lr", range("loguniform", 1e-5, 1e-3)}}), random),
            "sweep.run: parameter 'lr': unknown distribution 'loguniform'; expected uniform, int_uniform, "
            "log_uniform_values, log_uniform, q_uniform or q_log_uniform_values");
  EXPECT_EQ(err(table({{"n", range("int_uniform", 1, 2.5)}}), random),
            "sweep.run: parameter 'n': int_uniform needs whole min and max, got 1 and 2.5");
  EXPECT_EQ(err(table({{"lr", range("uniform", 0, 1)}}), {{"method", str("random")}}),
            "sweep.run: random search needs a budget: trials = N");
  EXPECT_EQ(err(table({{"lr", list({num(1)})}}), {{"fixed", table({{"lr", num(2)}})}}),
            "sweep.run: key 'lr' is set by both fixed and parameter 'lr'");
  EXPECT_EQ(err(table({{"output_dir", list({str("a")})}})),
            "sweep.run: parameter 'output_dir': output_dir is set by the sweep (OUTPUT_DIR/trial-NNN for "
            "each trial)");
  EXPECT_EQ(err(table({{"lr", list({num(1)})}}),
                {{"metric", table({{"name", str("loss")}, {"goal", str("down")}})}}),
            "sweep.run: goal must be \"minimize\" or \"maximize\", got \"down\"");
  EXPECT_EQ(
      err(table({{"lr", list({num(1)})}}), {{"trails", num(3)}}),
      "sweep.run: unknown option 'trails' (did you mean 'trials'?); valid options: recipe, name, output_dir, "
      "fixed, method, seed, trials, parallel, metric, goal, parameters, timeout, wandb_project, env, "
      "devices, "
      "columns, retry_failed");
  EXPECT_EQ(err(table({})),
            "sweep.run: option 'parameters' is required: a table of config keys to sweep, e.g. "
            "parameters = { learning_rate = { values = { 1e-4, 3e-4 } } }");
  // metric = { name =, goal = } and metric = "name" with goal beside it read the same.
  SweepSpec s =
      sweep_spec_parse(options(table({{"lr", list({num(1)})}}),
                               {{"metric", table({{"name", str("acc")}, {"goal", str("maximize")}})}}));
  EXPECT_EQ(s.metric, "acc");
  EXPECT_EQ(s.goal, SweepGoal::maximize);
  s = sweep_spec_parse(options(table({{"lr", list({num(1)})}}), {{"goal", str("maximize")}}));
  EXPECT_EQ(s.goal, SweepGoal::maximize);
}

// ============================================================================================
// Results

TEST(SweepResults, MetricsFromMetricsJsonlAndSummaryJson) {
  std::string dir = temp_dir("metrics");
  write_text(dir + "/metrics.jsonl",
             "{\"config\":{\"lr\":0.1}}\n"
             "{\"step\":1,\"time\":1.7e9,\"elapsed\":0.5,\"loss\":3.0,\"lr\":0.1}\n"
             "{\"step\":2,\"time\":1.7e9,\"elapsed\":1.0,\"loss\":2.5,\"eval_loss\":2.75}\n"
             "{\"step\":3,\"time\":1.7e9,\"elapsed\":1.5,\"loss\":null}\n"
             "{\"summary\":{\"eval_loss\":2.5,\"note\":\"done\"}}\n"
             "{\"step\":4,\"loss\":");  // cut short by a crash
  write_text(dir + "/summary.json",
             "{\"parameters_kept\":0.5,\"perplexity\":{\"before\":10,\"after\":12.5},\"model_dir\":\"x\","
             "\"distilled\":true}\n");
  auto m = sweep_read_metrics(dir);
  EXPECT_EQ(
      m.count("time") + m.count("elapsed") + m.count("note") + m.count("model_dir") + m.count("distilled"),
      0u);
  EXPECT_TRUE(std::isnan(m.at("loss")));  // the last value, NaN written as null
  EXPECT_EQ(m.at("step"), 3);
  EXPECT_EQ(m.at("lr"), 0.1);
  EXPECT_EQ(m.at("eval_loss"), 2.5);  // the summary line overrides the step lines
  EXPECT_EQ(m.at("parameters_kept"), 0.5);
  EXPECT_EQ(m.at("perplexity.after"), 12.5);
  EXPECT_EQ(m.at("perplexity.before"), 10);
  EXPECT_TRUE(sweep_read_metrics(dir + "/missing").empty());
  fs::remove_all(dir);
}

TEST(SweepResults, StatusFromExitMetricAndLog) {
  auto classify = [](std::map<std::string, double> metrics, int code, bool timed_out,
                     const std::string& log) {
    SweepTrial t;
    t.metrics = std::move(metrics);
    t.seconds = 12.4;
    sweep_classify(t, "eval_loss", code, timed_out, log);
    return std::string(sweep_status_name(t.status)) + (t.metric ? " " + sweep_show_metric(*t.metric) : "") +
           (t.error.empty() ? "" : " | " + t.error);
  };
  EXPECT_EQ(classify({{"eval_loss", 2.5}}, 0, false, ""), "ok 2.5000");
  EXPECT_EQ(classify({{"loss", 2.5}}, 0, false, ""),
            "no_metric | the trial exited 0 but wrote no 'eval_loss' (metrics.jsonl, summary.json)");
  EXPECT_EQ(classify({{"eval_loss", std::nan("")}}, 0, false, ""), "nan nan | eval_loss is nan");
  EXPECT_EQ(classify({{"eval_loss", INFINITY}}, 0, false, ""), "nan inf | eval_loss is inf");
  std::string log =
      "step 1 loss 2.0\nerror: probe.lua:9: x = 3 fails on purpose\nstack traceback:\n\t[C]: in "
      "function 'error'\n\tprobe.lua:9: in main chunk\n";
  EXPECT_EQ(classify({{"eval_loss", 2.5}}, 1, false, log),
            "failed 2.5000 | error: probe.lua:9: x = 3 fails on purpose");
  EXPECT_EQ(classify({}, 1, false, "a\nb\n\nc\nd\ne\nf\n"), "failed | b\nc\nd\ne\nf");
  EXPECT_EQ(classify({}, 1, false, "error: CUDA out of memory. Tried to allocate 2.00 GiB\n"),
            "oom | error: CUDA out of memory. Tried to allocate 2.00 GiB");
  EXPECT_EQ(classify({}, 137, false, ""),
            "failed | killed by signal 9 (SIGKILL: the kernel's OOM killer, or someone)");
  EXPECT_EQ(classify({}, 143, true, "step 3\n"), "timeout | stopped by the sweep's timeout after 12s");
}

TEST(SweepResults, AnErrorAsOneLine) {
  EXPECT_EQ(sweep_error_line("error: config: 2 problems in lora_finetune's config:\n"
                             "  lora.r = -1 (command line): expected a whole number >= 1 (the LoRA rank)\n"
                             "  lora.alpha = -2 (command line): expected a positive number\n"),
            "lora.r = -1 (command line): expected a whole number >= 1 (the LoRA rank); "
            "lora.alpha = -2 (command line): expected a positive number");
  EXPECT_EQ(sweep_error_line(
                "error: config: unknown key 'xx' (command line); did you mean 'x'?\n  HINT: see --help"),
            "config: unknown key 'xx' (command line); did you mean 'x'?");
  EXPECT_EQ(
      sweep_error_line(
          "warning: config: warmup_steps = 20 is more than max_steps = 1\n"
          "config: 1 problem in probe.lua's config:\n  dropout = 1.5 (command line): expected in [0, 1)"),
      "dropout = 1.5 (command line): expected in [0, 1)");
  EXPECT_EQ(sweep_error_line("a\n\nb"), "a; b");
  EXPECT_EQ(sweep_error_line(""), "");
}

TEST(SweepResults, SortsBestFirstFailuresLast) {
  std::vector<SweepTrial> t = {trial(1, SweepStatus::ok, 3.0), trial(2, SweepStatus::failed, std::nullopt),
                               trial(3, SweepStatus::ok, 1.0), trial(4, SweepStatus::nan, std::nan("")),
                               trial(5, SweepStatus::ok, 2.0), trial(6, SweepStatus::no_metric, std::nullopt),
                               trial(7, SweepStatus::ok, 1.0)};
  auto a = t;
  sweep_sort(a, SweepGoal::minimize);
  EXPECT_EQ(order(a), (std::vector<int64_t>{3, 7, 5, 1, 2, 4, 6}));
  sweep_sort(t, SweepGoal::maximize);
  EXPECT_EQ(order(t), (std::vector<int64_t>{1, 5, 3, 7, 2, 4, 6}));
}

TEST(SweepResults, ParetoFrontOnAHandExample) {
  // (parameters kept, perplexity), both minimized: smaller models that are not beaten on perplexity.
  std::vector<std::vector<double>> p = {{0.75, 12}, {0.6, 14},  {0.6, 13},   {0.5, 20},
                                        {0.4, 19},  {0.75, 12}, {0.9, 12.5}, {std::nan(""), 1}};
  std::vector<bool> front = sweep_pareto(p, {SweepGoal::minimize, SweepGoal::minimize});
  EXPECT_EQ(front, (std::vector<bool>{true, false, true, false, true, true, false, false}));
  // Maximizing the first objective instead: the biggest model with the best perplexity wins.
  front = sweep_pareto(p, {SweepGoal::maximize, SweepGoal::minimize});
  EXPECT_EQ(front, (std::vector<bool>{true, false, false, false, false, true, true, false}));
}

TEST(SweepResults, MarkdownTableSortedWithFailuresListed) {
  SweepInfo info;
  info.name = "probe";
  info.recipe = "probe";
  info.metric = "loss";
  info.keys = {"x"};
  info.columns = {"acc"};
  info.planned = 4;
  std::vector<SweepTrial> t = {trial(1, SweepStatus::ok, 0.5), trial(2, SweepStatus::failed, std::nullopt),
                               trial(3, SweepStatus::ok, 0.25)};
  t[0].metrics["acc"] = 0.9;
  t[0].seconds = 41.2;
  t[1].exit_code = 1;
  t[1].error = "error: boom\nmore";
  EXPECT_EQ(sweep_results_markdown(info, t),
            "# Sweep probe\n\n"
            "Recipe `probe`, metric `loss` (minimize): 3 of 4 trials finished: 2 ok, 1 failed.\n"
            "Best: trial-003, loss 0.2500 (x=3).\n\n"
            "| rank | trial | x | loss | acc | status | seconds |\n"
            "|---:|---|---:|---:|---:|---|---:|\n"
            "| 1 | trial-003 | 3 | 0.2500 |  | ok | 0.0 |\n"
            "| 2 | trial-001 | 1 | 0.5000 | 0.9000 | ok | 41 |\n"
            "| - | trial-002 | 2 |  |  | failed | 0.0 |\n"
            "\nNot ok:\n- trial-002 (failed, exit 1): error: boom\n");
}

// ============================================================================================
// Bookkeeping for resume

TEST(SweepStore, TrialRecordsRoundTripAndResumeRunsOnlyTheRest) {
  std::string dir = temp_dir("store");
  SweepSpec s = sweep_spec_parse(
      options(table({{"x", list({num(1), num(2), num(3), num(4), num(5), num(6)})}}), {}, dir));
  auto plan = sweep_plan(s);
  std::string lines;
  for (int i : {1, 2, 4}) {
    SweepTrial t = trial(i, i == 4 ? SweepStatus::failed : SweepStatus::ok,
                         i == 4 ? std::nullopt : std::optional<double>(i));
    t.metrics = {{"loss", static_cast<double>(i)}, {"bad", std::nan("")}};
    t.error = i == 4 ? "error: x\ny" : "";
    t.seconds = 1.25;
    lines += sweep_trial_json(t) + "\n";
  }
  write_text(dir + "/trials.jsonl", lines + "{\"index\":5,\"na");  // torn last line: trial 5 reruns
  auto done = sweep_read_trials(dir);
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done.at(4).error, "error: x\ny");
  EXPECT_EQ(done.at(4).dir, dir + "/trial-004");
  EXPECT_TRUE(std::isnan(done.at(2).metrics.at("bad")));
  EXPECT_EQ(*done.at(2).metric, 2);
  EXPECT_EQ(done.at(1).seconds, 1.25);
  EXPECT_EQ(done.at(1).values[0].second.number, 1);
  std::vector<std::string> names;
  for (const auto& p : sweep_pending(plan, done, false)) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"trial-003", "trial-005", "trial-006"}));
  names.clear();
  for (const auto& p : sweep_pending(plan, done, true)) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"trial-003", "trial-004", "trial-005", "trial-006"}));
  // A damaged line that is not the last is an error naming it.
  write_text(dir + "/trials.jsonl", "garbage\n" + lines);
  EXPECT_NE(error_of([&] { sweep_read_trials(dir); }).find("trials.jsonl:1 is not a trial record"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(SweepStore, ResumingADifferentSweepFails) {
  std::string dir = temp_dir("resume");
  auto spec = [&](double x2, double steps, double trials) {
    return sweep_spec_parse(options(table({{"x", list({num(1), num(x2)})}, {"y", list({num(0)})}}),
                                    {{"fixed", table({{"steps", num(steps)}})}, {"trials", num(trials)}},
                                    dir));
  };
  SweepSpec s = spec(2, 10, 1);
  sweep_check_resume(s, sweep_plan(s));  // nothing there yet
  write_text(dir + "/sweep.json", sweep_json(s, sweep_plan(s)));
  sweep_check_resume(s, sweep_plan(s));
  SweepSpec more = spec(2, 10, 0), other = spec(3, 10, 0), fixed = spec(2, 20, 0);
  sweep_check_resume(more, sweep_plan(more));  // a larger budget appends trials
  EXPECT_EQ(error_of([&] { sweep_check_resume(other, sweep_plan(other)); }),
            "sweep.run: " + dir +
                " holds another sweep: its parameters differ ([{\"name\":\"x\",\"keys\":[\"x\"],"
                "\"values\":[[1],[2]]},{\"name\":\"y\",\"keys\":[\"y\"],\"values\":[[0]]}] there, "
                "[{\"name\":\"x\",\"keys\":"
                "[\"x\"],\"values\":[[1],[3]]},{\"name\":\"y\",\"keys\":[\"y\"],\"values\":[[0]]}] here)\n  "
                "HINT: use a new "
                "output_dir for a different sweep, or remove " +
                dir + " to start over");
  EXPECT_NE(error_of([&] {
              sweep_check_resume(fixed, sweep_plan(fixed));
            }).find("its fixed overrides differ ({\"steps\":10} there"),
            std::string::npos);
  SweepInfo info = sweep_info_read(dir);
  EXPECT_EQ(info.planned, 1);
  EXPECT_EQ(info.keys, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(error_of([&] { sweep_info_read(dir + "/none"); }),
            "runner sweep --report: no sweep in '" + dir +
                "/none' (no sweep.json there)\n  HINT: give the output_dir "
                "of a sweep that has started");
  fs::remove_all(dir);
}

// ============================================================================================
// Running, with a shell script as the runner: x = 3 fails, x = 4 outlives the timeout.

TEST(SweepRun, FailuresAndTimeoutsAreRecordedAndAResumeRunsNothing) {
  std::string dir = temp_dir("run");
  const std::string recipe = dir + "/probe.lua";
  const std::string runner = fake_runner(
      dir, "echo \"$x\" >> " + dir +
               "/ran.txt\n"
               "if [ \"$x\" = 3 ]; then echo 'error: x = 3 fails on purpose'; exit 1; fi\n"
               "if [ \"$x\" = 4 ]; then exec sleep 30; fi\n"
               "echo \"{\\\"step\\\":1,\\\"loss\\\":$((x * x - 4 * x))}\" > \"$out/metrics.jsonl\"\n");
  SweepSpec s = sweep_spec_parse(
      options(table({{"x", list({num(1), num(2), num(3), num(4), num(5), num(6)})}}),
              {{"parallel", num(3)}, {"timeout", num(1)}, {"recipe", str(recipe)}}, dir + "/sweep"));
  SweepRunOptions o;
  o.runner = runner;
  o.stop_grace_seconds = 1;
  SweepOutcome out = sweep_run(s, o);
  EXPECT_EQ(out.ran, 6);
  EXPECT_FALSE(out.interrupted);
  std::vector<std::string> got;
  for (const auto& t : out.trials) got.push_back(t.name + " " + sweep_status_name(t.status));
  // loss = x^2 - 4x: 2 -> -4, 1 and 3 -> -3, 5 -> 5, 6 -> 12.
  EXPECT_EQ(got, (std::vector<std::string>{"trial-002 ok", "trial-001 ok", "trial-005 ok", "trial-006 ok",
                                           "trial-003 failed", "trial-004 timeout"}));
  EXPECT_EQ(out.trials[4].error, "error: x = 3 fails on purpose");
  EXPECT_EQ(out.trials[4].exit_code, 1);
  EXPECT_TRUE(file_exists(dir + "/sweep/results.md"));
  EXPECT_TRUE(file_exists(dir + "/sweep/trial-003/trial.log"));
  EXPECT_NE(sweep_report(dir + "/sweep").find("6 of 6 trials finished: 4 ok, 1 failed, 1 timeout"),
            std::string::npos);
  auto ran = [&] { return str_split(file_read(dir + "/ran.txt"), '\n').size() - 1; };
  EXPECT_EQ(ran(), 6u);
  // Again: nothing runs. With retry_failed, the two not ok run again (and end the same way).
  out = sweep_run(s, o);
  EXPECT_EQ(out.ran, 0);
  EXPECT_EQ(out.trials.size(), 6u);
  EXPECT_EQ(ran(), 6u);
  s.retry_failed = true;
  out = sweep_run(s, o);
  EXPECT_EQ(out.ran, 2);
  EXPECT_EQ(ran(), 8u);
  EXPECT_EQ(str_split(file_read(dir + "/sweep/trials.jsonl"), '\n').size() - 1,
            8u);  // appended, last one wins
  EXPECT_EQ(sweep_read_trials(dir + "/sweep").size(), 6u);
  fs::remove_all(dir);
}

TEST(SweepRun, TrialsGetTheirEnvironment) {
  std::string dir = temp_dir("env");
  const std::string recipe = dir + "/probe.lua";
  const std::string runner = fake_runner(
      dir,
      "sleep 0.3\n"
      "echo \"$CUDA_VISIBLE_DEVICES|$OMP_NUM_THREADS|$WANDB_RUN_GROUP|$WANDB_NAME|$WANDB_JOB_TYPE|$FOO|$*\" "
      "> $out/env\n"
      "echo '{\"summary\":{\"loss\":1}}' > \"$out/metrics.jsonl\"\n");
  SweepSpec s = sweep_spec_parse(options(table({{"x", list({num(1), num(2)})}}),
                                         {{"parallel", num(2)},
                                          {"recipe", str(recipe)},
                                          {"devices", list({num(0), num(1)})},
                                          {"wandb_project", str("proj")},
                                          {"env", table({{"FOO", str("bar")}})},
                                          {"name", str("lr")},
                                          {"fixed", list({str("steps=5"), str("lora.r:8")})}},
                                         dir + "/sweep"));
  SweepRunOptions o;
  o.runner = runner;
  SweepOutcome out = sweep_run(s, o);
  ASSERT_EQ(out.ran, 2);
  cpu_set_t cpus;
  ASSERT_EQ(sched_getaffinity(0, sizeof cpus, &cpus), 0);
  std::string threads = std::to_string(std::max(1, CPU_COUNT(&cpus) / 2));  // split between 2 at once
  std::string a = str_trim(file_read(dir + "/sweep/trial-001/env")),
              b = str_trim(file_read(dir + "/sweep/trial-002/env"));
  // Running at the same time, the two trials got different devices.
  EXPECT_EQ(a.substr(0, 2) + b.substr(0, 2), "0|1|");
  EXPECT_EQ(a.substr(2), threads + "|lr|lr-trial-001|trial|bar|lora.r=8 steps=5 x=1 output_dir=" + dir +
                             "/sweep/trial-001 wandb_project=proj");
  fs::remove_all(dir);
}

// ============================================================================================
// Invalid settings: the fake runner's validate refuses x = -1 as the config checks refuse lora.r = -1
// (the config listed on stdout, the error on stderr), and everything once dir/broken exists.

namespace {

const char* kRefuseMinusOne =
    "echo 'config (probe.lua):'; echo \"  x = $x\"\n"
    "[ -f \"${out%/*}/../broken\" ] && { echo 'config: 1 problem in probe.lua config:' >&2; "
    "echo '  data = \"gone.jsonl\" (command line): no such file' >&2; exit 2; }\n"
    "if [ \"$x\" = -1 ]; then echo 'config: 1 problem in probe.lua config:' >&2; "
    "echo '  x = -1 (command line): expected a whole number >= 0' >&2; echo '  HINT: fix it' >&2; exit 2; "
    "fi\n";

// "trial-002:failed" for each line of trials.jsonl, in order.
std::vector<std::string> recorded(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& line : str_split(file_read(dir + "/trials.jsonl"), '\n'))
    if (!line.empty()) {
      nlohmann::json t = nlohmann::json::parse(line);
      out.push_back(t.at("name").get<std::string>() + ":" + t.at("status").get<std::string>());
    }
  return out;
}

}  // namespace

TEST(SweepRun, InvalidPointsAreRecordedAsFailedBeforeAnyTrialAndAResumeRunsTheRest) {
  std::string dir = temp_dir("invalid");
  const std::string recipe = dir + "/probe.lua";
  const std::string runner =
      fake_runner(dir,
                  "echo \"$x\" >> " + dir + "/ran.txt\n" +
                      "echo \"{\\\"step\\\":1,\\\"loss\\\":$x}\" > \"$out/metrics.jsonl\"\n",
                  kRefuseMinusOne);
  SweepSpec s = sweep_spec_parse(options(table({{"x", list({num(1), num(-1), num(2), num(3)})}}),
                                         {{"recipe", str(recipe)}}, dir + "/sweep"));
  SweepRunOptions o;
  o.runner = runner;
  const std::string out_dir = dir + "/sweep";
  auto ran = [&] { return str_split(file_read(dir + "/ran.txt"), '\n'); };

  // A first run: trial-002 is recorded as failed before any trial starts, the other three run.
  testing::internal::CaptureStdout();
  SweepOutcome out = sweep_run(s, o);
  std::string printed = testing::internal::GetCapturedStdout();
  EXPECT_EQ(out.ran, 3);
  EXPECT_EQ(out.invalid, 1);
  EXPECT_EQ(recorded(out_dir),
            (std::vector<std::string>{"trial-002:failed", "trial-001:ok", "trial-003:ok", "trial-004:ok"}));
  EXPECT_EQ(ran(), (std::vector<std::string>{"1", "2", "3", ""}));  // -1 never ran
  const std::string why =
      "invalid settings (runner validate): x = -1 (command line): expected a whole number >= 0";
  EXPECT_NE(printed.find("recipe " + recipe +
                         " refuses the settings of 1 of the 4 trials to run; recorded as failed:\n"
                         "trial-002 x=-1: " +
                         why + "\n"),
            std::string::npos)
      << printed;
  const SweepTrial bad = sweep_read_trials(out_dir).at(2);
  EXPECT_EQ(bad.error, why);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(file_read(out_dir + "/trial-002/trial.log"),
            "config (probe.lua):\n  x = -1\nconfig: 1 problem in probe.lua config:\n"
            "  x = -1 (command line): expected a whole number >= 0\n  HINT: fix it\n");
  EXPECT_FALSE(dir_exists(out_dir + "/validate"));
  EXPECT_NE(file_read(out_dir + "/results.md").find("- trial-002 (failed, exit 2): " + why),
            std::string::npos);

  // Killed after trial-001, with the invalid trial-002 not yet recorded (how today's sweeps leave
  // it, validating only the first trial): the resume records trial-002 and runs 3 and 4, once each.
  write_text(out_dir + "/trials.jsonl", str_split(file_read(out_dir + "/trials.jsonl"), '\n')[1] + "\n");
  write_text(dir + "/ran.txt", "");
  out = sweep_run(s, o);
  EXPECT_EQ(out.ran, 2);
  EXPECT_EQ(out.invalid, 1);
  EXPECT_EQ(recorded(out_dir),
            (std::vector<std::string>{"trial-001:ok", "trial-002:failed", "trial-003:ok", "trial-004:ok"}));
  EXPECT_EQ(ran(), (std::vector<std::string>{"2", "3", ""}));

  // Killed after the first line, the invalid trial-002 recorded: it is neither checked nor recorded
  // again, and 1, 3, 4 run.
  write_text(out_dir + "/trials.jsonl", str_split(file_read(out_dir + "/trials.jsonl"), '\n')[1] + "\n");
  write_text(dir + "/ran.txt", "");
  out = sweep_run(s, o);
  EXPECT_EQ(out.invalid, 0);
  EXPECT_EQ(recorded(out_dir),
            (std::vector<std::string>{"trial-002:failed", "trial-001:ok", "trial-003:ok", "trial-004:ok"}));
  EXPECT_EQ(ran(), (std::vector<std::string>{"1", "2", "3", ""}));

  // Again: nothing runs. retry_failed: trial-002 is the only trial to run and still invalid; a
  // recorded trial passing shows it is the value, so it is recorded again rather than failing.
  out = sweep_run(s, o);
  EXPECT_EQ(out.ran + out.invalid, 0);
  s.retry_failed = true;
  out = sweep_run(s, o);
  EXPECT_EQ(out.ran, 0);
  EXPECT_EQ(out.invalid, 1);
  EXPECT_EQ(recorded(out_dir).size(), 5u);  // appended, the last line wins
  EXPECT_EQ(sweep_read_trials(out_dir).size(), 4u);

  // When no trial's settings pass, recorded ones included, the sweep's own settings are wrong: it fails.
  write_text(dir + "/broken", "");
  EXPECT_EQ(
      error_of([&] { sweep_run(s, o); }),
      "sweep.run: recipe " + recipe +
          " refuses trial-002's settings (runner validate, exit 2):\nconfig: 1 problem in probe.lua "
          "config:\n  data = \"gone.jsonl\" (command line): no such file\n  HINT: fix the key or value in "
          "sweep.run's fixed or parameters (no trial's settings pass); the whole output is in " +
          out_dir + "/validate/trial-002.log");
  EXPECT_EQ(recorded(out_dir).size(), 5u);
  fs::remove_all(dir);
}
