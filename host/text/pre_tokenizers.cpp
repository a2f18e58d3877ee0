// Pre-tokenizers from tokenizer.json: ByteLevel, Split (String or Regex; the five delimiter
// behaviours; invert), Metaspace, Sequence, Digits, Punctuation, Whitespace and WhitespaceSplit.
// They cut a Piece into the words the model sees, keeping each byte's source range.
#include "host/core/error.h"
#include "host/text/tokenizer_parts.h"

namespace luatune {

// ============================================================================================
// Splitting a piece at delimiter matches, as HF's NormalizedString::split does.

void split_piece(const Piece& p, const std::vector<Span>& matches, SplitBehavior behavior, bool invert,
                 std::vector<Piece>& out) {
  struct Part {
    uint32_t begin, end;
    bool match;
  };
  // The whole text as alternating non-match / match parts.
  std::vector<Part> parts;
  uint32_t at = 0, size = static_cast<uint32_t>(p.text.size());
  for (Span m : matches) {
    if (at < m.first) parts.push_back({at, m.first, invert});
    parts.push_back({m.first, m.second, !invert});
    at = m.second;
  }
  if (at < size) parts.push_back({at, size, invert});

  std::vector<Part> kept;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::removed:
      for (const Part& x : parts)
        if (!x.match) kept.push_back(x);
      break;
    case SplitBehavior::isolated:
      kept = parts;
      break;
    case SplitBehavior::merged_with_previous:
      for (const Part& x : parts) {
        if (x.match && !previous_match && !kept.empty())
          kept.back().end = x.end;
        else
          kept.push_back(x);
        previous_match = x.match;
      }
      break;
    case SplitBehavior::merged_with_next:
      for (size_t i = parts.size(); i-- > 0;) {
        const Part& x = parts[i];
        if (x.match && !previous_match && !kept.empty())
          kept.back().begin = x.begin;
        else
          kept.push_back(x);
        previous_match = x.match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case SplitBehavior::contiguous:
      for (const Part& x : parts) {
        if (x.match == previous_match && !kept.empty())
          kept.back().end = x.end;
        else
          kept.push_back(x);
        previous_match = x.match;
      }
      break;
  }
  for (const Part& x : kept)
    if (x.end > x.begin) out.push_back(p.slice(x.begin, x.end));
}

namespace {

// Applies `fn(piece, out)` to every piece, replacing the list with what fn produced.
template <class Fn>
void for_each_piece(std::vector<Piece>& pieces, Fn&& fn) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (Piece& p : pieces) fn(p, out);
  pieces = std::move(out);
}

SplitBehavior parse_behavior(const JsonNode& n) {
  std::string b = n.str("behavior");
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  n.at("behavior")
      .fail("\"" + b +
            "\" is not a split behavior (expected Removed, Isolated, MergedWithPrevious, "
            "MergedWithNext or Contiguous)");
}

// A pre-tokenizer that splits at the matches of one regex.
class RegexSplit : public PreTokenizer {
 public:
  RegexSplit(const std::string& pattern, const std::string& where, SplitBehavior behavior, bool invert)
      : regex_(pattern, where), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for_each_piece(pieces, [&](Piece& p, std::vector<Piece>& out) {
      split_piece(p, regex_.find_all(p.text), behavior_, invert_, out);
    });
  }

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

std::unique_ptr<PreTokenizer> create_split(const JsonNode& n) {
  JsonNode pat = n.at("pattern");
  pat.expect_object();
  std::string pattern;
  if (pat.has("String"))
    pattern = Regex::quote(pat.str("String"));
  else if (pat.has("Regex"))
    pattern = pat.str("Regex");
  else
    pat.fail("should hold \"String\" or \"Regex\"");
  return std::make_unique<RegexSplit>(pattern, pat.where(), parse_behavior(n), n.boolean_or("invert", false));
}

// The pre-tokenizers that are one fixed regex: Digits, Punctuation, Whitespace and WhitespaceSplit.
std::unique_ptr<PreTokenizer> create_digits(const JsonNode& n) {
  SplitBehavior b =
      n.boolean_or("individual_digits", false) ? SplitBehavior::isolated : SplitBehavior::contiguous;
  return std::make_unique<RegexSplit>(R"(\p{N})", n.where(), b, false);
}
std::unique_ptr<PreTokenizer> create_punctuation(const JsonNode& n) {
  SplitBehavior b = n.has("behavior") ? parse_behavior(n) : SplitBehavior::isolated;
  return std::make_unique<RegexSplit>(R"([\p{P}!-/:-@\[-`{-~])", n.where(), b, false);
}
std::unique_ptr<PreTokenizer> create_whitespace(const JsonNode& n) {
  return std::make_unique<RegexSplit>(R"(\w+|[^\w\s]+)", n.where(), SplitBehavior::removed, true);
}
std::unique_ptr<PreTokenizer> create_whitespace_split(const JsonNode& n) {
  return std::make_unique<RegexSplit>(R"(\s+)", n.where(), SplitBehavior::removed, false);
}

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  explicit ByteLevelPreTokenizer(const JsonNode& n)
      : add_prefix_space_(n.boolean_or("add_prefix_space", true)) {
    if (n.boolean_or("use_regex", true))
      regex_ = std::make_unique<Regex>(byte_level_gpt2_pattern(), n.where());
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for_each_piece(pieces, [&](Piece& p, std::vector<Piece>& out) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) {
        Piece q;
        q.append(" ",
                 p.source_range(0, p.text.empty() ? 0 : utf8_len(static_cast<unsigned char>(p.text[0]))));
        q.append_from(p, 0, p.text.size());
        p = std::move(q);
      }
      size_t first = out.size();
      if (regex_)
        split_piece(p, regex_->find_all(p.text), SplitBehavior::isolated, false, out);
      else if (!p.text.empty())
        out.push_back(std::move(p));
      for (size_t i = first; i < out.size(); i++) byte_level_map(out[i]);
    });
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  enum class Prepend { always, first, never };
  explicit MetaspacePreTokenizer(const JsonNode& n)
      : replacement_(n.str_or("replacement", "\xE2\x96\x81")), split_(n.boolean_or("split", true)) {
    if (n.has("prepend_scheme")) {
      std::string s = n.str("prepend_scheme");
      if (s == "always")
        prepend_ = Prepend::always;
      else if (s == "first")
        prepend_ = Prepend::first;
      else if (s == "never")
        prepend_ = Prepend::never;
      else
        n.at("prepend_scheme")
            .fail("\"" + s + "\" is not a prepend scheme (expected always, first or never)");
    } else {
      prepend_ = n.boolean_or("add_prefix_space", true) ? Prepend::always : Prepend::never;  // legacy form
    }
    LT_CHECK(!replacement_.empty(), n.where() << ".replacement should not be empty");
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for_each_piece(pieces, [&](Piece& p, std::vector<Piece>& out) {
      Piece q;
      bool starts = p.text.compare(0, replacement_.size(), replacement_) == 0;
      bool at_start = p.src.empty() || p.src[0].first == 0;
      if (!starts && !p.text.empty() &&
          (prepend_ == Prepend::always || (prepend_ == Prepend::first && at_start)))
        q.append(replacement_, p.source_range(0, utf8_len(static_cast<unsigned char>(p.text[0]))));
      for (size_t i = 0; i < p.text.size(); i++) {
        if (p.text[i] == ' ')
          q.append(replacement_, p.src[i]);
        else
          q.append_from(p, i, i + 1);
      }
      if (!split_) {
        if (!q.text.empty()) out.push_back(std::move(q));
        return;
      }
      std::vector<Span> matches;
      for (size_t at = q.text.find(replacement_); at != std::string::npos;
           at = q.text.find(replacement_, at + replacement_.size()))
        matches.push_back({static_cast<uint32_t>(at), static_cast<uint32_t>(at + replacement_.size())});
      split_piece(q, matches, SplitBehavior::merged_with_next, false, out);
    });
  }

 private:
  std::string replacement_;
  bool split_;
  Prepend prepend_ = Prepend::always;
};

class SequencePreTokenizer : public Sequence<PreTokenizer> {
 public:
  explicit SequencePreTokenizer(const JsonNode& n) : Sequence(n, "pretokenizers") {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    each([&](const PreTokenizer& part) { part.pre_tokenize(pieces); });
  }
};

}  // namespace

std::unique_ptr<PreTokenizer> PreTokenizer::create(const JsonNode& n) {
  static const PartMaker<PreTokenizer> kPreTokenizers[] = {
      {"ByteLevel", make_part<PreTokenizer, ByteLevelPreTokenizer>},
      {"Split", create_split},
      {"Metaspace", make_part<PreTokenizer, MetaspacePreTokenizer>},
      {"Sequence", make_part<PreTokenizer, SequencePreTokenizer>},
      {"Digits", create_digits},
      {"Punctuation", create_punctuation},
      {"Whitespace", create_whitespace},
      {"WhitespaceSplit", create_whitespace_split}};
  return create_part(n, kPreTokenizers);
}

}  // namespace luatune
