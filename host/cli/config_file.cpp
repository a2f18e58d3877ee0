// Files of overrides in JSON and YAML (see config_file.h). Both walk the parsed document once,
// in file order, emitting one ConfigOverride per leaf; config_apply then type-checks them against
// the recipe's defaults like any other override.
#include "host/cli/config_file.h"

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <set>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/core/strings.h"

namespace luatune {

namespace {

// Nesting allowed in a file of overrides: the JSON limit (docs/limits.md), for both formats.
constexpr int kMaxDepth = kJsonMaxDepth;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string join_key(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// The overrides of one file, with the check that no dotted key is set twice (a YAML mapping with a
// repeated key, or "lora: {r: 8}" beside "lora.r: 4"): which one wins would be an accident of order.
struct Collector {
  std::string path;
  std::vector<ConfigOverride> out;
  std::set<std::string> seen;

  void add(ConfigOverride o, const std::string& where) {
    if (!seen.insert(o.key).second)
      fail_usage("config: " + where + ": key '" + o.key + "' is set twice in this file; keep one");
    o.source = path;
    out.push_back(std::move(o));
  }
};

[[noreturn]] void fail_too_deep(const std::string& where, const std::string& key) {
  fail_usage("config: " + where + ": '" + key.substr(0, 60) + (key.size() > 60 ? "..." : "") +
             "' nests deeper than " + std::to_string(kMaxDepth) +
             " levels (luatune's limit; see docs/limits.md)");
}

// ============================================================================================
// JSON

const char* json_type_phrase(const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::array:
      return "an array";
    case nlohmann::ordered_json::value_t::string:
      return "a string";
    case nlohmann::ordered_json::value_t::boolean:
      return "a boolean";
    case nlohmann::ordered_json::value_t::null:
      return "null";
    default:
      return "a number";
  }
}

ConfigValue json_value(const nlohmann::ordered_json& v, const std::string& path, const std::string& key,
                       int depth) {
  if (depth > kMaxDepth) fail_too_deep(path, key);
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::boolean:
      return ConfigValue::of_boolean(v.get<bool>());
    case nlohmann::ordered_json::value_t::string:
      return ConfigValue::of_string(v.get<std::string>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
    case nlohmann::ordered_json::value_t::number_float:
      return ConfigValue::of_number(v.get<double>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<ConfigValue> items;
      for (size_t i = 0; i < v.size(); i++)
        items.push_back(json_value(v[i], path, key + "[" + std::to_string(i + 1) + "]", depth + 1));
      return ConfigValue::of_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ConfigValue t = ConfigValue::of_table();
      for (const auto& [name, f] : v.items())
        t.fields[name] = json_value(f, path, key + "." + name, depth + 1);
      return t;
    }
    default:
      fail_usage("config: " + path + ": key '" + key + "' is null; give it a value or leave the key out");
  }
}

void json_walk(const nlohmann::ordered_json& obj, const std::string& prefix, int depth, Collector& c) {
  if (depth > kMaxDepth) fail_too_deep(c.path, prefix);
  for (const auto& [name, v] : obj.items()) {
    std::string key = join_key(prefix, name);
    if (v.is_object()) {
      json_walk(v, key, depth + 1, c);
      continue;
    }
    ConfigOverride o;
    o.key = key;
    o.value = json_value(v, c.path, key, depth + 1);
    c.add(std::move(o), c.path);
  }
}

// "PATH:LINE:COLUMN" of a 1-based byte position (nlohmann's parse_error::byte: the byte it stopped at).
std::string json_position(const std::string& text, const std::string& path, size_t byte) {
  size_t at = std::min(byte > 0 ? byte - 1 : 0, text.size());
  size_t line =
      1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
  size_t line_start = text.rfind('\n', at == 0 ? 0 : at - 1);
  line_start = (line_start == std::string::npos || at == 0) ? 0 : line_start + 1;
  return path + ":" + std::to_string(line) + ":" + std::to_string(at - line_start + 1);
}

// ============================================================================================
// YAML

std::string yaml_where(const std::string& path, const YAML::Mark& m) {
  if (m.is_null()) return path;
  return path + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

// A quoted scalar ('...', "...", a block scalar) or one tagged !!str: a string, whatever it spells.
bool yaml_is_string(const YAML::Node& n) {
  return n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str";
}

// A sequence item (or a field of a mapping inside one): typed as the command line types an item
// of a list whose default is empty: a number, then true/false, else a string.
ConfigValue yaml_value(const YAML::Node& n, const std::string& path, const std::string& key,
                       const YAML::Mark& at, int depth) {
  if (depth > kMaxDepth) fail_too_deep(yaml_where(path, at), key);
  const YAML::Mark mark = n.Mark().is_null() ? at : n.Mark();
  switch (n.Type()) {
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      double num;
      if (yaml_is_string(n)) return ConfigValue::of_string(s);
      if (str_to_number(s, &num)) return ConfigValue::of_number(num);
      if (s == "true" || s == "false") return ConfigValue::of_boolean(s == "true");
      return ConfigValue::of_string(s);
    }
    case YAML::NodeType::Sequence: {
      std::vector<ConfigValue> items;
      for (size_t i = 0; i < n.size(); i++)
        items.push_back(yaml_value(n[i], path, key + "[" + std::to_string(i + 1) + "]", mark, depth + 1));
      return ConfigValue::of_list(std::move(items));
    }
    case YAML::NodeType::Map: {
      ConfigValue t = ConfigValue::of_table();
      for (auto it = n.begin(); it != n.end(); ++it) {
        if (!it->first.IsScalar())
          fail_usage("config: " + yaml_where(path, it->first.Mark()) + ": a key inside '" + key +
                     "' is not a plain name");
        const std::string name = it->first.Scalar();
        if (t.fields.count(name))
          fail_usage("config: " + yaml_where(path, it->first.Mark()) + ": key '" + key + "." + name +
                     "' is set twice in this file; keep one");
        t.fields[name] = yaml_value(it->second, path, key + "." + name, it->first.Mark(), depth + 1);
      }
      return t;
    }
    default:
      fail_usage("config: " + yaml_where(path, mark) + ": key '" + key +
                 "' has no value (null); give it one or leave the key out");
  }
}

void yaml_walk(const YAML::Node& map, const std::string& prefix, int depth, Collector& c) {
  if (depth > kMaxDepth) fail_too_deep(yaml_where(c.path, map.Mark()), prefix);
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node& k = it->first;
    const YAML::Node& v = it->second;
    const std::string where = yaml_where(c.path, k.Mark());
    if (!k.IsScalar())
      fail_usage("config: " + where + ": a key" + (prefix.empty() ? "" : " inside '" + prefix + "'") +
                 " is not a plain name");
    std::string key = join_key(prefix, k.Scalar());
    ConfigOverride o;
    o.key = key;
    switch (v.Type()) {
      case YAML::NodeType::Map:
        yaml_walk(v, key, depth + 1, c);
        continue;
      case YAML::NodeType::Sequence:
        o.value = yaml_value(v, c.path, key, k.Mark(), depth + 1);
        break;
      case YAML::NodeType::Scalar:
        // Quoted: a string, so "8" for a number fails the type check as lr='"8"' would. Plain: the
        // text, parsed against the default's type as the command line's key=value is.
        if (yaml_is_string(v))
          o.value = ConfigValue::of_string(v.Scalar());
        else
          o.text = v.Scalar();
        break;
      default:
        fail_usage("config: " + where + ": key '" + key +
                   "' has no value (null); give it one or leave the key out");
    }
    c.add(std::move(o), where);
  }
}

std::string yaml_type_phrase(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Sequence:
      return "a sequence (list)";
    case YAML::NodeType::Scalar:
      return "the scalar '" + n.Scalar().substr(0, 60) + (n.Scalar().size() > 60 ? "...'" : "'");
    default:
      return "null (an empty document)";
  }
}

}  // namespace

// ============================================================================================
// Formats and files

ConfigFileFormat config_file_format(const std::string& path) {
  std::string name = lower(path_basename(path));
  if (str_ends_with(name, ".lua")) return ConfigFileFormat::lua;
  if (str_ends_with(name, ".json")) return ConfigFileFormat::json;
  if (str_ends_with(name, ".yaml") || str_ends_with(name, ".yml")) return ConfigFileFormat::yaml;
  fail_usage("config: --config " + path +
             ": unknown format; the file must end in .lua, .json, or .yaml/.yml");
}

std::vector<ConfigOverride> config_file_read(const std::string& path) {
  ConfigFileFormat format = config_file_format(path);
  if (format == ConfigFileFormat::lua)
    fail_usage("config: " + path + " is a Lua file; the runner reads those in its Lua state");
  std::string text;
  try {
    text = file_read(path);
  } catch (const Error& e) {
    fail_usage(std::string("config: --config: ") + e.what());
  }
  return format == ConfigFileFormat::json ? config_file_parse_json(text, path)
                                          : config_file_parse_yaml(text, path);
}

std::vector<ConfigOverride> config_file_parse_json(const std::string& text, const std::string& path) {
  std::string too_deep = json_depth_error(text, path);
  if (!too_deep.empty()) fail_usage("config: " + too_deep);
  nlohmann::ordered_json doc;
  try {
    doc = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line L, column C: DETAIL".
    std::string what = e.what();
    size_t colon = what.find(": ");
    fail_usage("config: " + json_position(text, path, e.byte) +
               ": not valid JSON: " + (colon == std::string::npos ? what : what.substr(colon + 2)));
  }
  if (!doc.is_object())
    fail_usage("config: " + path +
               ": the top level must be an object of overrides ({\"key\": value, ...}), got " +
               json_type_phrase(doc));
  Collector c{path, {}, {}};
  json_walk(doc, "", 1, c);
  return std::move(c.out);
}

std::vector<ConfigOverride> config_file_parse_yaml(const std::string& text, const std::string& path) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {  // ParserException, and DeepRecursion past yaml-cpp's own limit
    fail_usage("config: " + yaml_where(path, e.mark) + ": not valid YAML: " + e.msg);
  }
  if (docs.size() > 1)
    fail_usage("config: " + path + ": holds " + std::to_string(docs.size()) +
               " YAML documents (separated by ---); put the overrides in one");
  if (docs.empty() || !docs[0].IsMap())
    fail_usage("config: " + path + ": the top level must be a mapping of overrides (key: value), got " +
               (docs.empty() ? std::string("an empty file") : yaml_type_phrase(docs[0])));
  Collector c{path, {}, {}};
  yaml_walk(docs[0], "", 1, c);
  return std::move(c.out);
}

}  // namespace luatune
