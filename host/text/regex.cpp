// PCRE2 regexes for tokenizer.json patterns (Split, Replace): compiled with UTF and UCP so \s, \w,
// \p{L} and case folding follow Unicode as the Rust `regex` crate does, JIT-compiled when the
// library supports it. Matching allocates its match data per call, so one Regex serves all threads.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "host/core/error.h"
#include "host/text/tokenizer_parts.h"

namespace luatune {

Regex::Regex(const std::string& pattern, const std::string& where) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    fail(where + ": bad regex at offset " + std::to_string(offset) + ": " +
         reinterpret_cast<const char*>(buf));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is absent
  code_ = code;
}

Regex::~Regex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

std::vector<Span> Regex::find_all(std::string_view s) const {
  std::vector<Span> out;
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  PCRE2_SIZE start = 0;
  // The text was checked to be valid UTF-8 once, on entry to encode.
  uint32_t options = PCRE2_NO_UTF_CHECK;
  while (start <= s.size()) {
    int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), start, options, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      fail("tokenizer: regex match failed (PCRE2 error " + std::to_string(rc) + ")");
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] > ov[0]) {
      out.push_back({static_cast<uint32_t>(ov[0]), static_cast<uint32_t>(ov[1])});
      start = ov[1];
    } else {
      // An empty match: step over one whole character.
      if (ov[0] >= s.size()) break;
      start = ov[0] + utf8_len(static_cast<unsigned char>(s[ov[0]]));
    }
  }
  pcre2_match_data_free(md);
  return out;
}

std::string Regex::quote(std::string_view literal) {
  return "\\Q" + std::string(literal) + "\\E";
}

}  // namespace luatune
