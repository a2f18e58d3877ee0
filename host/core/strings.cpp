// String helpers (see strings.h).
#include "host/core/strings.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace luatune {

std::vector<std::string> str_split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}

std::string str_trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string str_join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); i++) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

bool str_starts_with(const std::string& s, const std::string& p) {
  return s.compare(0, p.size(), p) == 0;
}

bool str_ends_with(const std::string& s, const std::string& x) {
  return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

size_t str_edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); j++) prev[j] = j;
  for (size_t i = 1; i <= a.size(); i++) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); j++) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string str_nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& c : candidates) {
    size_t d = str_edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  // A typo changes a few characters; beyond a third of the word it is a different word.
  size_t limit = std::max<size_t>(2, word.size() / 3);
  return best_d <= limit ? best : "";
}

bool str_to_number(const std::string& s, double* out) {
  std::string t = str_trim(s);
  if (t.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return false;
  if (errno == ERANGE && std::isinf(v)) return false;
  *out = v;
  return true;
}

std::string str_from_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {  // whole numbers read as integers: 200, not 2e+02
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (int prec = 1; prec <= 17; prec++) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// ============================================================================================
// Markdown tables

std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out;
}

// Whether the '&' at s[at] starts a character reference ("&lt;", "&#60;"), which a viewer would
// turn into another character.
static bool starts_reference(const std::string& s, size_t at) {
  size_t name = at + 1 < s.size() && s[at + 1] == '#' ? at + 2 : at + 1, end = name;
  while (end < s.size() && std::isalnum(static_cast<unsigned char>(s[end]))) end++;
  return end > name && end < s.size() && s[end] == ';';
}

// Whether the '<' at s[at] could start raw HTML or an autolink for a Markdown viewer: only a letter
// (a tag, a scheme), '/' (a closing tag), '!' (a comment, a declaration) or '?' (a processing
// instruction) after it does. "<0.01" or "< 5" is text as written.
static bool starts_markup(const std::string& s, size_t at) {
  if (at + 1 >= s.size()) return false;
  const char c = s[at + 1];
  return std::isalpha(static_cast<unsigned char>(c)) || c == '/' || c == '!' || c == '?';
}

std::string md_text(const std::string& s) {
  const std::string cell = md_cell(s);
  std::string out;
  for (size_t i = 0; i < cell.size(); i++) {
    if (cell[i] == '<' && starts_markup(cell, i))
      out += "&lt;";
    else if (cell[i] == '>')
      out += "&gt;";
    else if (cell[i] == '&' && starts_reference(cell, i))
      out += "&amp;";
    else
      out += cell[i];
  }
  return out;
}

std::string md_table(const std::vector<MdColumn>& cols, const std::vector<std::vector<std::string>>& rows) {
  std::ostringstream os;
  os << "|";
  for (const MdColumn& c : cols) os << " " << c.header << " |";
  os << "\n|";
  for (const MdColumn& c : cols) os << (c.right ? "---:|" : "---|");
  os << "\n";
  for (const auto& r : rows) {
    os << "|";
    for (size_t i = 0; i < cols.size(); i++) os << " " << (i < r.size() ? r[i] : "") << " |";
    os << "\n";
  }
  return os.str();
}

}  // namespace luatune
