// What a recipe says about itself, read from its source without running it: the leading comment
// block (its first sentence is what `runner ls` shows) and the `-- doc` comment of every key of its
// `config { ... }` table (what `runner help RECIPE` prints next to each key's type and default).
//
// The form (docs/recipes.md): inside the config table every key starts its own line; a leaf key's
// doc is the trailing `--` comment on the line where its value ends, else on the line where the key
// starts; a table key's doc is the trailing comment on its `name = {` line. Plain values stay plain
// Lua: nothing in the runtime reads these comments.
//
// A recipe may take the keys training runs share from a set in scripts/lua:
//   local keys = require("run_keys")
//   local cfg = config(keys.training { ...the recipe's own keys... })
// The set is `M.training = set(M.compute, { ...keys with docs... })` in scripts/lua/run_keys.lua (the
// included set first); recipe_docs_read reads it, and help lists its keys the recipe does not give.
#pragma once

#include <string>
#include <vector>

namespace luatune {

struct ConfigValue;

struct RecipeKeyDoc {
  std::string key;  // dotted: "lora.r"
  std::string doc;  // "" when the key has none
  int line = 0;     // 1-based line where the key starts
  bool table = false;
};

struct RecipeDocs {
  std::string path;
  std::string prose;               // the leading comment block before its usage lines, joined
  std::string first_sentence;      // prose up to its first sentence end ("" when none ends)
  std::vector<std::string> usage;  // leading comment lines starting with "runner "
  bool has_config = false;         // found `config {` / `config({`
  int config_line = 0;
  std::vector<RecipeKeyDoc> keys;     // in source order
  std::vector<std::string> problems;  // "LINE: key 'b' shares its line with 'a'", parse trouble
  // config(keys.training { ... }) with `local keys = require("run_keys")`: "run_keys", "training".
  std::string include_module, include_set;
  std::vector<RecipeKeyDoc> shared;  // the set's keys (its included set's first), docs from the module
};

RecipeDocs recipe_docs_parse(const std::string& source, const std::string& path);
// Parses the recipe and, when it includes a set, the set's module: LUATUNE_HOME/scripts/lua/MOD.lua, else
// scripts/lua/MOD.lua beside the recipe's directory. Fails naming the path when the recipe is unreadable.
RecipeDocs recipe_docs_read(const std::string& path);

// Fills docs.shared from the source of the module docs.include_module names (a problem when the set is
// not there).
void recipe_docs_include(RecipeDocs& docs, const std::string& module_source, const std::string& module_path);

// The doc of `key` ("" when none): the recipe's own, else the shared set's; a leaf without one falls
// back to nothing, not to its table's.
std::string recipe_key_doc(const RecipeDocs& docs, const std::string& key);

// `runner help RECIPE`: the description, the usage lines and every leaf key of the resolved config
// (type, default, doc; "(no doc)" for an undocumented one): the recipe's own keys, then the shared
// set's under their own heading. `resolved` null: the recipe has no config{} (only the description).
std::string recipe_help_text(const std::string& name, const RecipeDocs& docs, const ConfigValue* resolved,
                             size_t width);

// `text` wrapped for a column that starts at `indent` on a `width`-column line: the caller prints the
// first line after its own `indent`-wide prefix; continuation lines start with `indent` spaces.
std::string text_wrap(const std::string& text, size_t width, size_t indent);

}  // namespace luatune
