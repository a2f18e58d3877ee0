// Recipe lookup, listing and copying (see recipes.h).
#include "host/cli/recipes.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <sstream>

#include "host/cli/recipe_docs.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/strings.h"

namespace luatune {

std::string luatune_home() {
  if (const char* env = std::getenv("LUATUNE_HOME"); env && *env) return env;
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) {
    buf[n] = 0;
    std::string up = path_dirname(path_dirname(buf));
    if (dir_exists(up + "/recipes")) return up;  // build/runner in a checkout
    std::string share = up + "/share/luatune";   // P/bin/runner after cmake --install --prefix P
    if (dir_exists(share + "/recipes")) return share;
  }
  if (dir_exists(std::string(LUATUNE_SOURCE_DIR) + "/recipes")) return LUATUNE_SOURCE_DIR;
  return "";
}

static std::vector<std::string> recipe_names() {
  std::vector<std::string> names;
  for (const auto& r : recipe_list()) names.push_back(r.name);
  return names;
}

// What a name that is no recipe may have meant: a typo's nearest name, else the names that have it
// as a whole part ("qlora" -> qlora_finetune, "sheared" -> llama31_sheared), at most four.
static std::vector<std::string> recipe_suggestions(const std::string& name,
                                                   const std::vector<std::string>& names) {
  std::string near = str_nearest(name, names);
  if (!near.empty()) return {near};
  std::vector<std::string> out;
  if (name.empty()) return out;
  for (const auto& n : names)
    for (const auto& part : str_split(n, '_'))
      if (part == name && out.size() < 4) {
        out.push_back(n);
        break;
      }
  return out;
}

std::string recipe_resolve(const std::string& name) {
  if (file_exists(name)) return name;
  if (name.find('/') == std::string::npos) {
    std::string dir = luatune_home() + "/recipes/";
    std::string base = str_ends_with(name, ".lua") ? name : name + ".lua";
    if (file_exists(dir + base)) return dir + base;
  }
  auto names = recipe_names();
  std::vector<std::string> near = recipe_suggestions(name, names);
  std::string guess;
  for (size_t i = 0; i < near.size(); i++)
    guess += std::string(i == 0 ? "" : i + 1 == near.size() ? " or " : ", ") + "'" + near[i] + "'";
  fail_usage("runner: no recipe '" + name + "': not a file, and not a shipped recipe" +
                 (guess.empty() ? "" : " (did you mean " + guess + "?)"),
             "shipped recipes: " + (names.empty() ? std::string("none found") : str_join(names, ", ")) +
                 " (runner ls describes them)");
}

std::string recipe_description(const std::string& path) {
  RecipeDocs d = recipe_docs_read(path);
  if (!d.first_sentence.empty()) return d.first_sentence;
  if (!d.prose.empty()) return d.prose;
  return "(no description: a recipe should start with a comment whose first sentence says what it does)";
}

std::vector<RecipeInfo> recipe_list() {
  std::vector<RecipeInfo> out;
  std::string dir = luatune_home() + "/recipes";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string file = e->d_name;
    if (!str_ends_with(file, ".lua") || file[0] == '.') continue;
    RecipeInfo r;
    r.name = file.substr(0, file.size() - 4);
    r.path = dir + "/" + file;
    r.description = recipe_description(r.path);
    out.push_back(std::move(r));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const RecipeInfo& a, const RecipeInfo& b) { return a.name < b.name; });
  return out;
}

std::string recipe_copy(const std::string& name, const std::string& dest) {
  std::string src = recipe_resolve(name);
  std::string target = dir_exists(dest) ? dest + "/" + path_basename(src) : dest;
  if (file_exists(target) || dir_exists(target))
    fail_usage("runner cp: '" + target + "' already exists; not overwriting it",
               "pick another DEST or remove it first");
  file_write_atomic(target, file_read(src));
  return target;
}

}  // namespace luatune
