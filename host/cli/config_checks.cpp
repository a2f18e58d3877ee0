// Config checks by key name (see config_checks.h). The rules follow the vocabulary every shipped
// recipe uses (docs/recipes.md); a key matches by its last dotted component, so `lora.dropout` and
// `pretrain.learning_rate` are checked like top-level keys.
#include "host/cli/config_checks.h"

#include <cmath>

#include "host/cli/recipes.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/process.h"
#include "host/core/strings.h"
#include "host/data/dataset.h"
#include "host/data/file_check.h"
#include "host/io/hub_cache.h"

namespace luatune {

namespace {

enum class PathKind { model, adapter, file };

// String keys naming something that must exist before a run starts ("" = not given).
struct PathRule {
  const char* key;
  PathKind kind;
};
const PathRule kPathRules[] = {
    {"base_model", PathKind::model}, {"model", PathKind::model},        {"teacher", PathKind::model},
    {"policy", PathKind::model},     {"reward_model", PathKind::model}, {"tokenizer", PathKind::model},
    {"adapter", PathKind::adapter},  {"data", PathKind::file},          {"eval_data", PathKind::file},
    {"prompts", PathKind::file},     {"catalog", PathKind::file},
};

// Numeric keys and their ranges.
struct RangeRule {
  const char* key;  // the last dotted component; "*x" matches any name ending in x
  bool whole;       // must be a whole number
  double lo, hi;    // lo <= v <= hi (or < when the flag says so)
  bool lo_open, hi_open;
  const char* meaning;  // "at least 1", "in [0, 1)", ...
};
constexpr double kInf = HUGE_VAL;
const RangeRule kRangeRules[] = {
    {"learning_rate", false, 0, kInf, true, true, "a positive number"},
    {"*_lr", false, 0, kInf, false, true, "a number >= 0"},
    {"max_steps", true, 1, kInf, false, true, "a whole number >= 1"},
    {"num_train_epochs", true, 1, kInf, false, true, "a whole number >= 1"},
    {"warmup_steps", true, 0, kInf, false, true, "a whole number >= 0"},
    {"warmup_ratio", false, 0, 1, false, true, "in [0, 1)"},
    {"batch_size", true, 1, kInf, false, true, "a whole number >= 1"},
    {"gradient_accumulation_steps", true, 1, kInf, false, true, "a whole number >= 1"},
    {"max_length", true, 1, kInf, false, true, "a whole number >= 1"},
    {"eval_steps", true, 0, kInf, false, true, "a whole number >= 0"},
    {"save_steps", true, 0, kInf, false, true, "a whole number >= 0"},
    {"eval_fraction", false, 0, 1, false, true, "in [0, 1)"},
    {"*dropout", false, 0, 1, false, true, "in [0, 1)"},
    {"*sparsity", false, 0, 1, false, true, "in [0, 1)"},
    {"*temperature", false, 0, kInf, true, true, "a positive number"},
    {"r", true, 1, kInf, false, true, "a whole number >= 1 (the LoRA rank)"},
    {"alpha", false, 0, kInf, true, true, "a positive number"},
};

bool name_matches(const std::string& pattern, const std::string& name) {
  if (!pattern.empty() && pattern[0] == '*') return str_ends_with(name, pattern.substr(1));
  return name == pattern;
}

std::string where(const ConfigValue& v) {
  return v.origin.empty() ? "recipe default" : v.origin;
}

std::string path_problem(const std::string& key, const ConfigValue& v, PathKind kind) {
  const std::string& p = v.string;
  std::string head = key + " = \"" + p + "\" (" + where(v) + "): ";
  // A relative default may name a file in luatune's home (the tokenizer scripts/setup.sh fetches)
  // or beside the runner (the example data set the build writes, build/data/example_chat.jsonl):
  // recipes resolve those through scripts/lua/paths.lua, from any working directory.
  if (p[0] != '/' && !file_exists(p) && !dir_exists(p)) {
    for (const std::string& dir : {luatune_home(), path_dirname(process_self_exe("config"))})
      if (!dir.empty() && (file_exists(dir + "/" + p) || dir_exists(dir + "/" + p))) return "";
  }
  switch (kind) {
    case PathKind::model: {
      std::string why;
      if (model_path_available(p, &why)) return "";
      return head + why;
    }
    case PathKind::adapter:
      if (!dir_exists(p))
        return head + "no such directory (expected an adapter directory holding adapter_config.json)";
      if (file_exists(p + "/adapter_config.json")) return "";
      if (file_exists(p + "/adapter/adapter_config.json"))  // a LoRA run's output_dir
        return head + "holds no adapter_config.json; its adapter/ does: adapter = \"" + p + "/adapter\"";
      return head + "holds no adapter_config.json (expected a PEFT adapter directory)";
    case PathKind::file:
      if (file_exists(p) || dir_exists(p)) return "";
      return head + "no such file";
  }
  return "";
}

std::string range_problem(const std::string& key, const std::string& name, const ConfigValue& v,
                          const ConfigValue& root) {
  const double x = v.number;
  std::string head = key + " = " + config_value_str(v) + " (" + where(v) + "): ";
  if (!std::isfinite(x)) return head + "expected a finite number";
  for (const auto& r : kRangeRules) {
    if (!name_matches(r.key, name)) continue;
    // max_steps = 0 means "the epochs" in a recipe that also has num_train_epochs, and "skip this
    // stage" in a stage's table (minitron's distill.max_steps = 0: prune only).
    if (name == "max_steps" && x == 0 &&
        (root.fields.count("num_train_epochs") || key.find('.') != std::string::npos))
      return "";
    // A recipe's own sampling temperature (generate, rejection_sampling): 0 is greedy decoding. A
    // distillation temperature (distill.temperature, distill_temperature) stays positive.
    if (name == "temperature" && x == 0 && key.find('.') == std::string::npos) return "";
    bool ok = (r.lo_open ? x > r.lo : x >= r.lo) && (r.hi_open ? x < r.hi : x <= r.hi);
    if (r.whole && x != std::floor(x)) ok = false;
    return ok ? "" : head + "expected " + r.meaning;
  }
  return "";
}

// warmup_steps past max_steps in one table: the learning rate is still rising when the run ends.
std::string warmup_warning(const ConfigValue& node, const std::string& prefix) {
  auto warmup = node.fields.find("warmup_steps"), steps = node.fields.find("max_steps");
  if (warmup == node.fields.end() || steps == node.fields.end()) return "";
  const ConfigValue &w = warmup->second, &m = steps->second;
  if (w.kind != ConfigValue::Kind::number || m.kind != ConfigValue::Kind::number) return "";
  if (!(m.number >= 1) || !(w.number > m.number) || !std::isfinite(w.number)) return "";
  const std::string max = config_value_str(m);
  return "config: " + prefix + "warmup_steps = " + config_value_str(w) + " (" + where(w) + ") is more than " +
         prefix + "max_steps = " + max + " (" + where(m) +
         "): the learning rate is still warming up when the run ends and never reaches its peak; hint: " +
         prefix + "warmup_steps = " + max + " or less";
}

void walk(const ConfigValue& node, const std::string& prefix, const ConfigValue& root,
          const ConfigCheckOptions& o, std::vector<std::string>* out, std::vector<std::string>* warnings) {
  if (std::string w = warmup_warning(node, prefix.empty() ? "" : prefix + "."); !w.empty())
    warnings->push_back(w);
  for (const auto& [name, v] : node.fields) {
    std::string key = prefix.empty() ? name : prefix + "." + name;
    std::string problem;
    if (v.kind == ConfigValue::Kind::table) {
      walk(v, key, root, o, out, warnings);
    } else if (v.kind == ConfigValue::Kind::number) {
      problem = range_problem(key, name, v, root);
    } else if (v.kind == ConfigValue::Kind::string && o.paths && !v.string.empty()) {
      for (const auto& r : kPathRules)
        if (name == r.key) problem = path_problem(key, v, r.kind);
    }
    if (!problem.empty()) out->push_back(problem);
  }
}

// ============================================================================================
// Data files (runner validate): the top-level data, eval_data and prompts files read as loading
// reads them, and the held-out split of data counted as run.sets / pref.sets count it.

// The string at cfg[key], or nullptr.
const ConfigValue* top_string(const ConfigValue& cfg, const char* key) {
  auto it = cfg.fields.find(key);
  return it != cfg.fields.end() && it->second.kind == ConfigValue::Kind::string ? &it->second : nullptr;
}

// A data file's path as the recipes open it (a relative default may live where path_problem looks);
// "" when it is not given or no regular file (path_problem has said so).
std::string data_path(const std::string& p) {
  if (p.empty() || dir_exists(p)) return "";
  if (file_exists(p)) return p;
  if (p[0] == '/') return "";
  for (const std::string& dir : {luatune_home(), path_dirname(process_self_exe("config"))})
    if (!dir.empty() && file_exists(dir + "/" + p)) return dir + "/" + p;
  return "";
}

void check_data(const ConfigValue& cfg, ConfigReport* report) {
  // Preference recipes (keys.preference) have eval_data: their files hold pairs.
  const ConfigValue* eval_data = top_string(cfg, "eval_data");
  const DataFileKind kind = eval_data ? DataFileKind::pairs : DataFileKind::records;
  std::optional<DataFormat> format;
  if (const ConfigValue* f = top_string(cfg, "format");
      f && !f->string.empty() && kind == DataFileKind::records) {
    try {
      format = data_format_parse(f->string);
    } catch (const Error& e) {
      report->problems.push_back("format = \"" + f->string + "\" (" + where(*f) + "): " + e.what());
      return;
    }
  }
  const struct {
    const char* key;
    DataFileKind kind;
  } files[] = {{"data", kind}, {"eval_data", kind}, {"prompts", DataFileKind::objects}};
  for (const auto& file : files) {
    const ConfigValue* v = top_string(cfg, file.key);
    const std::string path = v ? data_path(v->string) : "";
    if (path.empty()) continue;
    const std::string head = std::string(file.key) + " = \"" + v->string + "\" (" + where(*v) + "): ";
    DataFileCheck c;
    try {
      c = data_check_file(path, file.kind, format);
    } catch (const Error& e) {
      report->problems.push_back(head + e.what());
      continue;
    }
    for (const auto& p : c.problems) report->problems.push_back(head + p);
    const int64_t unlisted = c.bad - static_cast<int64_t>(c.problems.size());
    if (unlisted > 0)
      report->problems.push_back(head + std::to_string(unlisted) + " more bad lines after these (" +
                                 std::to_string(c.bad) + " of its " + std::to_string(c.records) +
                                 " records)");
    // The held-out split: eval_fraction of data's records (pairs), unless eval_data holds them.
    auto fraction = cfg.fields.find("eval_fraction");
    if (std::string(file.key) != "data" || c.bad > 0 || (eval_data && !eval_data->string.empty()) ||
        fraction == cfg.fields.end() || fraction->second.kind != ConfigValue::Kind::number)
      continue;
    std::string w = data_eval_split_warning(c.records, fraction->second.number,
                                            kind == DataFileKind::pairs ? "pairs" : "records");
    if (!w.empty()) report->warnings.push_back(w);
  }
}

}  // namespace

ConfigReport config_check(const ConfigValue& cfg, const ConfigCheckOptions& options) {
  ConfigReport report;
  walk(cfg, "", cfg, options, &report.problems, &report.warnings);
  if (options.read_data && options.paths) check_data(cfg, &report);
  return report;
}

std::vector<std::string> config_problems(const ConfigValue& cfg, const ConfigCheckOptions& options) {
  return config_check(cfg, options).problems;
}

}  // namespace luatune
