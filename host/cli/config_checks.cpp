// Config checks by key name (see config_checks.h). The rules follow the vocabulary every shipped
// recipe uses (docs/recipes.md); a key matches by its last dotted component, so `lora.dropout` and
// `pretrain.learning_rate` are checked like top-level keys.
#include "host/cli/config_checks.h"

#include <cmath>

#include "host/cli/recipes.h"
#include "host/core/files.h"
#include "host/core/strings.h"
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
  // A relative default may name a file in luatune's home (the tokenizer scripts/setup.sh fetches):
  // recipes resolve those through scripts/lua/paths.lua, from any working directory.
  if (p[0] != '/' && !file_exists(p) && !dir_exists(p)) {
    std::string home = luatune_home();
    if (!home.empty() && (file_exists(home + "/" + p) || dir_exists(home + "/" + p))) return "";
  }
  switch (kind) {
    case PathKind::model: {
      std::string why;
      if (model_path_available(p, &why)) return "";
      return head + why;
    }
    case PathKind::adapter:
      if (dir_exists(p)) return "";
      return head + "no such directory (expected an adapter directory holding adapter_config.json)";
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
    bool ok = (r.lo_open ? x > r.lo : x >= r.lo) && (r.hi_open ? x < r.hi : x <= r.hi);
    if (r.whole && x != std::floor(x)) ok = false;
    return ok ? "" : head + "expected " + r.meaning;
  }
  return "";
}

void walk(const ConfigValue& node, const std::string& prefix, const ConfigValue& root,
          const ConfigCheckOptions& o, std::vector<std::string>* out) {
  for (const auto& [name, v] : node.fields) {
    std::string key = prefix.empty() ? name : prefix + "." + name;
    std::string problem;
    if (v.kind == ConfigValue::Kind::table) {
      walk(v, key, root, o, out);
    } else if (v.kind == ConfigValue::Kind::number) {
      problem = range_problem(key, name, v, root);
    } else if (v.kind == ConfigValue::Kind::string && o.paths && !v.string.empty()) {
      for (const auto& r : kPathRules)
        if (name == r.key) problem = path_problem(key, v, r.kind);
    }
    if (!problem.empty()) out->push_back(problem);
  }
}

}  // namespace

std::vector<std::string> config_problems(const ConfigValue& cfg, const ConfigCheckOptions& options) {
  std::vector<std::string> out;
  walk(cfg, "", cfg, options, &out);
  return out;
}

}  // namespace luatune
