// Where recipes live and how a name becomes a file: `runner quickstart` finds
// <home>/recipes/quickstart.lua; `runner ls` lists them; `runner cp` copies one out to edit.
#pragma once

#include <string>
#include <vector>

namespace luatune {

// luatune's home (holds recipes/, scripts/lua/ and data/): $LUATUNE_HOME, else the directory above
// the runner executable when it has recipes/ (build/runner -> the checkout), else <exe dir>/../
// share/luatune when that has recipes/ (an installed runner, docs/install.md), else the source
// directory the runner was built from. "" when none exists.
std::string luatune_home();

struct RecipeInfo {
  std::string name;         // "quickstart"
  std::string path;         // ".../recipes/quickstart.lua"
  std::string description;  // the first sentence of the recipe's leading comment
};

// A path to an existing file, or a shipped recipe's name with or without ".lua".
std::string recipe_resolve(const std::string& name_or_path);
std::vector<RecipeInfo> recipe_list();
// The first sentence of the recipe's leading comment block (host/cli/recipe_docs.h).
std::string recipe_description(const std::string& path);
// Copies a recipe to `dest` (a file, or a directory to copy into); never overwrites. Returns the path
// written.
std::string recipe_copy(const std::string& name_or_path, const std::string& dest);

}  // namespace luatune
