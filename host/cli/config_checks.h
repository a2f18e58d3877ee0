// What `runner validate` (and every run, before it loads anything) checks in a resolved config:
// paths that must exist and values that must lie in a range, by key name across all recipes (the
// shared vocabulary of docs/recipes.md), and what deserves a warning (warmup_steps past max_steps).
// `runner validate` also reads the data files. Every problem is reported, not just the first.
#pragma once

#include <string>
#include <vector>

#include "host/cli/config.h"

namespace luatune {

struct ConfigCheckOptions {
  bool paths = true;  // false for `runner plan`, which reads a model's shape only when it exists
  // `runner validate`: read the data files (data, eval_data, prompts) line by line, as loading would
  // (host/data/file_check.h), and warn when eval_fraction holds none of data's records out.
  bool read_data = false;
};

// What the checks found: problems stop the run (exit status 2); warnings are printed and it goes on.
struct ConfigReport {
  std::vector<std::string> problems;  // "data = \"/nope\" (command line): no such file ..."
  std::vector<std::string> warnings;  // "config: warmup_steps = 20 (recipe default) is more than ..."
};

ConfigReport config_check(const ConfigValue& cfg, const ConfigCheckOptions& options = {});
// config_check's problems only. Empty when all is well.
std::vector<std::string> config_problems(const ConfigValue& cfg, const ConfigCheckOptions& options = {});

}  // namespace luatune
