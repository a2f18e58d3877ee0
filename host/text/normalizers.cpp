// Normalizers from tokenizer.json: Sequence, Prepend, Replace (String or Regex pattern), the four
// Unicode normalization forms (utf8proc), Lowercase and Strip. Each rewrites a Piece together with
// its per-byte source ranges, so offsets still point into the original text afterwards.
#include "host/core/error.h"
#include "host/text/tokenizer_parts.h"

namespace luatune {

namespace {

// A String or Regex pattern as tokenizer.json writes it: {"String": " "} or {"Regex": "\\s+"}.
std::unique_ptr<Regex> pattern_regex(const JsonNode& n) {
  JsonNode pat = n.at("pattern");
  pat.expect_object();
  if (pat.has("String")) return std::make_unique<Regex>(Regex::quote(pat.str("String")), pat.where());
  if (pat.has("Regex")) return std::make_unique<Regex>(pat.str("Regex"), pat.where() + ".Regex");
  pat.fail("should hold \"String\" or \"Regex\"");
}

class SequenceNormalizer : public Sequence<Normalizer> {
 public:
  explicit SequenceNormalizer(const JsonNode& n) : Sequence(n, "normalizers") {}
  void normalize(Piece& p) const override {
    each([&](const Normalizer& part) { part.normalize(p); });
  }
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(const JsonNode& n) : prepend_(n.str("prepend")) {}
  void normalize(Piece& p) const override {
    if (p.text.empty()) return;
    Piece out;
    // The new text points at the first character, as HF aligns it.
    out.append(prepend_, p.source_range(0, utf8_len(static_cast<unsigned char>(p.text[0]))));
    out.append_from(p, 0, p.text.size());
    p = std::move(out);
  }

 private:
  std::string prepend_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  explicit ReplaceNormalizer(const JsonNode& n) : regex_(pattern_regex(n)), content_(n.str("content")) {}
  void normalize(Piece& p) const override {
    std::vector<Span> matches = regex_->find_all(p.text);
    if (matches.empty()) return;
    Piece out;
    out.text.reserve(p.text.size() + matches.size() * content_.size());
    uint32_t at = 0;
    for (Span m : matches) {
      out.append_from(p, at, m.first);
      out.append(content_, p.source_range(m.first, m.second));
      at = m.second;
    }
    out.append_from(p, at, p.text.size());
    p = std::move(out);
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

// NFC/NFD/NFKC/NFKD. The text is normalized in chunks that start at an ASCII character (or the
// start) and run up to the next one: no composition or reordering crosses an ASCII character, so
// chunking changes nothing, and a chunk that does change maps back to the chunk's source range.
class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(UnicodeForm form) : form_(form) {}
  void normalize(Piece& p) const override {
    const std::string& s = p.text;
    bool ascii = true;
    for (char ch : s) ascii = ascii && static_cast<unsigned char>(ch) < 0x80;
    if (ascii) return;
    Piece out;
    out.text.reserve(s.size());
    std::string normalized;
    size_t i = 0;
    while (i < s.size()) {
      size_t end = i + 1;
      while (end < s.size() && static_cast<unsigned char>(s[end]) >= 0x80) end++;
      std::string_view chunk(s.data() + i, end - i);
      if (end - i > 1 && unicode_normalize(chunk, form_, normalized))
        out.append(normalized, p.source_range(i, end));
      else
        out.append_from(p, i, end);
      i = end;
    }
    p = std::move(out);
  }

 private:
  UnicodeForm form_;
};

template <UnicodeForm form>
std::unique_ptr<Normalizer> unicode_normalizer(const JsonNode&) {
  return std::make_unique<UnicodeNormalizer>(form);
}

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(Piece& p) const override {
    Piece out;
    out.text.reserve(p.text.size());
    std::string ch;
    size_t i = 0;
    while (i < p.text.size()) {
      size_t start = i;
      char32_t c = utf8_next(p.text, i);
      char32_t lower = unicode_lower(c);
      if (lower == c) {
        out.append_from(p, start, i);
      } else {
        ch.clear();
        utf8_append(ch, lower);
        out.append(ch, p.source_range(start, i));
      }
    }
    p = std::move(out);
  }
};

class StripNormalizer : public Normalizer {
 public:
  explicit StripNormalizer(const JsonNode& n)
      : left_(n.boolean_or("strip_left", true)), right_(n.boolean_or("strip_right", true)) {}
  void normalize(Piece& p) const override {
    size_t begin = 0, end = p.text.size();
    if (left_) {
      while (begin < end) {
        size_t i = begin;
        if (!unicode_is_whitespace(utf8_next(p.text, i))) break;
        begin = i;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(p.text[start]) & 0xC0) == 0x80) start--;
        size_t i = start;
        if (!unicode_is_whitespace(utf8_next(p.text, i))) break;
        end = start;
      }
    }
    if (begin != 0 || end != p.text.size()) p = p.slice(begin, end);
  }

 private:
  bool left_, right_;
};

}  // namespace

std::unique_ptr<Normalizer> Normalizer::create(const JsonNode& n) {
  static const PartMaker<Normalizer> kNormalizers[] = {
      {"Sequence", make_part<Normalizer, SequenceNormalizer>},
      {"Prepend", make_part<Normalizer, PrependNormalizer>},
      {"Replace", make_part<Normalizer, ReplaceNormalizer>},
      {"NFC", unicode_normalizer<UnicodeForm::nfc>},
      {"NFD", unicode_normalizer<UnicodeForm::nfd>},
      {"NFKC", unicode_normalizer<UnicodeForm::nfkc>},
      {"NFKD", unicode_normalizer<UnicodeForm::nfkd>},
      {"Lowercase", make_part<Normalizer, LowercaseNormalizer>},
      {"Strip", make_part<Normalizer, StripNormalizer>}};
  return create_part(n, kNormalizers);
}

}  // namespace luatune
