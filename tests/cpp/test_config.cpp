// Config resolution: typed overrides, nested keys, lists, unknown keys with hints, file overrides.
#include <gtest/gtest.h>

#include "host/cli/config.h"
#include "host/core/error.h"
#include "tests/cpp/test_config_util.h"

using namespace luatune;

namespace {

// tests/cpp/test_config_util.h's defaults with layers = {} and steps = 1000.
ConfigValue defaults() {
  ConfigValue cfg = config_test_defaults({});
  cfg.fields["steps"] = ConfigValue::of_number(1000);
  return cfg;
}

// Applies command-line overrides; returns the UsageError message, or "" when they applied.
std::string apply(ConfigValue& cfg, std::vector<std::string> args) {
  std::vector<ConfigOverride> os;
  try {
    for (const auto& a : args) os.push_back(config_parse_override(a));
    config_apply(cfg, os);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Config, OverridesKeepTheDefaultsType) {
  ConfigValue cfg = defaults();
  ASSERT_EQ(apply(cfg, {"learning_rate=1e-3", "pack=false", "output_dir=out/x", "lora.r=8"}), "");
  EXPECT_DOUBLE_EQ(cfg.fields["learning_rate"].number, 1e-3);
  EXPECT_FALSE(cfg.fields["pack"].boolean);
  EXPECT_EQ(cfg.fields["output_dir"].string, "out/x");
  EXPECT_EQ(cfg.fields["lora"].fields["r"].number, 8);
  EXPECT_EQ(cfg.fields["lora"].fields["r"].origin, "command line");
  EXPECT_EQ(cfg.fields["steps"].origin, "");
}

TEST(Config, TypeMismatchNamesKeyTypeAndValue) {
  ConfigValue cfg = defaults();
  EXPECT_EQ(apply(cfg, {"steps=abc"}), "config: key 'steps' expects a number, got 'abc' (command line)");
  EXPECT_EQ(apply(cfg, {"pack=maybe"}),
            "config: key 'pack' expects a boolean (true/false), got 'maybe' (command line)");
}

TEST(Config, UnknownKeyNamesNearestAndValidKeys) {
  ConfigValue cfg = defaults();
  std::string msg = apply(cfg, {"lerning_rate=1"});
  EXPECT_NE(msg.find("config: unknown key 'lerning_rate' (command line); did you mean 'learning_rate'?"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("valid keys: layers, learning_rate, lora.r, lora.targets, output_dir, pack, steps"),
            std::string::npos)
      << msg;
  EXPECT_NE(apply(cfg, {"lora.alpha=3"}).find("unknown key 'lora.alpha'"), std::string::npos);
}

TEST(Config, WholeTableCannotBeReplaced) {
  ConfigValue cfg = defaults();
  std::string msg = apply(cfg, {"lora=5"});
  EXPECT_NE(msg.find("key 'lora' is a table"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lora.r, lora.targets"), std::string::npos) << msg;
}

TEST(Config, ListsParseCommaSeparatedItemsOfTheDefaultsKind) {
  ConfigValue cfg = defaults();
  ASSERT_EQ(apply(cfg, {"lora.targets=[q_proj, k_proj, o_proj]", "layers=1,2,3"}), "");
  const auto& t = cfg.fields["lora"].fields["targets"];
  ASSERT_EQ(t.items.size(), 3u);
  EXPECT_EQ(t.items[1].string, "k_proj");
  const auto& layers = cfg.fields["layers"];  // empty default: kinds inferred
  ASSERT_EQ(layers.items.size(), 3u);
  EXPECT_EQ(layers.items[2].kind, ConfigValue::Kind::number);
  EXPECT_EQ(layers.items[2].number, 3);
  ASSERT_EQ(apply(cfg, {"lora.targets="}), "");
  EXPECT_TRUE(cfg.fields["lora"].fields["targets"].items.empty());
}

TEST(Config, NumberListRejectsText) {
  ConfigValue cfg;
  cfg.fields["sizes"] = ConfigValue::of_list({ConfigValue::of_number(1)});
  std::string msg = apply(cfg, {"sizes=1,two"});
  EXPECT_NE(msg.find("key 'sizes' expects a comma-separated list of numbers"), std::string::npos) << msg;
  EXPECT_NE(msg.find("item 'two'"), std::string::npos) << msg;
}

TEST(Config, MissingEqualsIsAUsageError) {
  ConfigValue cfg = defaults();
  EXPECT_NE(apply(cfg, {"steps"}).find("expected key=value"), std::string::npos);
  EXPECT_NE(apply(cfg, {"=3"}).find("key before '=' is empty"), std::string::npos);
}

TEST(Config, FileOverridesAreTypeChecked) {
  ConfigValue cfg = defaults();
  ConfigValue file;
  file.fields["steps"] = ConfigValue::of_number(5);
  ConfigValue lora;
  lora.fields["r"] = ConfigValue::of_number(4);
  file.fields["lora"] = lora;
  auto os = config_flatten(file, "over.lua");
  ASSERT_EQ(os.size(), 2u);
  EXPECT_EQ(os[0].key, "lora.r");
  config_apply(cfg, os);
  EXPECT_EQ(cfg.fields["lora"].fields["r"].number, 4);
  EXPECT_EQ(cfg.fields["steps"].origin, "over.lua");

  ConfigValue bad;
  bad.fields["steps"] = ConfigValue::of_string("many");
  try {
    config_apply(cfg, config_flatten(bad, "bad.lua"));
    FAIL() << "a string for a number key must fail";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "config: key 'steps' expects a number, got a string \"many\" (bad.lua)");
  }
}

TEST(Config, LaterOverridesWin) {
  ConfigValue cfg = defaults();
  ASSERT_EQ(apply(cfg, {"steps=1", "steps=2"}), "");
  EXPECT_EQ(cfg.fields["steps"].number, 2);
}

TEST(Config, FormatAndJson) {
  ConfigValue cfg = defaults();
  ASSERT_EQ(apply(cfg, {"steps=5"}), "");
  std::string text = config_format(cfg);
  EXPECT_NE(text.find("  lora.targets  = {\"q_proj\", \"v_proj\"}\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  steps         = 5   [command line]\n"), std::string::npos) << text;
  EXPECT_EQ(config_to_json(cfg),
            R"({"layers":[],"learning_rate":0.0002,"lora":{"r":16,"targets":["q_proj","v_proj"]},)"
            R"("output_dir":"out/lora","pack":true,"steps":5})");
}
