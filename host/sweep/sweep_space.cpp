// The sweep spec and its search space: sweep.run{...} (as a ConfigValue) validated into a
// SweepSpec, the trial list generated up front (grid points, or seeded random draws that do not
// depend on the budget), and each trial's key=value arguments. The parameter vocabulary is W&B's
// sweep config (values, value, distribution, min, max, q) plus tied groups (keys = {...}).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "host/core/error.h"
#include "host/core/number.h"
#include "host/core/strings.h"
#include "host/sweep/sweep_engine.h"

namespace luatune {

namespace {

using Kind = ConfigValue::Kind;

const char* const kDistributions[] = {"uniform",     "int_uniform", "log_uniform_values",
                                      "log_uniform", "q_uniform",   "q_log_uniform_values"};

std::string describe(const ConfigValue& v) {
  return std::string("a ") + config_kind_name(v.kind) + " " + config_value_str(v);
}

// An empty Lua table arrives as an empty list; as a named table it means "no fields".
bool is_table(const ConfigValue& v) {
  return v.kind == Kind::table || (v.kind == Kind::list && v.items.empty());
}

const ConfigValue* field(const ConfigValue& t, const std::string& key) {
  if (t.kind != Kind::table) return nullptr;
  auto it = t.fields.find(key);
  return it == t.fields.end() ? nullptr : &it->second;
}

[[noreturn]] void fail_option(const std::string& key, const std::string& expected, const ConfigValue& got) {
  fail_usage("sweep.run: option '" + key + "' expects " + expected + ", got " + describe(got));
}

std::string opt_string(const ConfigValue& t, const std::string& key, const std::string& def) {
  const ConfigValue* v = field(t, key);
  if (!v) return def;
  if (v->kind != Kind::string) fail_option(key, "a string", *v);
  return v->string;
}

double opt_number(const ConfigValue& t, const std::string& key, double def) {
  const ConfigValue* v = field(t, key);
  if (!v) return def;
  if (v->kind != Kind::number) fail_option(key, "a number", *v);
  return v->number;
}

int64_t opt_count(const ConfigValue& t, const std::string& key, int64_t def, int64_t min) {
  double v = opt_number(t, key, static_cast<double>(def));
  if (!number_is_whole(v) || v < static_cast<double>(min))
    fail_usage("sweep.run: option '" + key + "' expects a whole number >= " + std::to_string(min) + ", got " +
               str_from_number(v));
  return static_cast<int64_t>(v);
}

bool opt_bool(const ConfigValue& t, const std::string& key, bool def) {
  const ConfigValue* v = field(t, key);
  if (!v) return def;
  if (v->kind != Kind::boolean) fail_option(key, "a boolean", *v);
  return v->boolean;
}

// A list of strings (numbers allowed where `numbers`, as for device ids).
std::vector<std::string> opt_strings(const ConfigValue& t, const std::string& key, bool numbers) {
  const ConfigValue* v = field(t, key);
  if (!v) return {};
  if (v->kind != Kind::list) fail_option(key, "a list of strings", *v);
  std::vector<std::string> out;
  for (const auto& item : v->items) {
    if (item.kind == Kind::string)
      out.push_back(item.string);
    else if (numbers && item.kind == Kind::number && number_is_whole(item.number))
      out.push_back(str_from_number(item.number));
    else
      fail_option(key, numbers ? "a list of device ids" : "a list of strings", *v);
  }
  return out;
}

// A named table or a list of "key=value" (or key:value) strings -> key/value pairs, flattened.
SweepValues opt_assignments(const ConfigValue& t, const std::string& key) {
  const ConfigValue* v = field(t, key);
  SweepValues out;
  if (!v) return out;
  if (v->kind == Kind::list) {
    for (const auto& item : v->items) {
      size_t sep = item.kind == Kind::string ? item.string.find_first_of("=:") : std::string::npos;
      if (sep == std::string::npos || sep == 0)
        fail_usage("sweep.run: option '" + key + "' as a list takes \"key=value\" strings, got " +
                   describe(item));
      out.emplace_back(str_trim(item.string.substr(0, sep)),
                       ConfigValue::of_string(item.string.substr(sep + 1)));
    }
    return out;
  }
  if (v->kind != Kind::table) fail_option(key, "a table of key = value", *v);
  for (auto& o : config_flatten(*v, "sweep")) out.emplace_back(o.key, *o.value);
  return out;
}

// A value a trial can be given on a command line: a scalar or a list of scalars.
void check_value(const std::string& param, const ConfigValue& v) {
  bool ok = v.kind != Kind::table;
  for (const auto& item : v.items) ok = ok && item.kind != Kind::list && item.kind != Kind::table;
  if (!ok)
    fail_usage("sweep.run: parameter '" + param +
               "': values must be numbers, strings, booleans or lists of them, got " + describe(v));
}

void check_key(const std::string& where, const std::string& key) {
  bool ok = !key.empty() && key.find_first_of("= \t\n") == std::string::npos && key.front() != '-';
  if (!ok) fail_usage("sweep.run: " + where + ": '" + key + "' is not a config key");
  if (key == "output_dir")
    fail_usage("sweep.run: " + where +
               ": output_dir is set by the sweep (OUTPUT_DIR/trial-NNN for each trial)");
}

// ============================================================================================
// One parameter

SweepParam parse_param(const std::string& name, const ConfigValue& spec, SweepMethod method) {
  SweepParam p;
  p.name = name;
  std::string where = "parameter '" + name + "'";
  ConfigValue t = spec;
  if (spec.kind == Kind::list && !spec.items.empty()) {  // lr = {1e-4, 3e-4}: shorthand for values
    t = ConfigValue::of_table();
    t.fields["values"] = spec;
  }
  if (!is_table(t))
    fail_usage("sweep.run: " + where +
               " expects a table like { values = {...} } or { distribution = \"uniform\", " +
               "min = 0, max = 1 }, got " + describe(spec));
  static const std::vector<std::string> valid = {"values", "value", "distribution", "min",
                                                 "max",    "q",     "keys"};
  for (const auto& [k, v] : t.fields) {
    if (std::find(valid.begin(), valid.end(), k) != valid.end()) continue;
    std::string near = str_nearest(k, valid);
    fail_usage("sweep.run: " + where + ": unknown key '" + k + "'" +
               (near.empty() ? "" : " (did you mean '" + near + "'?)") +
               "; valid keys: " + str_join(valid, ", "));
  }
  const ConfigValue* values = field(t, "values");
  const ConfigValue* value = field(t, "value");
  const ConfigValue* keys = field(t, "keys");
  bool range = field(t, "min") || field(t, "max") || field(t, "q") || field(t, "distribution");
  if ((values || value) && range)
    fail_usage("sweep.run: " + where + ": give values (or value) or a distribution with min/max, not both");
  if (values && value) fail_usage("sweep.run: " + where + ": give values or value, not both");

  // Tied group: keys = {"lora.r", "lora.alpha"}, values = {{8, 16}, {16, 32}}.
  if (keys) {
    if (keys->kind != Kind::list || keys->items.empty())
      fail_usage("sweep.run: " + where + ": keys expects a non-empty list of config keys, got " +
                 describe(*keys));
    for (const auto& k : keys->items) {
      if (k.kind != Kind::string)
        fail_usage("sweep.run: " + where + ": keys must be strings, got " + describe(k));
      check_key(where, k.string);
      p.keys.push_back(k.string);
    }
    if (!values)
      fail_usage("sweep.run: " + where + ": a tied group (keys = {...}) takes values = {{...}, ...}");
  } else {
    check_key(where, name);
    p.keys = {name};
  }

  if (values || value) {
    std::vector<ConfigValue> choices;
    if (value) {
      choices.push_back(*value);
    } else {
      if (values->kind != Kind::list)
        fail_usage("sweep.run: " + where + ": values expects a list, got " + describe(*values));
      if (values->items.empty()) fail_usage("sweep.run: " + where + ": values is empty");
      choices = values->items;
    }
    for (size_t i = 0; i < choices.size(); i++) {
      const ConfigValue& c = choices[i];
      if (p.keys.size() == 1 && !(keys && c.kind == Kind::list)) {
        check_value(name, c);
        p.values.push_back({c});
        continue;
      }
      std::string at = "values[" + std::to_string(i + 1) + "]";
      if (c.kind != Kind::list)
        fail_usage("sweep.run: " + where + ": " + at + " must be a list of " + std::to_string(p.keys.size()) +
                   " values (one per key), got " + describe(c));
      if (c.items.size() != p.keys.size())
        fail_usage("sweep.run: " + where + ": " + at + " has " + std::to_string(c.items.size()) +
                   " values for " + std::to_string(p.keys.size()) + " keys (" + str_join(p.keys, ", ") + ")");
      for (const auto& item : c.items) check_value(name, item);
      p.values.push_back(c.items);
    }
    return p;
  }

  // A distribution. Without one named, min and max imply int_uniform (both whole) or uniform.
  if (!field(t, "min") || !field(t, "max"))
    fail_usage("sweep.run: " + where + " needs values = {...}, or min and max (with a distribution)");
  for (const char* k : {"min", "max", "q"}) {
    const ConfigValue* v = field(t, k);
    if (v && v->kind != Kind::number)
      fail_usage("sweep.run: " + where + ": " + k + " expects a number, got " + describe(*v));
  }
  p.min = field(t, "min")->number;
  p.max = field(t, "max")->number;
  p.distribution = opt_string(t, "distribution",
                              number_is_whole(p.min) && number_is_whole(p.max) ? "int_uniform" : "uniform");
  bool known = false;
  for (const char* d : kDistributions) known = known || p.distribution == d;
  if (!known)
    fail_usage("sweep.run: " + where + ": unknown distribution '" + p.distribution +
               "'; expected uniform, int_uniform, log_uniform_values, log_uniform, q_uniform or "
               "q_log_uniform_values");
  if (keys) fail_usage("sweep.run: " + where + ": a tied group takes values, not a distribution");
  if (method == SweepMethod::grid)
    fail_usage("sweep.run: " + where + ": grid search needs values (it has distribution " + p.distribution +
               "); list the values or use method = \"random\"");
  if (!(p.min < p.max))
    fail_usage("sweep.run: " + where + ": min (" + str_from_number(p.min) + ") must be less than max (" +
               str_from_number(p.max) + ")");
  bool q = str_starts_with(p.distribution, "q_");
  if (field(t, "q") && !q)
    fail_usage("sweep.run: " + where + ": q applies to q_uniform and q_log_uniform_values, not " +
               p.distribution);
  p.q = opt_number(t, "q", q ? 1 : 0);
  if (q && !(p.q > 0)) fail_usage("sweep.run: " + where + ": q must be > 0, got " + str_from_number(p.q));
  if (p.distribution == "int_uniform" && (!number_is_whole(p.min) || !number_is_whole(p.max)))
    fail_usage("sweep.run: " + where + ": int_uniform needs whole min and max, got " +
               str_from_number(p.min) + " and " + str_from_number(p.max));
  if ((p.distribution == "log_uniform_values" || p.distribution == "q_log_uniform_values") && !(p.min > 0))
    fail_usage("sweep.run: " + where + ": " + p.distribution + " needs 0 < min < max, got min " +
               str_from_number(p.min));
  return p;
}

// ============================================================================================
// Random draws: splitmix64, so a trial's draws depend on (seed, index) alone and the same seed
// gives the same numbers on every platform (std:: distributions are implementation-defined).

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct Rng {
  uint64_t state;
  Rng(uint64_t seed, int64_t index) {
    uint64_t s = seed;
    state = splitmix64(s) ^ static_cast<uint64_t>(index) * 0xd1b54a32d192ed03ULL;
  }
  double uniform() { return static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53; }  // [0, 1)
};

std::vector<ConfigValue> draw(const SweepParam& p, Rng& rng) {
  double u = rng.uniform();
  if (p.distribution.empty()) {
    size_t i = std::min(p.values.size() - 1, static_cast<size_t>(u * static_cast<double>(p.values.size())));
    return p.values[i];
  }
  double x;
  const std::string& d = p.distribution;
  if (d == "int_uniform") {
    x = std::min(p.max, p.min + std::floor(u * (p.max - p.min + 1)));
  } else if (d == "log_uniform_values" || d == "q_log_uniform_values") {
    x = std::exp(std::log(p.min) + u * (std::log(p.max) - std::log(p.min)));
  } else if (d == "log_uniform") {  // W&B: min and max are natural logs of the range
    x = std::exp(p.min + u * (p.max - p.min));
  } else {
    x = p.min + u * (p.max - p.min);
  }
  if (p.q > 0) x = std::round(x / p.q) * p.q;
  return {ConfigValue::of_number(x)};
}

}  // namespace

// ============================================================================================
// The spec

const std::vector<std::string>& sweep_option_names() {
  static const std::vector<std::string> names = {
      "recipe",        "name",     "output_dir", "fixed",   "method",      "seed",
      "trials",        "parallel", "metric",     "goal",    "parameters",  "timeout",
      "wandb_project", "env",      "devices",    "columns", "retry_failed"};
  return names;
}

const char* sweep_method_name(SweepMethod m) {
  return m == SweepMethod::grid ? "grid" : "random";
}

const char* sweep_goal_name(SweepGoal g) {
  return g == SweepGoal::minimize ? "minimize" : "maximize";
}

std::vector<std::pair<std::string, ConfigValue>> sweep_option_defaults() {
  const SweepSpec d;
  return {{"method", ConfigValue::of_string(sweep_method_name(d.method))},
          {"seed", ConfigValue::of_number(static_cast<double>(d.seed))},
          {"trials", ConfigValue::of_number(static_cast<double>(d.trials))},
          {"parallel", ConfigValue::of_number(d.parallel)},
          {"goal", ConfigValue::of_string(sweep_goal_name(d.goal))},
          {"timeout", ConfigValue::of_number(d.timeout)},
          {"retry_failed", ConfigValue::of_boolean(d.retry_failed)}};
}

SweepSpec sweep_spec_parse(const ConfigValue& o) {
  if (!is_table(o))
    fail_usage("sweep.run: expected a table of options, e.g. sweep.run{ recipe = ..., parameters = ... }");
  const auto& names = sweep_option_names();
  for (const auto& [k, v] : o.fields) {
    if (std::find(names.begin(), names.end(), k) != names.end()) continue;
    std::string near = str_nearest(k, names);
    fail_usage("sweep.run: unknown option '" + k + "'" +
               (near.empty() ? "" : " (did you mean '" + near + "'?)") +
               "; valid options: " + str_join(names, ", "));
  }
  SweepSpec s;
  s.recipe = opt_string(o, "recipe", "");
  if (s.recipe.empty())
    fail_usage("sweep.run: option 'recipe' is required (a shipped recipe's name or a path)");
  s.output_dir = opt_string(o, "output_dir", "");
  if (s.output_dir.empty())
    fail_usage("sweep.run: option 'output_dir' is required (where trials and results go)");
  while (s.output_dir.size() > 1 && s.output_dir.back() == '/') s.output_dir.pop_back();
  std::string base = s.output_dir.substr(s.output_dir.find_last_of('/') + 1);
  s.name = opt_string(o, "name", base.empty() || base == "." ? "sweep" : base);

  const SweepSpec d;  // the defaults (sweep_option_defaults)
  std::string method = opt_string(o, "method", sweep_method_name(d.method));
  if (method == "grid")
    s.method = SweepMethod::grid;
  else if (method == "random")
    s.method = SweepMethod::random;
  else
    fail_usage("sweep.run: method must be \"grid\" or \"random\", got \"" + method + "\"");
  double seed = opt_number(o, "seed", static_cast<double>(d.seed));
  if (!number_is_whole(seed) || seed < 0)
    fail_usage("sweep.run: option 'seed' expects a whole number >= 0, got " + str_from_number(seed));
  s.seed = static_cast<uint64_t>(seed);
  s.trials = opt_count(o, "trials", d.trials, 0);
  s.parallel = static_cast<int>(opt_count(o, "parallel", d.parallel, 1));
  s.timeout = opt_number(o, "timeout", d.timeout);
  if (!(s.timeout >= 0))
    fail_usage("sweep.run: option 'timeout' expects seconds >= 0 (0 = none), got " +
               str_from_number(s.timeout));
  s.wandb_project = opt_string(o, "wandb_project", "");
  s.wandb_given = field(o, "wandb_project") != nullptr;
  s.retry_failed = opt_bool(o, "retry_failed", d.retry_failed);
  s.devices = opt_strings(o, "devices", true);
  s.columns = opt_strings(o, "columns", false);

  // metric = "eval_loss" (with goal = ...) or metric = { name = "eval_loss", goal = "minimize" }.
  std::string goal = opt_string(o, "goal", "");
  const ConfigValue* metric = field(o, "metric");
  if (!metric)
    fail_usage(
        "sweep.run: option 'metric' is required, e.g. metric = { name = \"eval_loss\", goal = \"minimize\" "
        "}");
  if (metric->kind == Kind::string) {
    s.metric = metric->string;
  } else if (metric->kind == Kind::table) {
    for (const auto& [k, v] : metric->fields)
      if (k != "name" && k != "goal")
        fail_usage("sweep.run: metric: unknown key '" + k + "'; valid keys: name, goal");
    s.metric = opt_string(*metric, "name", "");
    if (!goal.empty() && field(*metric, "goal"))
      fail_usage("sweep.run: give goal in metric = {...} or beside it, not both");
    goal = opt_string(*metric, "goal", goal);
  } else {
    fail_option("metric", "a name or { name = ..., goal = ... }", *metric);
  }
  if (s.metric.empty()) fail_usage("sweep.run: metric needs a name, e.g. metric = { name = \"eval_loss\" }");
  if (goal.empty())
    s.goal = d.goal;
  else if (goal == "minimize")
    s.goal = SweepGoal::minimize;
  else if (goal == "maximize")
    s.goal = SweepGoal::maximize;
  else
    fail_usage("sweep.run: goal must be \"minimize\" or \"maximize\", got \"" + goal + "\"");

  s.fixed = opt_assignments(o, "fixed");
  std::sort(s.fixed.begin(), s.fixed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [k, v] : s.fixed) check_key("fixed", k);
  s.env = opt_assignments(o, "env");
  for (auto& [k, v] : s.env)
    if (v.kind != Kind::string) v = ConfigValue::of_string(sweep_arg(k, v).substr(k.size() + 1));

  const ConfigValue* params = field(o, "parameters");
  if (!params || !is_table(*params) || params->fields.empty())
    fail_usage(
        "sweep.run: option 'parameters' is required: a table of config keys to sweep, e.g. "
        "parameters = { learning_rate = { values = { 1e-4, 3e-4 } } }");
  std::map<std::string, std::string> owner;  // config key -> the parameter that sets it
  for (const auto& [k, v] : s.fixed) owner[k] = "fixed";
  for (const auto& [name, spec] : params->fields) {
    s.params.push_back(parse_param(name, spec, s.method));
    for (const auto& key : s.params.back().keys) {
      auto [it, fresh] = owner.emplace(key, "parameter '" + name + "'");
      if (!fresh)
        fail_usage("sweep.run: key '" + key + "' is set by both " + it->second + " and parameter '" + name +
                   "'");
    }
  }
  if (s.method == SweepMethod::random && s.trials == 0)
    fail_usage("sweep.run: random search needs a budget: trials = N");
  return s;
}

// ============================================================================================
// The trial list

std::vector<SweepPlan> sweep_plan(const SweepSpec& spec) {
  std::vector<std::vector<std::vector<ConfigValue>>> rows;  // per trial: the chosen values of each param
  if (spec.method == SweepMethod::grid) {
    double points = 1;
    for (const auto& p : spec.params) points *= static_cast<double>(p.values.size());
    if (points > 1e7)
      fail_usage("sweep.run: the grid has " + str_from_number(points) + " points; use method = \"random\"");
    int64_t n = static_cast<int64_t>(points);
    if (spec.trials > 0) n = std::min(n, spec.trials);
    for (int64_t i = 0; i < n; i++) {
      std::vector<std::vector<ConfigValue>> row(spec.params.size());
      int64_t rest = i;  // mixed-radix digits, the last parameter the fastest
      for (size_t j = spec.params.size(); j-- > 0;) {
        int64_t size = static_cast<int64_t>(spec.params[j].values.size());
        row[j] = spec.params[j].values[static_cast<size_t>(rest % size)];
        rest /= size;
      }
      rows.push_back(std::move(row));
    }
  } else {
    for (int64_t i = 0; i < spec.trials; i++) {
      Rng rng(spec.seed, i + 1);
      std::vector<std::vector<ConfigValue>> row;
      for (const auto& p : spec.params) row.push_back(draw(p, rng));
      rows.push_back(std::move(row));
    }
  }
  std::vector<SweepPlan> plan;
  for (size_t i = 0; i < rows.size(); i++) {
    SweepPlan t;
    t.index = static_cast<int64_t>(i + 1);
    char name[32];
    std::snprintf(name, sizeof name, "trial-%03lld", static_cast<long long>(t.index));
    t.name = name;
    for (size_t j = 0; j < spec.params.size(); j++)
      for (size_t k = 0; k < spec.params[j].keys.size(); k++)
        t.values.emplace_back(spec.params[j].keys[k], rows[i][j][k]);
    plan.push_back(std::move(t));
  }
  return plan;
}

std::vector<std::string> sweep_swept_keys(const SweepSpec& spec) {
  std::vector<std::string> keys;
  for (const auto& p : spec.params) keys.insert(keys.end(), p.keys.begin(), p.keys.end());
  return keys;
}

static std::string arg_text(const ConfigValue& v) {
  switch (v.kind) {
    case Kind::number:
      return str_from_number(v.number);
    case Kind::boolean:
      return v.boolean ? "true" : "false";
    case Kind::string:
      return v.string;
    case Kind::list: {
      std::vector<std::string> parts;
      for (const auto& i : v.items) parts.push_back(arg_text(i));
      return str_join(parts, ",");
    }
    case Kind::table:
      break;
  }
  fail("sweep: a table cannot be given on a command line: " + config_value_str(v));
}

std::string sweep_arg(const std::string& key, const ConfigValue& v) {
  return key + "=" + arg_text(v);
}

std::vector<std::string> sweep_trial_args(const SweepSpec& spec, const std::string& verb,
                                          const std::string& recipe_path, const SweepPlan& plan) {
  std::vector<std::string> args = {verb, recipe_path};
  for (const auto& [k, v] : spec.fixed) args.push_back(sweep_arg(k, v));
  for (const auto& [k, v] : plan.values) args.push_back(sweep_arg(k, v));
  args.push_back("output_dir=" + spec.output_dir + "/" + plan.name);
  if (spec.wandb_given) args.push_back("wandb_project=" + spec.wandb_project);
  return args;
}

std::string sweep_show_number(double v) {
  if (number_is_whole(v) && std::fabs(v) < 1e15) return str_from_number(v);
  char buf[64];
  double a = std::fabs(v);
  if (std::isfinite(v) && (a < 1e-2 || a >= 1e6)) {
    std::snprintf(buf, sizeof buf, "%.2e", v);  // 3.20e-04 -> 3.2e-04; 1.00e-04 -> 1e-04
    std::string s = buf;
    size_t e = s.find('e');
    std::string mant = s.substr(0, e);
    while (mant.find('.') != std::string::npos && (mant.back() == '0' || mant.back() == '.')) mant.pop_back();
    return mant + s.substr(e);
  }
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string sweep_show(const ConfigValue& v) {
  if (v.kind == Kind::number) return sweep_show_number(v.number);
  if (v.kind == Kind::list) {
    std::vector<std::string> parts;
    for (const auto& i : v.items) parts.push_back(sweep_show(i));
    return str_join(parts, ",");
  }
  return v.kind == Kind::table ? config_value_str(v) : arg_text(v);
}

}  // namespace luatune
