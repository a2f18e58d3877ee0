// Post-processors from tokenizer.json: TemplateProcessing (the single-sequence template; BOS/EOS
// come from here when special tokens are requested), ByteLevel (ids unchanged; trims whitespace
// from offsets when trim_offsets is set) and Sequence.
#include "host/core/error.h"
#include "host/text/tokenizer_parts.h"

namespace luatune {

namespace {

class TemplateProcessor : public PostProcessor {
 public:
  explicit TemplateProcessor(const JsonNode& n) {
    JsonNode single = n.at("single");
    for (size_t i = 0; i < single.size(); i++) {
      JsonNode item = single.at(i);
      item.expect_object();
      if (item.has("Sequence")) {
        std::string id = item.at("Sequence").str("id");
        if (id != "A")
          item.at("Sequence")
              .at("id")
              .fail("is \"" + id + "\"; a single-sequence template can only use \"A\"");
        items_.push_back({true, {}});
      } else if (item.has("SpecialToken")) {
        std::string name = item.at("SpecialToken").str("id");
        JsonNode def = n.at("special_tokens");
        if (!def.json().contains(name))
          item.at("SpecialToken").at("id").fail("names \"" + name + "\", which is not in special_tokens");
        JsonNode ids = def.at(name.c_str()).at("ids");
        Item it{false, {}};
        for (size_t k = 0; k < ids.size(); k++) {
          const nlohmann::json& v = ids.at(k).json();
          if (!v.is_number_integer()) ids.at(k).fail("should be an integer token id");
          it.ids.push_back(v.get<int32_t>());
        }
        items_.push_back(std::move(it));
      } else {
        item.fail("should hold \"Sequence\" or \"SpecialToken\"");
      }
    }
  }
  void process(Encoding& e, bool add_special, const TokenText&) const override {
    if (!add_special) return;
    Encoding out;
    for (const Item& it : items_) {
      if (it.sequence) {
        out.ids.insert(out.ids.end(), e.ids.begin(), e.ids.end());
        out.offsets.insert(out.offsets.end(), e.offsets.begin(), e.offsets.end());
        continue;
      }
      // Added tokens sit at an empty range where they were inserted.
      uint32_t at = !out.offsets.empty() ? out.offsets.back().second
                    : !e.offsets.empty() ? e.offsets.front().first
                                         : 0;
      for (int32_t id : it.ids) {
        out.ids.push_back(id);
        out.offsets.push_back({at, at});
      }
    }
    e = std::move(out);
  }

 private:
  struct Item {
    bool sequence;
    std::vector<int32_t> ids;
  };
  std::vector<Item> items_;
};

class ByteLevelProcessor : public PostProcessor {
 public:
  explicit ByteLevelProcessor(const JsonNode& n)
      : trim_offsets_(n.boolean_or("trim_offsets", true)),
        add_prefix_space_(n.boolean_or("add_prefix_space", true)) {}
  void process(Encoding& e, bool, const TokenText& text) const override {
    if (!trim_offsets_) return;
    const std::string& space = byte_level_char(' ');
    for (size_t i = 0; i < e.ids.size(); i++) {
      std::string_view t = text(e.ids[i]);
      auto is_space = [&](std::string_view s, size_t at, size_t& len) {
        size_t k = at;
        if (s.compare(at, space.size(), space) == 0) return len = space.size(), true;
        char32_t c = utf8_next(s, k);
        len = k - at;
        return unicode_is_whitespace(c);
      };
      uint32_t leading = 0, trailing = 0;
      size_t len = 0;
      for (size_t at = 0; at < t.size() && is_space(t, at, len); at += len) leading++;
      // Trailing: walk back over whole characters.
      for (size_t end = t.size(); end > 0;) {
        size_t start = end - 1;
        while (start > 0 && (static_cast<unsigned char>(t[start]) & 0xC0) == 0x80) start--;
        if (!is_space(t, start, len)) break;
        trailing++;
        end = start;
      }
      Span& o = e.offsets[i];
      if (leading > 0) {
        bool first = i == 0 || o.first == 0;
        if (!(first && add_prefix_space_ && leading == 1)) o.first = std::min(o.first + leading, o.second);
      }
      if (trailing > 0 && o.second >= trailing) o.second = std::max(o.second - trailing, o.first);
    }
  }

 private:
  bool trim_offsets_, add_prefix_space_;
};

class SequenceProcessor : public Sequence<PostProcessor> {
 public:
  explicit SequenceProcessor(const JsonNode& n) : Sequence(n, "processors") {}
  void process(Encoding& e, bool add_special, const TokenText& text) const override {
    each([&](const PostProcessor& part) { part.process(e, add_special, text); });
  }
};

}  // namespace

std::unique_ptr<PostProcessor> PostProcessor::create(const JsonNode& n) {
  static const PartMaker<PostProcessor> kProcessors[] = {
      {"TemplateProcessing", make_part<PostProcessor, TemplateProcessor>},
      {"ByteLevel", make_part<PostProcessor, ByteLevelProcessor>},
      {"Sequence", make_part<PostProcessor, SequenceProcessor>}};
  return create_part(n, kProcessors);
}

}  // namespace luatune
