// UTF-8 decoding and encoding, lossy decoding of arbitrary bytes (U+FFFD per maximal ill-formed
// subsequence, as Rust's String::from_utf8_lossy and the WHATWG decoder do), and the Unicode
// properties the tokenizer needs, all from utf8proc (no tables of our own), plus the Piece type.
#include <utf8proc.h>

#include <cstdlib>

#include "host/core/error.h"
#include "host/text/tokenizer_parts.h"

namespace luatune {

// ============================================================================================
// Piece

Piece Piece::of_original(std::string_view text, uint32_t base) {
  Piece p;
  p.text.assign(text);
  p.src.resize(text.size());
  for (uint32_t i = 0; i < text.size(); i++) p.src[i] = {base + i, base + i + 1};
  return p;
}

Piece Piece::slice(size_t begin, size_t end) const {
  Piece p;
  p.text.assign(text, begin, end - begin);
  p.src.assign(src.begin() + begin, src.begin() + end);
  return p;
}

Span Piece::source_range(size_t begin, size_t end) const {
  if (begin >= end) {
    uint32_t at = begin < src.size() ? src[begin].first : (src.empty() ? 0 : src.back().second);
    return {at, at};
  }
  uint32_t lo = src[begin].first, hi = src[begin].second;
  for (size_t i = begin + 1; i < end; i++) {
    lo = std::min(lo, src[i].first);
    hi = std::max(hi, src[i].second);
  }
  return {lo, hi};
}

void Piece::append(std::string_view s, Span from) {
  text.append(s);
  src.insert(src.end(), s.size(), from);
}

void Piece::append_from(const Piece& p, size_t begin, size_t end) {
  text.append(p.text, begin, end - begin);
  src.insert(src.end(), p.src.begin() + begin, p.src.begin() + end);
}

// ============================================================================================
// UTF-8

char32_t utf8_next(std::string_view s, size_t& i) {
  auto b = static_cast<unsigned char>(s[i]);
  size_t n = utf8_len(b);
  if (n == 1 || i + n > s.size()) {
    i++;
    return b;
  }
  char32_t cp = b & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; k++) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

// Length of the well-formed UTF-8 sequence at bytes[i] (Unicode table 3-7: the lead byte fixes the
// length and the range of the second byte; later bytes are 80..BF), or 0 when ill-formed; then
// *bad_len is the length of the maximal ill-formed subsequence (the lead and the continuation
// bytes that fit), which gets one U+FFFD.
size_t utf8_sequence(std::string_view bytes, size_t i, size_t* bad_len) {
  size_t n = bytes.size();
  auto b = static_cast<unsigned char>(bytes[i]);
  if (b < 0x80) return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF)
    len = 2;
  else if (b == 0xE0)
    len = 3, lo = 0xA0;
  else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF)
    len = 3;
  else if (b == 0xED)
    len = 3, hi = 0x9F;
  else if (b == 0xF0)
    len = 4, lo = 0x90;
  else if (b >= 0xF1 && b <= 0xF3)
    len = 4;
  else if (b == 0xF4)
    len = 4, hi = 0x8F;
  size_t k = 1;
  if (len) {
    for (; k < len && i + k < n; k++) {
      auto c = static_cast<unsigned char>(bytes[i + k]);
      if (c < lo || c > hi) break;
      lo = 0x80, hi = 0xBF;
    }
  }
  if (len && k == len) return len;
  *bad_len = k;
  return 0;
}

}  // namespace

bool utf8_lossy(std::string_view bytes, std::string& out) {
  out.clear();
  out.reserve(bytes.size());
  bool valid = true;
  size_t i = 0, bad = 0;
  while (i < bytes.size()) {
    if (size_t len = utf8_sequence(bytes, i, &bad)) {
      out.append(bytes.data() + i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      valid = false;
      i += bad;
    }
  }
  return valid;
}

size_t utf8_invalid_at(std::string_view bytes) {
  size_t i = 0, bad = 0;
  while (i < bytes.size()) {
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      i++;
    } else if (size_t len = utf8_sequence(bytes, i, &bad)) {
      i += len;
    } else {
      return i;
    }
  }
  return std::string_view::npos;
}

// ============================================================================================
// Properties

bool unicode_is_whitespace(char32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85) return true;
  if (c < 0xA0) return false;
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool unicode_is_alnum(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

char32_t unicode_lower(char32_t c) {
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}

bool unicode_normalize(std::string_view s, UnicodeForm form, std::string& out) {
  out.clear();
  bool ascii = true;
  for (char ch : s) ascii = ascii && static_cast<unsigned char>(ch) < 0x80;
  if (ascii) return false;  // ASCII is invariant under every normalization form
  int options = UTF8PROC_STABLE;
  switch (form) {
    case UnicodeForm::nfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case UnicodeForm::nfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case UnicodeForm::nfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case UnicodeForm::nfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* dst = nullptr;
  utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                   static_cast<utf8proc_ssize_t>(s.size()), &dst, static_cast<utf8proc_option_t>(options));
  LT_CHECK(n >= 0, "tokenizer: Unicode normalization failed: " << utf8proc_errmsg(n));
  std::string_view result(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
  bool changed = result != s;
  if (changed) out.assign(result);
  std::free(dst);
  return changed;
}

}  // namespace luatune
