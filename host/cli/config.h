// Recipe configuration without Lua: a recipe's defaults as a tree of typed values, overrides from
// the command line ("lr=2e-4", "lora.r=8", "targets=q_proj,v_proj") or from a Lua file of overrides,
// applied with type checks against the default. Every failure is a UsageError (exit status 2) whose
// message names the key, what was expected and where the bad value came from.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace luatune {

struct ConfigValue {
  enum class Kind { number, boolean, string, list, table };
  Kind kind = Kind::table;
  double number = 0;
  bool boolean = false;
  std::string string;
  std::vector<ConfigValue> items;             // list: items in order
  std::map<std::string, ConfigValue> fields;  // table: fields sorted by name
  std::string origin;                         // "" for a default, else where the override came from

  static ConfigValue of_number(double v);
  static ConfigValue of_boolean(bool v);
  static ConfigValue of_string(std::string v);
  static ConfigValue of_list(std::vector<ConfigValue> items);
  static ConfigValue of_table();
};

// One override: a dotted key and either command-line text (parsed against the default's type) or
// an already-typed value from a file of overrides.
struct ConfigOverride {
  std::string key;
  std::string text;
  std::optional<ConfigValue> value;
  std::string source;  // "command line" or the file's path, quoted in errors
};

const char* config_kind_name(ConfigValue::Kind kind);

// "key=value" -> override; fails (UsageError) when there is no '=' or the key is empty.
ConfigOverride config_parse_override(const std::string& arg, const std::string& source = "command line");
// A file's table of overrides, flattened to one override per leaf ("lora.r").
std::vector<ConfigOverride> config_flatten(const ConfigValue& table, const std::string& source);
// Applies overrides in order onto `cfg` (the defaults). Unknown keys, type mismatches and
// overrides that would replace a whole table fail with a UsageError.
void config_apply(ConfigValue& cfg, const std::vector<ConfigOverride>& overrides);

// Dotted paths of every leaf (non-table value), sorted: "batch_size", "lora.alpha", ...
std::vector<std::string> config_leaf_keys(const ConfigValue& cfg);
// A value as Lua source: 0.0002, true, "text", {"a", "b"}.
std::string config_value_str(const ConfigValue& v);
// The resolved config, one "key = value" line per leaf, overridden ones marked with their source.
std::string config_format(const ConfigValue& cfg);
// The resolved config as JSON (nested objects), for metric sinks.
std::string config_to_json(const ConfigValue& cfg);
// The same as a JSON value (keys in name order; NaN and infinities as null).
nlohmann::ordered_json config_to_json_value(const ConfigValue& cfg);

}  // namespace luatune
