// Config resolution (see config.h).
#include "host/cli/config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "host/core/error.h"
#include "host/core/number.h"
#include "host/core/strings.h"

namespace luatune {

// ============================================================================================
// Values

ConfigValue ConfigValue::of_number(double v) {
  ConfigValue c;
  c.kind = Kind::number;
  c.number = v;
  return c;
}
ConfigValue ConfigValue::of_boolean(bool v) {
  ConfigValue c;
  c.kind = Kind::boolean;
  c.boolean = v;
  return c;
}
ConfigValue ConfigValue::of_string(std::string v) {
  ConfigValue c;
  c.kind = Kind::string;
  c.string = std::move(v);
  return c;
}
ConfigValue ConfigValue::of_list(std::vector<ConfigValue> items) {
  ConfigValue c;
  c.kind = Kind::list;
  c.items = std::move(items);
  return c;
}
ConfigValue ConfigValue::of_table() {
  return ConfigValue();
}

const char* config_kind_name(ConfigValue::Kind kind) {
  switch (kind) {
    case ConfigValue::Kind::number:
      return "number";
    case ConfigValue::Kind::boolean:
      return "boolean";
    case ConfigValue::Kind::string:
      return "string";
    case ConfigValue::Kind::list:
      return "list";
    case ConfigValue::Kind::table:
      return "table";
  }
  return "?";
}

// ============================================================================================
// Parsing overrides

ConfigOverride config_parse_override(const std::string& arg, const std::string& source) {
  size_t eq = arg.find('=');
  if (eq == std::string::npos)
    fail_usage("config: bad override '" + arg + "': expected key=value",
               "for example learning_rate=2e-4 or lora.r=8");
  ConfigOverride o;
  o.key = str_trim(arg.substr(0, eq));
  o.text = arg.substr(eq + 1);
  o.source = source;
  if (o.key.empty()) fail_usage("config: bad override '" + arg + "': the key before '=' is empty");
  return o;
}

std::vector<ConfigOverride> config_flatten(const ConfigValue& table, const std::string& source) {
  std::vector<ConfigOverride> out;
  for (const auto& [name, v] : table.fields) {
    if (v.kind == ConfigValue::Kind::table) {
      for (auto& sub : config_flatten(v, source)) {
        sub.key = name + "." + sub.key;
        out.push_back(std::move(sub));
      }
    } else {
      ConfigOverride o;
      o.key = name;
      o.value = v;
      o.source = source;
      out.push_back(std::move(o));
    }
  }
  return out;
}

namespace {

bool parse_boolean(const std::string& raw, bool* out) {
  std::string t = str_trim(raw);
  std::transform(t.begin(), t.end(), t.begin(), ::tolower);
  if (t == "true" || t == "yes" || t == "on" || t == "1") return *out = true, true;
  if (t == "false" || t == "no" || t == "off" || t == "0") return *out = false, true;
  return false;
}

std::string unquote(const std::string& raw) {
  if (raw.size() >= 2 && (raw.front() == '"' || raw.front() == '\'') && raw.back() == raw.front())
    return raw.substr(1, raw.size() - 2);
  return raw;
}

[[noreturn]] void fail_type(const ConfigOverride& o, const std::string& expected, const std::string& got) {
  fail_usage("config: key '" + o.key + "' expects " + expected + ", got " + got + " (" + o.source + ")");
}

std::string article(ConfigValue::Kind k) {
  return k == ConfigValue::Kind::number    ? "a number"
         : k == ConfigValue::Kind::boolean ? "a boolean (true/false)"
                                           : "a string";
}

// Text -> scalar of kind `k`; `k` of table means "infer" (number, then boolean, then string).
bool parse_scalar(const std::string& text, ConfigValue::Kind k, ConfigValue* out) {
  double num;
  bool b;
  switch (k) {
    case ConfigValue::Kind::number:
      if (!str_to_number(text, &num)) return false;
      *out = ConfigValue::of_number(num);
      return true;
    case ConfigValue::Kind::boolean:
      if (!parse_boolean(text, &b)) return false;
      *out = ConfigValue::of_boolean(b);
      return true;
    case ConfigValue::Kind::string:
      *out = ConfigValue::of_string(unquote(text));
      return true;
    default:
      if (str_to_number(text, &num))
        *out = ConfigValue::of_number(num);
      else if (str_trim(text) == "true" || str_trim(text) == "false")
        *out = ConfigValue::of_boolean(str_trim(text) == "true");
      else
        *out = ConfigValue::of_string(unquote(str_trim(text)));
      return true;
  }
}

// The kind every item of a default list has, or table when the list is empty (infer from text).
ConfigValue::Kind list_item_kind(const ConfigValue& list) {
  if (list.items.empty()) return ConfigValue::Kind::table;
  return list.items.front().kind;
}

ConfigValue parse_text(const ConfigOverride& o, const ConfigValue& def) {
  ConfigValue out;
  if (def.kind != ConfigValue::Kind::list) {
    std::string text = def.kind == ConfigValue::Kind::string ? o.text : str_trim(o.text);
    if (!parse_scalar(text, def.kind, &out)) fail_type(o, article(def.kind), "'" + o.text + "'");
    return out;
  }
  ConfigValue::Kind item_kind = list_item_kind(def);
  if (item_kind == ConfigValue::Kind::list || (item_kind == ConfigValue::Kind::table && !def.items.empty()))
    fail_usage("config: key '" + o.key + "' is a list of tables and cannot be set as text (" + o.source + ")",
               "put it in a file of overrides: runner RECIPE --config overrides.lua");
  std::string text = str_trim(o.text);
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') text = text.substr(1, text.size() - 2);
  if (text.size() >= 2 && text.front() == '{' && text.back() == '}') text = text.substr(1, text.size() - 2);
  std::vector<ConfigValue> items;
  if (!str_trim(text).empty()) {
    for (const auto& part : str_split(text, ',')) {
      ConfigValue item;
      if (!parse_scalar(str_trim(part), item_kind, &item))
        fail_type(o, std::string("a comma-separated list of ") + config_kind_name(item_kind) + "s",
                  "'" + o.text + "' (item '" + str_trim(part) + "')");
      items.push_back(std::move(item));
    }
  }
  return ConfigValue::of_list(std::move(items));
}

void check_typed(const ConfigOverride& o, const ConfigValue& def, const ConfigValue& v) {
  if (v.kind != def.kind)
    fail_type(o, def.kind == ConfigValue::Kind::list ? std::string("a list") : article(def.kind),
              std::string("a ") + config_kind_name(v.kind) + " " + config_value_str(v));
  if (def.kind == ConfigValue::Kind::list && !def.items.empty()) {
    ConfigValue::Kind k = list_item_kind(def);
    for (const auto& item : v.items)
      if (item.kind != k)
        fail_type(
            o, std::string("a list of ") + config_kind_name(k) + "s",
            std::string("a list holding the ") + config_kind_name(item.kind) + " " + config_value_str(item));
  }
}

// Recipe keys renamed to the Hugging Face TrainingArguments names (docs/recipes.md): an override
// with an old name is told the new one when the config has it.
std::string renamed_key(const std::string& key, const std::vector<std::string>& keys) {
  static const std::pair<const char*, const char*> renames[] = {
      {"lr", "learning_rate"},
      {"steps", "max_steps"},
      {"warmup", "warmup_steps"},
      {"warmup", "warmup_ratio"},
      {"grad_accum", "gradient_accumulation_steps"},
      {"checkpoint_layers", "gradient_checkpointing"},
      {"eval_every", "eval_steps"},
      {"save_every", "save_steps"},
  };
  size_t dot = key.rfind('.');
  std::string prefix = dot == std::string::npos ? "" : key.substr(0, dot + 1);
  std::string last = dot == std::string::npos ? key : key.substr(dot + 1);
  for (const auto& [from, to] : renames) {
    if (last != from) continue;
    std::string candidate = prefix + to;
    for (const auto& k : keys)
      if (k == candidate) return candidate;
  }
  return "";
}

}  // namespace

void config_apply(ConfigValue& cfg, const std::vector<ConfigOverride>& overrides) {
  for (const auto& o : overrides) {
    ConfigValue* node = &cfg;
    for (const auto& part : str_split(o.key, '.')) {
      auto it = node->kind == ConfigValue::Kind::table ? node->fields.find(part) : node->fields.end();
      if (it == node->fields.end()) {
        auto keys = config_leaf_keys(cfg);
        std::string renamed = renamed_key(o.key, keys);
        std::string near = renamed.empty() ? str_nearest(o.key, keys) : "";
        fail_usage("config: unknown key '" + o.key + "' (" + o.source + ")" +
                       (!renamed.empty() ? "; it is now '" + renamed + "' (docs/recipes.md)"
                        : near.empty()   ? ""
                                         : "; did you mean '" + near + "'?") +
                       " valid keys: " + str_join(keys, ", "),
                   "run `runner help RECIPE` to see every key with its default and meaning");
      }
      node = &it->second;
    }
    if (node->kind == ConfigValue::Kind::table) {
      std::vector<std::string> sub;
      for (const auto& k : config_leaf_keys(*node)) sub.push_back(o.key + "." + k);
      fail_usage("config: key '" + o.key + "' is a table and cannot be replaced whole (" + o.source +
                 "); set its fields: " + str_join(sub, ", "));
    }
    ConfigValue v = o.value ? *o.value : parse_text(o, *node);
    check_typed(o, *node, v);
    v.origin = o.source;
    *node = std::move(v);
  }
}

// ============================================================================================
// Listing and printing

static void collect_keys(const ConfigValue& v, const std::string& prefix, std::vector<std::string>* out) {
  for (const auto& [name, f] : v.fields) {
    std::string key = prefix.empty() ? name : prefix + "." + name;
    if (f.kind == ConfigValue::Kind::table)
      collect_keys(f, key, out);
    else
      out->push_back(key);
  }
}

std::vector<std::string> config_leaf_keys(const ConfigValue& cfg) {
  std::vector<std::string> out;
  collect_keys(cfg, "", &out);
  return out;
}

static std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string config_value_str(const ConfigValue& v) {
  switch (v.kind) {
    case ConfigValue::Kind::number:
      return str_from_number(v.number);
    case ConfigValue::Kind::boolean:
      return v.boolean ? "true" : "false";
    case ConfigValue::Kind::string:
      return quote(v.string);
    case ConfigValue::Kind::list: {
      std::vector<std::string> parts;
      for (const auto& i : v.items) parts.push_back(config_value_str(i));
      return "{" + str_join(parts, ", ") + "}";
    }
    case ConfigValue::Kind::table: {
      std::vector<std::string> parts;
      for (const auto& [k, f] : v.fields) parts.push_back(k + " = " + config_value_str(f));
      return "{" + str_join(parts, ", ") + "}";
    }
  }
  return "?";
}

static void format_into(const ConfigValue& v, const std::string& prefix, size_t width,
                        std::ostringstream& os) {
  for (const auto& [name, f] : v.fields) {
    std::string key = prefix.empty() ? name : prefix + "." + name;
    if (f.kind == ConfigValue::Kind::table) {
      format_into(f, key, width, os);
      continue;
    }
    os << "  " << key << std::string(width - key.size(), ' ') << " = " << config_value_str(f);
    if (!f.origin.empty()) os << "   [" << f.origin << "]";
    os << "\n";
  }
}

std::string config_format(const ConfigValue& cfg) {
  size_t width = 0;
  for (const auto& k : config_leaf_keys(cfg)) width = std::max(width, k.size());
  std::ostringstream os;
  format_into(cfg, "", width, os);
  return os.str();
}

nlohmann::ordered_json config_to_json_value(const ConfigValue& v) {
  switch (v.kind) {
    case ConfigValue::Kind::number:
      if (!std::isfinite(v.number)) return nullptr;  // JSON has no NaN or infinities
      // Whole numbers as integers, so a reread compares equal.
      if (number_is_whole(v.number)) return static_cast<int64_t>(v.number);
      return v.number;
    case ConfigValue::Kind::boolean:
      return v.boolean;
    case ConfigValue::Kind::string:
      return v.string;
    case ConfigValue::Kind::list: {
      nlohmann::ordered_json a = nlohmann::ordered_json::array();
      for (const auto& i : v.items) a.push_back(config_to_json_value(i));
      return a;
    }
    case ConfigValue::Kind::table: {
      nlohmann::ordered_json o = nlohmann::ordered_json::object();
      for (const auto& [k, f] : v.fields) o[k] = config_to_json_value(f);
      return o;
    }
  }
  return nullptr;
}

std::string config_to_json(const ConfigValue& cfg) {
  return config_to_json_value(cfg).dump();
}

}  // namespace luatune
