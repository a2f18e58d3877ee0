// GPU catalog: loading and validating data/gpu_catalog.json, and matching device names to entries.
#include "host/hw/catalog.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "host/cli/recipes.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/core/strings.h"

namespace luatune {

double GpuSpec::peak_tflops(const std::string& dtype) const {
  if (dtype == "fp16" || dtype == "float16" || !bf16 || bf16_tflops <= 0) return fp16_tflops;
  return bf16_tflops;
}

std::string hw_catalog_default_path() {
  if (const char* env = std::getenv("LUATUNE_GPU_CATALOG"); env && *env) return env;
  return luatune_home() + "/data/gpu_catalog.json";
}

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// `alias` occurs in `name` with no letter or digit right before or after it.
bool contains_word(const std::string& name, const std::string& alias) {
  for (size_t at = name.find(alias); at != std::string::npos; at = name.find(alias, at + 1)) {
    bool left = at == 0 || !std::isalnum(static_cast<unsigned char>(name[at - 1]));
    size_t end = at + alias.size();
    bool right = end == name.size() || !std::isalnum(static_cast<unsigned char>(name[end]));
    if (left && right) return true;
  }
  return false;
}

}  // namespace

std::vector<GpuSpec> hw_catalog_parse(const std::string& json_text, const std::string& source) {
  json_check_depth(json_text, "hw.catalog: " + source);
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  LT_CHECK(!doc.is_discarded(), "hw.catalog: " << source << ": not valid JSON");
  LT_CHECK(
      doc.is_object() && doc.contains("gpus") && doc["gpus"].is_array(),
      "hw.catalog: " << source << ": expected an object with a \"gpus\" list (see data/gpu_catalog.json)");
  std::vector<GpuSpec> out;
  int index = 0;
  for (const auto& e : doc["gpus"]) {
    index++;
    std::string where = "hw.catalog: " + source + ": entry " + std::to_string(index);
    LT_CHECK(e.is_object(), where << ": expected an object");
    if (e.contains("name") && e["name"].is_string()) where += " (\"" + e["name"].get<std::string>() + "\")";
    auto text = [&](const char* key, bool required) -> std::string {
      if (!e.contains(key)) {
        LT_CHECK(!required, where << ": field '" << key << "' is missing");
        return "";
      }
      LT_CHECK(e[key].is_string(), where << ": field '" << key << "' must be a string");
      return e[key].get<std::string>();
    };
    auto number = [&](const char* key, bool positive) -> double {
      LT_CHECK(e.contains(key), where << ": field '" << key << "' is missing");
      LT_CHECK(e[key].is_number(), where << ": field '" << key << "' must be a number");
      double v = e[key].get<double>();
      LT_CHECK(positive ? v > 0 : v >= 0, where << ": field '" << key << "' must be a "
                                                << (positive ? "positive" : "non-negative") << " number");
      return v;
    };
    static const std::vector<std::string> known = {
        "name", "aliases",      "memory_gb",      "bandwidth_gbs", "bf16_tflops", "fp16_tflops",
        "bf16", "interconnect", "price_per_hour", "price_source",  "price_date",  "notes"};
    for (auto it = e.begin(); it != e.end(); ++it)
      LT_CHECK(std::find(known.begin(), known.end(), it.key()) != known.end(),
               where << ": unknown field '" << it.key() << "' (fields: " << str_join(known, ", ") << ")");
    GpuSpec g;
    g.name = text("name", true);
    LT_CHECK(!g.name.empty(), where << ": field 'name' must not be empty");
    if (e.contains("aliases")) {
      // (an empty Lua table arrives as {}: no aliases)
      LT_CHECK(e["aliases"].is_array() || (e["aliases"].is_object() && e["aliases"].empty()),
               where << ": field 'aliases' must be a list of strings");
      for (const auto& a : e["aliases"]) {
        LT_CHECK(a.is_string() && !a.get<std::string>().empty(),
                 where << ": field 'aliases' must be a list of strings");
        g.aliases.push_back(a.get<std::string>());
      }
    }
    g.memory_gb = number("memory_gb", true);
    g.bandwidth_gbs = number("bandwidth_gbs", true);
    g.bf16_tflops = number("bf16_tflops", false);
    g.fp16_tflops = number("fp16_tflops", true);
    if (e.contains("bf16")) {
      LT_CHECK(e["bf16"].is_boolean(), where << ": field 'bf16' must be true or false");
      g.bf16 = e["bf16"].get<bool>();
    }
    LT_CHECK(!g.bf16 || g.bf16_tflops > 0,
             where << ": field 'bf16_tflops' must be positive when bf16 is true");
    g.interconnect = text("interconnect", false);
    g.price_per_hour = number("price_per_hour", false);
    g.price_source = text("price_source", false);
    g.price_date = text("price_date", false);
    g.notes = text("notes", false);
    for (const auto& other : out)
      LT_CHECK(other.name != g.name, where << ": field 'name': \"" << g.name << "\" appears twice");
    out.push_back(std::move(g));
  }
  LT_CHECK(!out.empty(), "hw.catalog: " << source << ": the \"gpus\" list is empty");
  return out;
}

std::vector<GpuSpec> hw_catalog_load(const std::string& path) {
  LT_CHECK(file_exists(path), "hw.catalog: no catalog file '" << path << "'");
  return hw_catalog_parse(file_read(path), path);
}

const GpuSpec* hw_catalog_match(const std::vector<GpuSpec>& catalog, const std::string& device_name) {
  const std::string name = lower(device_name);
  const GpuSpec* best = nullptr;
  size_t best_len = 0;
  for (const auto& g : catalog) {
    std::vector<std::string> keys = g.aliases;
    keys.push_back(g.name);
    for (const auto& a : keys) {
      std::string al = lower(a);
      if (al.size() > best_len && contains_word(name, al)) {
        best = &g;
        best_len = al.size();
      }
    }
  }
  return best;
}

const GpuSpec& hw_catalog_find(const std::vector<GpuSpec>& catalog, const std::string& name) {
  for (const auto& g : catalog)
    if (lower(g.name) == lower(name)) return g;
  for (const auto& g : catalog)
    for (const auto& a : g.aliases)
      if (lower(a) == lower(name)) return g;
  std::vector<std::string> names;
  for (const auto& g : catalog) names.push_back(g.name);
  fail("hw: no GPU '" + name + "' in the catalog", "catalog GPUs: " + str_join(names, ", "));
}

}  // namespace luatune
