// --config FILE in JSON and YAML (host/cli/config_file.h): flattening to dotted keys, the types
// each format gives its values, and the one-line errors (syntax with file:line:column, null values,
// a top level that is not a mapping, unknown extensions), applied through config_apply.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>

#include "host/cli/config_file.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "tests/cpp/test_config_util.h"

using namespace luatune;

namespace {

// tests/cpp/test_config_util.h's defaults with layers = {0}.
ConfigValue defaults() {
  return config_test_defaults({ConfigValue::of_number(0)});
}

// The UsageError's message, "(no error)", or "(not a usage error: ...)" for any other Error.
std::string usage_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    return e.what();
  } catch (const Error& e) {
    return std::string("(not a usage error: ") + e.what() + ")";
  }
  return "(no error)";
}

std::vector<std::string> keys_of(const std::vector<ConfigOverride>& os) {
  std::vector<std::string> out;
  for (const auto& o : os) out.push_back(o.key);
  return out;
}

std::string yaml_error(const std::string& text) {
  return usage_error_of([&] { config_file_parse_yaml(text, "cfg.yaml"); });
}
std::string json_error(const std::string& text) {
  return usage_error_of([&] { config_file_parse_json(text, "cfg.json"); });
}
// Parses then applies onto defaults(); the message of the failure.
std::string yaml_apply_error(const std::string& text) {
  return usage_error_of([&] {
    ConfigValue cfg = defaults();
    config_apply(cfg, config_file_parse_yaml(text, "cfg.yaml"));
  });
}

}  // namespace

// ============================================================================================
// JSON

TEST(ConfigFile, JsonFlattensNestedObjectsToDottedKeysInFileOrder) {
  auto os = config_file_parse_json(
      R"({"output_dir": "out/x", "lora": {"targets": ["q_proj", "k_proj"], "r": 8}, "pack": false})",
      "cfg.json");
  EXPECT_EQ(keys_of(os), (std::vector<std::string>{"output_dir", "lora.targets", "lora.r", "pack"}));
  for (const auto& o : os) {
    EXPECT_EQ(o.source, "cfg.json");
    ASSERT_TRUE(o.value.has_value()) << o.key;  // JSON values are typed, never text
  }
  EXPECT_EQ(os[0].value->kind, ConfigValue::Kind::string);
  EXPECT_EQ(os[1].value->kind, ConfigValue::Kind::list);
  EXPECT_EQ(os[2].value->kind, ConfigValue::Kind::number);
  EXPECT_EQ(os[3].value->kind, ConfigValue::Kind::boolean);

  ConfigValue cfg = defaults();
  config_apply(cfg, os);
  EXPECT_EQ(cfg.fields["output_dir"].string, "out/x");
  EXPECT_EQ(cfg.fields["lora"].fields["r"].number, 8);
  EXPECT_EQ(config_value_str(cfg.fields["lora"].fields["targets"]), R"({"q_proj", "k_proj"})");
  EXPECT_FALSE(cfg.fields["pack"].boolean);
  EXPECT_EQ(cfg.fields["lora"].fields["r"].origin, "cfg.json");
  EXPECT_EQ(cfg.fields["learning_rate"].origin, "");
  EXPECT_NE(config_format(cfg).find("lora.r        = 8   [cfg.json]"), std::string::npos)
      << config_format(cfg);
}

TEST(ConfigFile, JsonTypesAreCheckedAgainstTheDefaults) {
  auto apply = [](const std::string& text) {
    return usage_error_of([&] {
      ConfigValue cfg = defaults();
      config_apply(cfg, config_file_parse_json(text, "cfg.json"));
    });
  };
  EXPECT_EQ(apply(R"({"lora": {"r": "8"}})"),
            R"(config: key 'lora.r' expects a number, got a string "8" (cfg.json))");
  EXPECT_EQ(apply(R"({"pack": 1})"),
            "config: key 'pack' expects a boolean (true/false), got a number 1 (cfg.json)");
  EXPECT_EQ(
      apply(R"({"layers": [1, "2"]})"),
      R"(config: key 'layers' expects a list of numbers, got a list holding the string "2" (cfg.json))");
  EXPECT_EQ(apply(R"({"lora": 5})"),
            "config: key 'lora' is a table and cannot be replaced whole (cfg.json); set its fields: lora.r, "
            "lora.targets");
  EXPECT_EQ(apply(R"({"lora": {}})"), "(no error)");  // an empty object sets nothing
}

TEST(ConfigFile, JsonErrorsAreOneLineNamingTheFile) {
  EXPECT_EQ(
      json_error(R"(["lr", 1])"),
      R"(config: cfg.json: the top level must be an object of overrides ({"key": value, ...}), got an array)");
  EXPECT_EQ(
      json_error("3"),
      R"(config: cfg.json: the top level must be an object of overrides ({"key": value, ...}), got a number)");
  EXPECT_EQ(json_error(R"({"lora": {"r": null}})"),
            "config: cfg.json: key 'lora.r' is null; give it a value or leave the key out");
  EXPECT_EQ(json_error(R"({"layers": [1, null]})"),
            "config: cfg.json: key 'layers[2]' is null; give it a value or leave the key out");
  EXPECT_EQ(json_error(R"({"lora": {"r": 8}, "lora.r": 4})"),
            "config: cfg.json: key 'lora.r' is set twice in this file; keep one");
  // Line and column of the byte the parser stopped at: the '}' after a trailing comma.
  std::string msg = json_error("{\n  \"pack\": true,\n}\n");
  EXPECT_EQ(msg.rfind("config: cfg.json:3:1: not valid JSON: syntax error while parsing object key", 0), 0u)
      << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  msg = json_error("{\"a\": tru}");
  EXPECT_EQ(msg.rfind("config: cfg.json:1:10: not valid JSON: ", 0), 0u) << msg;
  EXPECT_NE(json_error(std::string(200, '[') + std::string(200, ']'))
                .find("cfg.json:1: JSON nested deeper than 128"),
            std::string::npos);
}

// ============================================================================================
// YAML

TEST(ConfigFile, YamlScalarsAreTextParsedLikeTheCommandLine) {
  const std::string text =
      "learning_rate: 1e-3\n"
      "pack: no\n"
      "lora:\n"
      "  r: 8\n"
      "  targets: q_proj,k_proj   # a comma-separated string, as on the command line\n"
      "output_dir: out/y\n";
  auto os = config_file_parse_yaml(text, "cfg.yaml");
  EXPECT_EQ(keys_of(os),
            (std::vector<std::string>{"learning_rate", "pack", "lora.r", "lora.targets", "output_dir"}));
  for (const auto& o : os) {
    EXPECT_FALSE(o.value.has_value()) << o.key;
    EXPECT_EQ(o.source, "cfg.yaml");
  }
  EXPECT_EQ(os[0].text, "1e-3");
  ConfigValue cfg = defaults();
  config_apply(cfg, os);
  EXPECT_DOUBLE_EQ(cfg.fields["learning_rate"].number, 1e-3);
  EXPECT_FALSE(cfg.fields["pack"].boolean);
  EXPECT_EQ(cfg.fields["lora"].fields["r"].number, 8);
  EXPECT_EQ(config_value_str(cfg.fields["lora"].fields["targets"]), R"({"q_proj", "k_proj"})");
  EXPECT_EQ(cfg.fields["output_dir"].string, "out/y");
  EXPECT_EQ(cfg.fields["output_dir"].origin, "cfg.yaml");
}

TEST(ConfigFile, YamlSequencesAreListsInEitherStyle) {
  auto os =
      config_file_parse_yaml("lora:\n  targets:\n    - q_proj\n    - o_proj\nlayers: [3, 5]\n", "cfg.yaml");
  ASSERT_EQ(os.size(), 2u);
  ASSERT_TRUE(os[0].value && os[1].value);
  ConfigValue cfg = defaults();
  config_apply(cfg, os);
  EXPECT_EQ(config_value_str(cfg.fields["lora"].fields["targets"]), R"({"q_proj", "o_proj"})");
  EXPECT_EQ(config_value_str(cfg.fields["layers"]), "{3, 5}");
  // Items are typed as the command line types an empty list's items; quoting makes a string.
  EXPECT_EQ(
      yaml_apply_error("layers: [1, '2']\n"),
      R"(config: key 'layers' expects a list of numbers, got a list holding the string "2" (cfg.yaml))");
  EXPECT_EQ(yaml_apply_error("layers: []\n"), "(no error)");
}

TEST(ConfigFile, YamlTypeErrorsNameKeyAndFile) {
  EXPECT_EQ(yaml_apply_error("lora:\n  r: eight\n"),
            "config: key 'lora.r' expects a number, got 'eight' (cfg.yaml)");
  // Quoted, "8" is a string, and a string is not a number: the command line's lora.r='"8"' fails too.
  EXPECT_EQ(yaml_apply_error("lora:\n  r: \"8\"\n"),
            R"(config: key 'lora.r' expects a number, got a string "8" (cfg.yaml))");
  EXPECT_EQ(yaml_apply_error("pack: 'true'\n"),
            R"(config: key 'pack' expects a boolean (true/false), got a string "true" (cfg.yaml))");
  EXPECT_EQ(yaml_apply_error("output_dir: '8'\n"), "(no error)");  // a quoted string for a string
  EXPECT_EQ(yaml_apply_error("lora: 5\n"),
            "config: key 'lora' is a table and cannot be replaced whole (cfg.yaml); set its fields: lora.r, "
            "lora.targets");
  EXPECT_NE(yaml_apply_error("lora:\n  rank: 8\n").find("config: unknown key 'lora.rank' (cfg.yaml)"),
            std::string::npos);
}

TEST(ConfigFile, YamlNullsNameTheKey) {
  EXPECT_EQ(yaml_error("pack: true\nlora:\n  r:\n"),
            "config: cfg.yaml:3:3: key 'lora.r' has no value (null); give it one or leave the key out");
  EXPECT_EQ(yaml_error("lora:\n  r: ~\n"),
            "config: cfg.yaml:2:3: key 'lora.r' has no value (null); give it one or leave the key out");
  EXPECT_EQ(yaml_error("output_dir: null\n"),
            "config: cfg.yaml:1:1: key 'output_dir' has no value (null); give it one or leave the key out");
  std::string msg = yaml_error("layers: [1, ~]\n");
  EXPECT_NE(msg.find("key 'layers[2]' has no value (null)"), std::string::npos) << msg;
  EXPECT_EQ(yaml_error("output_dir: 'null'\n"), "(no error)");  // quoted: the string "null"
}

TEST(ConfigFile, YamlTopLevelMustBeAMapping) {
  const std::string head =
      "config: cfg.yaml: the top level must be a mapping of overrides (key: value), got ";
  EXPECT_EQ(yaml_error("- lr\n- 1\n"), head + "a sequence (list)");
  EXPECT_EQ(yaml_error("learning_rate=1e-3\n"), head + "the scalar 'learning_rate=1e-3'");
  EXPECT_EQ(yaml_error(""), head + "an empty file");
  EXPECT_EQ(yaml_error("# only a comment\n"), head + "an empty file");
  EXPECT_EQ(yaml_error("pack: true\n---\npack: false\n"),
            "config: cfg.yaml: holds 2 YAML documents (separated by ---); put the overrides in one");
}

TEST(ConfigFile, YamlSyntaxErrorsCarryLineAndColumn) {
  std::string msg = yaml_error("pack: true\nlora:\n  r: [8, 16\n");
  EXPECT_EQ(msg.rfind("config: cfg.yaml:", 0), 0u) << msg;
  EXPECT_NE(msg.find(": not valid YAML: "), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  msg = yaml_error("pack: true\n  lora: 1\n");  // bad indentation on line 2
  EXPECT_EQ(msg.rfind("config: cfg.yaml:2:", 0), 0u) << msg;
  EXPECT_EQ(yaml_error("lora:\n  r: 8\nlora.r: 4\n"),
            "config: cfg.yaml:3:1: key 'lora.r' is set twice in this file; keep one");
  EXPECT_EQ(yaml_error("pack: true\npack: false\n"),
            "config: cfg.yaml:2:1: key 'pack' is set twice in this file; keep one");
  EXPECT_NE(yaml_error(std::string(300, '[') + std::string(300, ']')).find("cfg.yaml"), std::string::npos);
}

// ============================================================================================
// Files

TEST(ConfigFile, FormatComesFromTheExtension) {
  EXPECT_EQ(config_file_format("a/b.lua"), ConfigFileFormat::lua);
  EXPECT_EQ(config_file_format("b.json"), ConfigFileFormat::json);
  EXPECT_EQ(config_file_format("b.yaml"), ConfigFileFormat::yaml);
  EXPECT_EQ(config_file_format("B.YML"), ConfigFileFormat::yaml);
  EXPECT_EQ(usage_error_of([] { config_file_format("x.toml"); }),
            "config: --config x.toml: unknown format; the file must end in .lua, .json, or .yaml/.yml");
  EXPECT_EQ(usage_error_of([] { config_file_format("yaml"); }),
            "config: --config yaml: unknown format; the file must end in .lua, .json, or .yaml/.yml");
}

TEST(ConfigFile, ReadsFilesAndNamesAMissingOne) {
  std::string dir =
      std::filesystem::temp_directory_path().string() + "/lt_config_file_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  file_write_atomic(dir + "/o.yml", "lora: {r: 4}\n");
  file_write_atomic(dir + "/o.json", R"({"lora": {"r": 2}})");
  auto y = config_file_read(dir + "/o.yml");
  auto j = config_file_read(dir + "/o.json");
  ASSERT_EQ(y.size(), 1u);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(y[0].source, dir + "/o.yml");
  EXPECT_EQ(j[0].source, dir + "/o.json");
  ConfigValue cfg = defaults();
  config_apply(cfg, y);
  config_apply(cfg, j);  // files apply in order: the later one wins
  EXPECT_EQ(cfg.fields["lora"].fields["r"].number, 2);
  EXPECT_EQ(cfg.fields["lora"].fields["r"].origin, dir + "/o.json");
  std::string msg = usage_error_of([&] { config_file_read(dir + "/missing.yaml"); });
  EXPECT_EQ(msg.rfind("config: --config: cannot read '" + dir + "/missing.yaml': ", 0), 0u) << msg;
  std::filesystem::remove_all(dir);
}
