// A recipe's self-description (leading comment, per-key docs) and the config checks `validate` and
// every run apply before loading anything; and the shipped recipes keep to both.
#include <gtest/gtest.h>

#include <cstdlib>

#include "host/cli/config.h"
#include "host/cli/config_checks.h"
#include "host/cli/recipe_docs.h"
#include "host/cli/recipes.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/strings.h"
#include "host/data/dataset.h"

using namespace luatune;

namespace {

const char* kRecipe = R"(-- recipes/demo.lua: LoRA fine-tuning of a chat model (e.g. Llama 3.1) on JSONL;
-- writes a PEFT adapter. More words here.
-- runner demo base_model=DIR data=FILE
local cfg = config {
  base_model = "models/x",  -- model to tune: a local directory or org/name
  lora = {                  -- the adapters
    r = 16,                 -- rank
    targets = { "q_proj",   -- ignored: the value ends on a later line
                "v_proj" }, -- modules that get adapters
    note = "a -- b",        -- a string holding "--" is not a comment
  },
  learning_rate = 2e-4, max_steps = 10,  -- two keys on one line
  eps = 1e-8,
  steps_expr = 3 * (2 + 1),  -- an expression; "--" inside [[ -- ]] strings too: [[x -- y]]
  long = [[
text -- not a doc
]],  -- the long string's doc
}
print(cfg.learning_rate) -- not in the table
)";

}  // namespace

TEST(RecipeDocs, LeadingCommentGivesTheFirstSentenceAndUsage) {
  RecipeDocs d = recipe_docs_parse(kRecipe, "demo.lua");
  EXPECT_EQ(d.first_sentence,
            "LoRA fine-tuning of a chat model (e.g. Llama 3.1) on JSONL; writes a PEFT adapter.");
  ASSERT_EQ(d.usage.size(), 1u);
  EXPECT_EQ(d.usage[0], "runner demo base_model=DIR data=FILE");
  EXPECT_TRUE(d.has_config);
  EXPECT_EQ(d.config_line, 4);
}

TEST(RecipeDocs, EveryKeyGetsItsTrailingComment) {
  RecipeDocs d = recipe_docs_parse(kRecipe, "demo.lua");
  EXPECT_EQ(recipe_key_doc(d, "base_model"), "model to tune: a local directory or org/name");
  EXPECT_EQ(recipe_key_doc(d, "lora"), "the adapters");
  EXPECT_EQ(recipe_key_doc(d, "lora.r"), "rank");
  EXPECT_EQ(recipe_key_doc(d, "lora.targets"), "modules that get adapters");
  EXPECT_EQ(recipe_key_doc(d, "lora.note"), "a string holding \"--\" is not a comment");
  EXPECT_EQ(recipe_key_doc(d, "eps"), "");
  EXPECT_EQ(recipe_key_doc(d, "steps_expr"), "an expression; \"--\" inside [[ -- ]] strings too: [[x -- y]]");
  EXPECT_EQ(recipe_key_doc(d, "long"), "the long string's doc");
  std::vector<std::string> keys;
  for (const auto& k : d.keys) keys.push_back(k.key);
  EXPECT_EQ(str_join(keys, ","),
            "base_model,lora,lora.r,lora.targets,lora.note,learning_rate,max_steps,eps,steps_expr,long");
  // The second key on a shared line is a problem (it cannot have its own doc).
  ASSERT_EQ(d.problems.size(), 1u);
  EXPECT_NE(d.problems[0].find("'max_steps' shares its line with 'learning_rate'"), std::string::npos);
}

TEST(RecipeDocs, NoConfigAndNoSentence) {
  RecipeDocs d = recipe_docs_parse("-- a script with no end\nprint(1)\n", "x.lua");
  EXPECT_FALSE(d.has_config);
  EXPECT_EQ(d.first_sentence, "");
  EXPECT_EQ(d.prose, "a script with no end");
  // `x.config {` and `config = {` are not the config call.
  d = recipe_docs_parse("local t = {}\nt.config { a = 1 }\nlocal config = { b = 2 }\n", "y.lua");
  EXPECT_FALSE(d.has_config);
}

TEST(RecipeDocs, WrapKeepsWordsWithinTheWidth) {
  std::string w = text_wrap("aaa bbb ccc ddd eee fff ggg hhh iii jjj", 30, 4);
  for (const auto& line : str_split(w, '\n')) EXPECT_LE(line.size(), 30u - 4u + 4u) << w;
  EXPECT_NE(w.find("\n    "), std::string::npos) << w;
  EXPECT_EQ(str_join(str_split(w, '\n'), ""), "aaa bbb ccc ddd eee fff    ggg hhh iii jjj");
}

TEST(RecipeDocs, HelpListsEveryResolvedLeafWithTypeDefaultAndDoc) {
  RecipeDocs d = recipe_docs_parse(kRecipe, "demo.lua");
  ConfigValue cfg;
  cfg.fields["base_model"] = ConfigValue::of_string("models/x");
  cfg.fields["eps"] = ConfigValue::of_number(1e-8);
  ConfigValue lora;
  lora.fields["r"] = ConfigValue::of_number(16);
  cfg.fields["lora"] = lora;
  std::string text = recipe_help_text("demo", d, &cfg, 100);
  EXPECT_NE(text.find("base_model  (string) = \"models/x\"\n      model to tune"), std::string::npos) << text;
  EXPECT_NE(text.find("lora.r  (number) = 16\n      rank"), std::string::npos) << text;
  EXPECT_NE(text.find("eps  (number) = 1e-08\n      (no doc)"), std::string::npos) << text;
  EXPECT_LT(text.find("base_model  ("), text.find("lora.r  ("));  // source order
}

// A recipe that takes a shared set: config(keys.training { ... }) names the set; the module's
// `M.NAME = set(M.INCLUDED, { ... })` tables give the set's keys and docs, the included set's first.
TEST(RecipeDocs, SharedSetKeysComeFromTheModuleTheRecipeRequires) {
  const char* recipe = R"(-- recipes/demo.lua: a demo. More.
local keys = require("run_keys")  -- the shared keys
local cfg = config(keys.training {  -- + the shared keys
  base_model = "models/x",  -- model to tune
  batch_size = 8,           -- pairs a step here
  seed = 1,
})
)";
  const char* module = R"(local M = {}
M.compute = set(nil, {
  seed = 0,          -- seeds the data order
  shard = "none",    -- ZeRO stage
})
M.training = set(M.compute, {
  batch_size = 4,    -- rows a step
  shard = "none",    -- ZeRO stage, as training runs it
})
return M
)";
  RecipeDocs d = recipe_docs_parse(recipe, "demo.lua");
  EXPECT_TRUE(d.has_config);
  EXPECT_EQ(d.config_line, 3);
  EXPECT_EQ(d.include_module, "run_keys");
  EXPECT_EQ(d.include_set, "training");
  recipe_docs_include(d, module, "scripts/lua/run_keys.lua");
  EXPECT_TRUE(d.problems.empty()) << str_join(d.problems, "; ");
  std::vector<std::string> own, shared;
  for (const auto& k : d.keys) own.push_back(k.key);
  for (const auto& k : d.shared) shared.push_back(k.key + "=" + k.doc);
  EXPECT_EQ(str_join(own, ","), "base_model,batch_size,seed");
  EXPECT_EQ(str_join(shared, ","),
            "seed=seeds the data order,shard=ZeRO stage, as training runs it,batch_size=rows a step");
  EXPECT_EQ(recipe_key_doc(d, "batch_size"), "pairs a step here");  // the recipe's own doc wins
  EXPECT_EQ(recipe_key_doc(d, "seed"), "seeds the data order");     // an undocumented override: the set's

  ConfigValue cfg;
  cfg.fields["base_model"] = ConfigValue::of_string("models/x");
  cfg.fields["batch_size"] = ConfigValue::of_number(8);
  cfg.fields["seed"] = ConfigValue::of_number(1);
  cfg.fields["shard"] = ConfigValue::of_string("none");
  std::string text = recipe_help_text("demo", d, &cfg, 100);
  size_t heading = text.find("\nshared keys (set 'training' of scripts/lua/run_keys.lua");
  ASSERT_NE(heading, std::string::npos) << text;
  EXPECT_LT(text.find("batch_size  (number) = 8\n      pairs a step here"), heading) << text;
  EXPECT_LT(text.find("seed  (number) = 1\n      seeds the data order"), heading) << text;
  EXPECT_GT(text.find("shard  (string) = \"none\"\n      ZeRO stage, as training runs it"), heading) << text;

  RecipeDocs missing = recipe_docs_parse(recipe, "demo.lua");
  missing.include_set = "nope";
  recipe_docs_include(missing, module, "scripts/lua/run_keys.lua");
  ASSERT_EQ(missing.problems.size(), 1u);
  EXPECT_NE(missing.problems[0].find("no set 'nope'"), std::string::npos) << missing.problems[0];
  RecipeDocs no_require = recipe_docs_parse("local cfg = config(keys.training { a = 1 })\n", "x.lua");
  ASSERT_EQ(no_require.problems.size(), 1u);
  EXPECT_NE(no_require.problems[0].find("no `local keys = require"), std::string::npos)
      << no_require.problems[0];
}

// ---------------------------------------------------------------------------------------------
// Config checks

TEST(ConfigChecks, PathsAndRangesAreAllReported) {
  ConfigValue cfg;
  cfg.fields["base_model"] = ConfigValue::of_string("/nope/model");
  cfg.fields["data"] = ConfigValue::of_string("/nope/data.jsonl");
  cfg.fields["output_dir"] = ConfigValue::of_string("/nope/out");  // an output: not checked
  cfg.fields["max_steps"] = ConfigValue::of_number(0);
  cfg.fields["learning_rate"] = ConfigValue::of_number(std::nan(""));
  cfg.fields["batch_size"] = ConfigValue::of_number(2.5);
  ConfigValue lora;
  lora.fields["dropout"] = ConfigValue::of_number(1.0);
  lora.fields["r"] = ConfigValue::of_number(8);
  cfg.fields["lora"] = lora;
  cfg.fields["data"].origin = "command line";
  auto problems = config_problems(cfg);
  std::string all = str_join(problems, "\n");
  EXPECT_EQ(problems.size(), 6u) << all;
  EXPECT_NE(all.find("base_model = \"/nope/model\" (recipe default)"), std::string::npos) << all;
  EXPECT_NE(all.find("data = \"/nope/data.jsonl\" (command line): no such file"), std::string::npos) << all;
  EXPECT_NE(all.find("max_steps = 0 (recipe default): expected a whole number >= 1"), std::string::npos)
      << all;
  EXPECT_NE(all.find("learning_rate = "), std::string::npos) << all;
  EXPECT_NE(all.find("batch_size = 2.5"), std::string::npos) << all;
  EXPECT_NE(all.find("lora.dropout = 1 (recipe default): expected in [0, 1)"), std::string::npos) << all;
  EXPECT_EQ(all.find("output_dir"), std::string::npos) << all;
  EXPECT_EQ(all.find("lora.r"), std::string::npos) << all;

  ConfigCheckOptions no_paths;
  no_paths.paths = false;
  EXPECT_EQ(config_problems(cfg, no_paths).size(), 4u);
  cfg.fields["num_train_epochs"] = ConfigValue::of_number(2);  // max_steps = 0 then means "the epochs"
  EXPECT_EQ(config_problems(cfg, no_paths).size(), 3u);
  ConfigValue stage;  // a stage's max_steps = 0 skips the stage; a negative one is still wrong
  stage.fields["max_steps"] = ConfigValue::of_number(0);
  cfg.fields["distill"] = stage;
  EXPECT_EQ(config_problems(cfg, no_paths).size(), 3u);
  cfg.fields["distill"].fields["max_steps"] = ConfigValue::of_number(-1);
  EXPECT_EQ(config_problems(cfg, no_paths).size(), 4u);
}

TEST(ConfigChecks, ExistingPathsAndSaneValuesPass) {
  ConfigValue cfg;
  std::string here = std::string(LUATUNE_SOURCE_DIR);
  cfg.fields["data"] = ConfigValue::of_string(here + "/CMakeLists.txt");
  cfg.fields["adapter"] = ConfigValue::of_string("");  // "" = not given
  cfg.fields["learning_rate"] = ConfigValue::of_number(2e-4);
  cfg.fields["warmup_ratio"] = ConfigValue::of_number(0.1);
  cfg.fields["eval_steps"] = ConfigValue::of_number(0);
  EXPECT_TRUE(config_problems(cfg).empty()) << str_join(config_problems(cfg), "\n");
}

TEST(ConfigChecks, RenamedKeysNameTheirNewName) {
  ConfigValue cfg;
  cfg.fields["learning_rate"] = ConfigValue::of_number(2e-4);
  cfg.fields["max_steps"] = ConfigValue::of_number(10);
  for (auto [old_name, new_name] :
       {std::pair<const char*, const char*>{"lr", "learning_rate"}, {"steps", "max_steps"}}) {
    try {
      config_apply(cfg, {config_parse_override(std::string(old_name) + "=1")});
      FAIL() << "an old key name applied";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("it is now '") + new_name + "'"), std::string::npos)
          << e.what();
    }
  }
}

// warmup_steps past max_steps warns (validate and every run start), in any table; equal does not.
TEST(ConfigChecks, WarmupPastMaxStepsWarns) {
  ConfigValue cfg;
  cfg.fields["warmup_steps"] = ConfigValue::of_number(20);
  cfg.fields["max_steps"] = ConfigValue::of_number(5);
  cfg.fields["max_steps"].origin = "command line";
  ConfigReport r = config_check(cfg);
  EXPECT_TRUE(r.problems.empty());
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(
      r.warnings[0],
      "config: warmup_steps = 20 (recipe default) is more than max_steps = 5 (command line): the learning "
      "rate is still warming up when the run ends and never reaches its peak; hint: warmup_steps = 5 or "
      "less");
  cfg.fields["warmup_steps"] = ConfigValue::of_number(5);  // the peak at the last step
  EXPECT_TRUE(config_check(cfg).warnings.empty());
  ConfigValue stage;
  stage.fields["warmup_steps"] = ConfigValue::of_number(100);
  stage.fields["max_steps"] = ConfigValue::of_number(50);
  cfg.fields["pretrain"] = stage;
  r = config_check(cfg);
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0].rfind("config: pretrain.warmup_steps = 100 (recipe default) is more than "
                                "pretrain.max_steps = 50 (recipe default)",
                                0),
            0u)
      << r.warnings[0];
  cfg.fields["pretrain"].fields["max_steps"] = ConfigValue::of_number(0);  // 0: skip the stage / the epochs
  EXPECT_TRUE(config_check(cfg).warnings.empty());
}

// runner validate (read_data) reads the data files: bad lines are problems with FILE:LINE, and an
// eval_fraction that holds none of data's records out is the warning the run prints.
TEST(ConfigChecks, ValidateReadsTheDataFiles) {
  const std::string dir = ::testing::TempDir() + "config_data";
  std::string good, bad;
  for (int i = 1; i <= 16; i++) {
    good += "{\"text\": \"record " + std::to_string(i) + "\"}\n";
    bad += i == 8 ? "not json\n" : "{\"text\": \"record\"}\n";
  }
  file_write_atomic(dir + "_good.jsonl", good);
  file_write_atomic(dir + "_bad.jsonl", bad);
  ConfigValue cfg;
  cfg.fields["data"] = ConfigValue::of_string(dir + "_bad.jsonl");
  cfg.fields["data"].origin = "command line";
  cfg.fields["eval_fraction"] = ConfigValue::of_number(0.02);
  ConfigCheckOptions validate;
  validate.read_data = true;
  EXPECT_TRUE(config_check(cfg).problems.empty());  // a run's start does not read the data
  ConfigReport r = config_check(cfg, validate);
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_EQ(r.problems[0],
            "data = \"" + dir + "_bad.jsonl\" (command line): " + dir +
                "_bad.jsonl:8: expected a JSON object, got 'not json' (not valid JSON at column 2: "
                "syntax error while parsing value - invalid literal; last read: 'no')");
  EXPECT_TRUE(r.warnings.empty());  // no split counted from a file with bad lines

  cfg.fields["data"].string = dir + "_good.jsonl";
  r = config_check(cfg, validate);
  EXPECT_TRUE(r.problems.empty()) << r.problems[0];
  EXPECT_EQ(r.warnings, std::vector<std::string>{data_eval_split_warning(16, 0.02)});
  cfg.fields["eval_fraction"].number = 0.1;  // holds out 2
  EXPECT_TRUE(config_check(cfg, validate).warnings.empty());

  // Preference recipes (eval_data): pairs, and no split of data when eval_data is given.
  cfg.fields["eval_fraction"].number = 0.02;
  cfg.fields["eval_data"] = ConfigValue::of_string("");
  r = config_check(cfg, validate);
  ASSERT_EQ(r.problems.size(), 4u);  // 3 listed, then the count of the rest
  EXPECT_NE(r.problems[0].find("_good.jsonl:1: expected a JSON object with \"chosen\" and \"rejected\""),
            std::string::npos)
      << r.problems[0];
  EXPECT_EQ(r.problems.back(), "data = \"" + dir +
                                   "_good.jsonl\" (command line): 13 more bad lines after these "
                                   "(16 of its 16 records)");
  std::string pairs;
  for (int i = 1; i <= 16; i++) pairs += "{\"prompt\": \"q\", \"chosen\": \"a\", \"rejected\": \"b\"}\n";
  file_write_atomic(dir + "_pairs.jsonl", pairs);
  cfg.fields["data"].string = dir + "_pairs.jsonl";
  r = config_check(cfg, validate);
  EXPECT_TRUE(r.problems.empty()) << r.problems[0];
  EXPECT_EQ(r.warnings, std::vector<std::string>{data_eval_split_warning(16, 0.02, "pairs")});
  cfg.fields["eval_data"].string = dir + "_pairs.jsonl";  // the held-out pairs come from there
  r = config_check(cfg, validate);
  EXPECT_TRUE(r.problems.empty() && r.warnings.empty());
}

// ---------------------------------------------------------------------------------------------
// The shipped recipes keep to the form: every key documented, a first sentence `runner ls` shows whole.

TEST(RecipeDocs, ShippedRecipesDocumentEveryKey) {
  setenv("LUATUNE_HOME", LUATUNE_SOURCE_DIR, 1);
  auto recipes = recipe_list();
  ASSERT_GE(recipes.size(), 15u);
  for (const auto& r : recipes) {
    RecipeDocs d = recipe_docs_read(r.path);
    EXPECT_FALSE(d.first_sentence.empty())
        << r.path << ": the leading comment has no complete first sentence";
    EXPECT_LE(d.first_sentence.size(), 200u) << r.path << ": first sentence too long for runner ls";
    EXPECT_TRUE(d.problems.empty()) << r.path << ": " << str_join(d.problems, "; ");
    if (!d.has_config) continue;
    EXPECT_FALSE(d.keys.empty()) << r.path;
    for (const auto& k : d.keys)
      if (!k.table)
        EXPECT_FALSE(k.doc.empty()) << r.path << ":" << k.line << ": key '" << k.key << "' has no -- doc";
    for (const auto& k : d.shared)  // a set of scripts/lua/run_keys.lua: documented there
      EXPECT_FALSE(k.doc.empty()) << r.path << ": shared key '" << k.key << "' has no -- doc";
    if (!d.include_set.empty()) EXPECT_FALSE(d.shared.empty()) << r.path << ": set '" << d.include_set << "'";
  }
}
