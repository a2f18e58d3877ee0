// Extended JSON for W&B (see wandb_json.h): a writer that spells non-finite doubles as NaN,
// Infinity and -Infinity, and a reader that maps those tokens through placeholder strings,
// since nlohmann's parser knows no NaN.
#include "host/metrics/wandb_json.h"

#include <cmath>
#include <cstring>

namespace luatune {

using ojson = nlohmann::ordered_json;

namespace {

void dump_to(const ojson& j, std::string& out) {
  if (j.is_number_float()) {
    double v = j.get<double>();
    if (std::isnan(v))
      out += "NaN";
    else if (std::isinf(v))
      out += v > 0 ? "Infinity" : "-Infinity";
    else
      out += j.dump();
  } else if (j.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += ',';
      first = false;
      out += wandb_json_quote(it.key());
      out += ':';
      dump_to(it.value(), out);
    }
    out += '}';
  } else if (j.is_array()) {
    out += '[';
    for (size_t i = 0; i < j.size(); i++) {
      if (i) out += ',';
      dump_to(j[i], out);
    }
    out += ']';
  } else {
    out += j.dump(-1, ' ', false, ojson::error_handler_t::replace);
  }
}

// Stand-ins for the three tokens while nlohmann parses; a string that starts with a NUL never
// comes from our own writers.
const char* const kSentinels[3][2] = {
    {"-Infinity", "\\u0000lt:-inf"}, {"Infinity", "\\u0000lt:inf"}, {"NaN", "\\u0000lt:nan"}};

void restore_tokens(ojson& j) {
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (s.size() > 4 && s[0] == '\0' && s.compare(1, 3, "lt:") == 0) {
      std::string t = s.substr(4);
      j = t == "nan" ? std::nan("") : t == "inf" ? HUGE_VAL : -HUGE_VAL;
    }
  } else if (j.is_structured()) {
    for (auto& v : j) restore_tokens(v);
  }
}

}  // namespace

std::string wandb_json_quote(const std::string& s) {
  return ojson(s).dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string wandb_json_dump(const ojson& j) {
  std::string out;
  dump_to(j, out);
  return out;
}

ojson wandb_json_parse(const std::string& text) {
  std::string t;
  t.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); i++) {
    char c = text[i];
    if (in_string) {
      t += c;
      if (c == '\\' && i + 1 < text.size())
        t += text[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const auto& s : kSentinels) {
      size_t n = std::strlen(s[0]);
      if (text.compare(i, n, s[0]) == 0) {
        t += '"';
        t += s[1];
        t += '"';
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) t += c;
  }
  ojson j = ojson::parse(t);
  restore_tokens(j);
  return j;
}

}  // namespace luatune
