// What a sweep keeps in its output_dir so it can be resumed and reported on: sweep.json (the
// spec's identity, the trial list, the report's settings; rewritten atomically) and trials.jsonl
// (one line per finished trial, appended by sweep_run). A resumed sweep must be the same sweep:
// anything else fails, telling to use a new output_dir, rather than mixing two sweeps' results.
#include <nlohmann/json.hpp>

#include <cmath>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/core/strings.h"
#include "host/io/jsonl.h"
#include "host/sweep/sweep_engine.h"

namespace luatune {

namespace {

using ojson = nlohmann::ordered_json;

ConfigValue value_from_json(const ojson& j) {
  if (j.is_number()) return ConfigValue::of_number(j.get<double>());
  if (j.is_boolean()) return ConfigValue::of_boolean(j.get<bool>());
  if (j.is_string()) return ConfigValue::of_string(j.get<std::string>());
  if (j.is_null()) return ConfigValue::of_number(std::nan(""));
  if (j.is_array()) {
    std::vector<ConfigValue> items;
    for (const auto& i : j) items.push_back(value_from_json(i));
    return ConfigValue::of_list(std::move(items));
  }
  ConfigValue t = ConfigValue::of_table();
  for (auto it = j.begin(); it != j.end(); ++it) t.fields[it.key()] = value_from_json(it.value());
  return t;
}

ojson values_json(const SweepValues& values) {
  ojson o = ojson::object();
  for (const auto& [k, v] : values) o[k] = config_to_json_value(v);
  return o;
}

SweepValues values_from_json(const ojson& j) {
  SweepValues out;
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it) out.emplace_back(it.key(), value_from_json(it.value()));
  return out;
}

ojson number_json(double v) {
  return std::isfinite(v) ? ojson(v) : ojson(nullptr);
}

// What makes two sweeps the same sweep: not the budget, parallelism, timeout, environment or
// table columns, which may change between runs of it.
ojson identity_json(const SweepSpec& s) {
  ojson params = ojson::array();
  for (const auto& p : s.params) {
    ojson j;
    j["name"] = p.name;
    j["keys"] = p.keys;
    if (p.distribution.empty()) {
      ojson values = ojson::array();
      for (const auto& choice : p.values) {
        ojson c = ojson::array();
        for (const auto& v : choice) c.push_back(config_to_json_value(v));
        values.push_back(c);
      }
      j["values"] = values;
    } else {
      j["distribution"] = p.distribution;
      j["min"] = p.min;
      j["max"] = p.max;
      if (p.q > 0) j["q"] = p.q;
    }
    params.push_back(j);
  }
  ojson id;
  id["recipe"] = s.recipe;
  id["method"] = sweep_method_name(s.method);
  if (s.method == SweepMethod::random) id["seed"] = s.seed;
  id["metric"] = s.metric;
  id["goal"] = sweep_goal_name(s.goal);
  id["fixed"] = values_json(s.fixed);
  id["parameters"] = params;
  return id;
}

ojson read_json_file(const std::string& path) {
  ojson j = ojson_parse_or_discard(file_read(path));
  if (!j.is_object())
    fail("sweep: '" + path + "' is not a JSON object (damaged?); remove it to start the sweep over");
  return j;
}

}  // namespace

// ============================================================================================
// trials.jsonl

std::string sweep_trial_json(const SweepTrial& t) {
  ojson j;
  j["index"] = t.index;
  j["name"] = t.name;
  j["config"] = values_json(t.values);
  j["status"] = sweep_status_name(t.status);
  j["exit_code"] = t.exit_code;
  if (t.metric) j["metric"] = number_json(*t.metric);
  ojson m = ojson::object();
  for (const auto& [k, v] : t.metrics) m[k] = number_json(v);
  j["metrics"] = m;
  j["seconds"] = std::round(t.seconds * 1000) / 1000;
  if (!t.error.empty()) j["error"] = t.error;
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

namespace {

SweepTrial trial_from_ojson(const ojson& j, const std::string& output_dir) {
  SweepTrial t;
  t.index = j.at("index").get<int64_t>();
  t.name = j.at("name").get<std::string>();
  t.dir = output_dir + "/" + t.name;
  t.values = values_from_json(j.value("config", ojson::object()));
  t.status = sweep_status_parse(j.at("status").get<std::string>());
  t.exit_code = j.value("exit_code", 0);
  if (j.contains("metric")) t.metric = j["metric"].is_number() ? j["metric"].get<double>() : std::nan("");
  ojson metrics = j.value("metrics", ojson::object());
  for (auto it = metrics.begin(); it != metrics.end(); ++it)
    t.metrics[it.key()] = it.value().is_number() ? it.value().get<double>() : std::nan("");
  t.seconds = j.value("seconds", 0.0);
  t.error = j.value("error", "");
  return t;
}

}  // namespace

std::map<int64_t, SweepTrial> sweep_read_trials(const std::string& output_dir) {
  std::map<int64_t, SweepTrial> out;
  std::string path = output_dir + "/trials.jsonl";
  if (!file_exists(path)) return out;
  JsonlReadOptions o;
  o.bad = JsonlBad::report;  // a damaged line is an error, unless it is the last
  o.expected = "a JSON object";
  OJsonlReader in(path, o);
  if (!in.is_open()) fail("sweep: " + in.open_error());
  while (in.next()) {
    std::string why = in.problem();
    if (why.empty()) {
      try {
        SweepTrial t = trial_from_ojson(in.value(), output_dir);
        out[t.index] = std::move(t);
        continue;
      } catch (const std::exception& e) {
        why = e.what();
      }
    }
    if (in.last()) continue;  // cut short by a crash while it was written: that trial reruns
    fail("sweep: " + in.where() + " is not a trial record (" + why + "); fix or remove the line");
  }
  return out;
}

std::vector<SweepPlan> sweep_pending(const std::vector<SweepPlan>& plan,
                                     const std::map<int64_t, SweepTrial>& done, bool retry_failed) {
  std::vector<SweepPlan> out;
  for (const auto& p : plan) {
    auto it = done.find(p.index);
    if (it == done.end() || (retry_failed && it->second.status != SweepStatus::ok)) out.push_back(p);
  }
  return out;
}

// ============================================================================================
// sweep.json

SweepInfo sweep_info(const SweepSpec& spec, int64_t planned) {
  SweepInfo info;
  info.name = spec.name;
  info.recipe = spec.recipe;
  info.metric = spec.metric;
  info.goal = spec.goal;
  info.keys = sweep_swept_keys(spec);
  info.columns = spec.columns;
  info.planned = planned;
  return info;
}

std::string sweep_json(const SweepSpec& spec, const std::vector<SweepPlan>& plan) {
  ojson j;
  j["name"] = spec.name;
  j["recipe"] = spec.recipe;
  j["metric"] = spec.metric;
  j["goal"] = sweep_goal_name(spec.goal);
  j["keys"] = sweep_swept_keys(spec);
  j["columns"] = spec.columns;
  j["budget"] = spec.trials;
  j["parallel"] = spec.parallel;
  j["identity"] = identity_json(spec);
  ojson trials = ojson::array();
  for (const auto& p : plan) {
    ojson t;
    t["index"] = p.index;
    t["name"] = p.name;
    t["config"] = values_json(p.values);
    trials.push_back(t);
  }
  j["trials"] = trials;
  return j.dump(2) + "\n";
}

void sweep_check_resume(const SweepSpec& spec, const std::vector<SweepPlan>& plan) {
  std::string path = spec.output_dir + "/sweep.json";
  if (!file_exists(path)) return;
  ojson old = read_json_file(path);
  std::string hint =
      "use a new output_dir for a different sweep, or remove " + spec.output_dir + " to start over";
  ojson id = identity_json(spec);
  ojson old_id = old.value("identity", ojson::object());
  for (auto it = id.begin(); it != id.end(); ++it) {
    if (old_id.contains(it.key()) && old_id[it.key()].dump() == it.value().dump()) continue;
    std::string what = it.key() == "parameters" ? "parameters differ"
                       : it.key() == "fixed"    ? "fixed overrides differ"
                                                : it.key() + " differs";
    fail_usage("sweep.run: " + spec.output_dir + " holds another sweep: its " + what + " (" +
                   (old_id.contains(it.key()) ? old_id[it.key()].dump() : "none") + " there, " +
                   it.value().dump() + " here)",
               hint);
  }
  const ojson& trials = old.value("trials", ojson::array());
  for (size_t i = 0; i < trials.size() && i < plan.size(); i++) {
    if (trials[i].value("config", ojson::object()).dump() == values_json(plan[i].values).dump()) continue;
    fail_usage("sweep.run: " + spec.output_dir + " holds another sweep: its " + plan[i].name + " was " +
                   trials[i].value("config", ojson::object()).dump() + ", this sweep's is " +
                   values_json(plan[i].values).dump(),
               hint);
  }
}

SweepInfo sweep_info_read(const std::string& output_dir) {
  std::string path = output_dir + "/sweep.json";
  if (!file_exists(path))
    fail_usage("runner sweep --report: no sweep in '" + output_dir + "' (no sweep.json there)",
               "give the output_dir of a sweep that has started");
  ojson j = read_json_file(path);
  SweepInfo info;
  info.name = j.value("name", "");
  info.recipe = j.value("recipe", "");
  info.metric = j.value("metric", "");
  info.goal = j.value("goal", "minimize") == "maximize" ? SweepGoal::maximize : SweepGoal::minimize;
  info.keys = j.value("keys", std::vector<std::string>());
  info.columns = j.value("columns", std::vector<std::string>());
  info.planned = static_cast<int64_t>(j.value("trials", ojson::array()).size());
  return info;
}

}  // namespace luatune
