// What `runner validate` (and every run, before it loads anything) checks in a resolved config:
// paths that must exist and values that must lie in a range, by key name across all recipes (the
// shared vocabulary of docs/recipes.md). Every problem is reported, not just the first.
#pragma once

#include <string>
#include <vector>

#include "host/cli/config.h"

namespace luatune {

struct ConfigCheckOptions {
  bool paths = true;  // false for `runner plan`, which reads a model's shape only when it exists
};

// One line per problem: "data = \"/nope\" (command line): no such file ...". Empty when all is well.
std::vector<std::string> config_problems(const ConfigValue& cfg, const ConfigCheckOptions& options = {});

}  // namespace luatune
