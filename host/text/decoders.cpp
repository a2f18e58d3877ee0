// Decoders from tokenizer.json: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and
// Sequence. Each maps the list of token strings to a new list (HF's decode_chain); the tokenizer
// joins what the last one returns. Bytes that are not valid UTF-8 become U+FFFD, as in HF.
#include "host/core/error.h"
#include "host/text/tokenizer_parts.h"

namespace luatune {

namespace {

const char kReplacementChar[] = "\xEF\xBF\xBD";  // U+FFFD

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes, text;
    for (const std::string& t : tokens) {
      size_t mark = bytes.size();
      if (!byte_level_unmap(t, bytes)) {  // not byte-level text (an added token): keep as is
        bytes.resize(mark);
        bytes += t;
      }
    }
    utf8_lossy(bytes, text);
    tokens.assign(1, std::move(text));
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  explicit MetaspaceDecoder(const JsonNode& n) : replacement_(n.str_or("replacement", "\xE2\x96\x81")) {
    std::string scheme =
        n.str_or("prepend_scheme", n.boolean_or("add_prefix_space", true) ? "always" : "never");
    strip_first_ = scheme != "never";
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); i++) {
      std::string out;
      const std::string& t = tokens[i];
      size_t at = 0;
      if (i == 0 && strip_first_ && t.compare(0, replacement_.size(), replacement_) == 0)
        at = replacement_.size();
      for (size_t hit; (hit = t.find(replacement_, at)) != std::string::npos;
           at = hit + replacement_.size()) {
        out.append(t, at, hit - at);
        out += ' ';
      }
      out.append(t, at, std::string::npos);
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class ReplaceDecoder : public Decoder {
 public:
  explicit ReplaceDecoder(const JsonNode& n) : content_(n.str("content")) {
    JsonNode pat = n.at("pattern");
    pat.expect_object();
    if (pat.has("String"))
      regex_ = std::make_unique<Regex>(Regex::quote(pat.str("String")), pat.where());
    else if (pat.has("Regex"))
      regex_ = std::make_unique<Regex>(pat.str("Regex"), pat.where() + ".Regex");
    else
      pat.fail("should hold \"String\" or \"Regex\"");
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<Span> matches = regex_->find_all(t);
      if (matches.empty()) continue;
      std::string out;
      uint32_t at = 0;
      for (Span m : matches) {
        out.append(t, at, m.first - at);
        out += content_;
        at = m.second;
      }
      out.append(t, at, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

// "<0x0A>" -> 0x0A; -1 for any other token.
int byte_token_value(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; k++) {
    char c = t[k];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                   : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string bytes, text;
    auto flush = [&] {
      if (bytes.empty()) return;
      if (utf8_lossy(bytes, text)) {
        out.push_back(text);
      } else {  // as HF: one U+FFFD per byte when the run is not valid UTF-8
        std::string bad;
        for (size_t k = 0; k < bytes.size(); k++) bad += kReplacementChar;
        out.push_back(std::move(bad));
      }
      bytes.clear();
    };
    for (std::string& t : tokens) {
      int v = byte_token_value(t);
      if (v >= 0) {
        bytes += static_cast<char>(v);
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder : public Decoder {
 public:
  explicit StripDecoder(const JsonNode& n)
      : content_(n.str("content")), start_(n.integer_or("start", 0)), stop_(n.integer_or("stop", 0)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      size_t begin = 0, end = t.size();
      for (int64_t k = 0; k < start_ && t.compare(begin, content_.size(), content_) == 0 && begin < end; k++)
        begin += content_.size();
      for (int64_t k = 0; k < stop_ && end >= begin + content_.size() &&
                          t.compare(end - content_.size(), content_.size(), content_) == 0;
           k++)
        end -= content_.size();
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  int64_t start_, stop_;
};

class SequenceDecoder : public Sequence<Decoder> {
 public:
  explicit SequenceDecoder(const JsonNode& n) : Sequence(n, "decoders") {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    each([&](const Decoder& part) { part.decode_chain(tokens); });
  }
};

}  // namespace

std::unique_ptr<Decoder> Decoder::create(const JsonNode& n) {
  static const PartMaker<Decoder> kDecoders[] = {{"ByteLevel", make_part<Decoder, ByteLevelDecoder>},
                                                 {"Metaspace", make_part<Decoder, MetaspaceDecoder>},
                                                 {"Replace", make_part<Decoder, ReplaceDecoder>},
                                                 {"ByteFallback", make_part<Decoder, ByteFallbackDecoder>},
                                                 {"Fuse", make_part<Decoder, FuseDecoder>},
                                                 {"Strip", make_part<Decoder, StripDecoder>},
                                                 {"Sequence", make_part<Decoder, SequenceDecoder>}};
  return create_part(n, kDecoders);
}

}  // namespace luatune
