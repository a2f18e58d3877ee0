// JSON input with a nesting limit, and bounded excerpts for error messages (see json.h).
#include "host/core/json.h"

#include <algorithm>

#include "host/core/error.h"

namespace luatune {

namespace {

// The byte offset of the bracket that opens level max_depth + 1, or npos. A plain scan, not a
// parse: it only has to be right for valid JSON (the parser rejects the rest afterwards).
size_t too_deep_offset(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); i++) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        i++;  // the escaped character, '"' included
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      depth--;
    }
  }
  return std::string_view::npos;
}

template <class J>
J parse_checked(std::string_view text, const std::string& path) {
  json_check_depth(text, path);
  try {
    return J::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path + ": not valid JSON (" + e.what() + ")");
  }
}

template <class J>
J parse_or_discard(std::string_view text) {
  if (too_deep_offset(text, kJsonMaxDepth) != std::string_view::npos) return J(J::value_t::discarded);
  return J::parse(text, nullptr, /*allow_exceptions=*/false);
}

// Appends v's compact dump to `out` until `out` is longer than `limit`. Every level writes its
// bracket before going deeper, so the recursion stops within limit + 1 levels.
template <class J>
void excerpt_into(const J& v, size_t limit, std::string& out) {
  if (out.size() > limit) return;
  if (v.is_object() || v.is_array()) {
    const bool object = v.is_object();
    out += object ? '{' : '[';
    bool first = true;
    for (auto it = v.begin(); it != v.end() && out.size() <= limit; ++it) {
      if (!first) out += ',';
      first = false;
      if (object) out += J(it.key()).dump(-1, ' ', false, J::error_handler_t::replace) + ":";
      excerpt_into(it.value(), limit, out);
    }
    if (out.size() <= limit) out += object ? '}' : ']';
    return;
  }
  out += v.dump(-1, ' ', false, J::error_handler_t::replace);
}

template <class J>
std::string excerpt(const J& v, size_t limit) {
  std::string s;
  excerpt_into(v, limit, s);
  if (s.size() > limit) {
    size_t cut = limit;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) cut--;  // not inside a UTF-8 char
    s = s.substr(0, cut) + "...";
  }
  return s;
}

}  // namespace

int64_t json_too_deep_line(std::string_view text, int64_t first_line) {
  size_t at = too_deep_offset(text, kJsonMaxDepth);
  if (at == std::string_view::npos) return 0;
  return first_line + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
}

std::string json_depth_error(std::string_view text, const std::string& path, int64_t first_line) {
  int64_t line = json_too_deep_line(text, first_line);
  if (line == 0) return "";
  return path + ":" + std::to_string(line) + ": JSON nested deeper than " + std::to_string(kJsonMaxDepth) +
         " levels (luatune's limit for JSON input; see docs/limits.md)";
}

void json_check_depth(std::string_view text, const std::string& path, int64_t first_line) {
  std::string error = json_depth_error(text, path, first_line);
  if (!error.empty()) fail(error);
}

nlohmann::json json_parse_checked(std::string_view text, const std::string& path) {
  return parse_checked<nlohmann::json>(text, path);
}
nlohmann::ordered_json ojson_parse_checked(std::string_view text, const std::string& path) {
  return parse_checked<nlohmann::ordered_json>(text, path);
}
nlohmann::json json_parse_or_discard(std::string_view text) {
  return parse_or_discard<nlohmann::json>(text);
}
nlohmann::ordered_json ojson_parse_or_discard(std::string_view text) {
  return parse_or_discard<nlohmann::ordered_json>(text);
}

std::string json_excerpt(const nlohmann::json& v, size_t limit) {
  return excerpt(v, limit);
}
std::string json_excerpt(const nlohmann::ordered_json& v, size_t limit) {
  return excerpt(v, limit);
}

}  // namespace luatune
