// Added tokens (special or not) are found in the text before the normalizer and the model see
// it: a byte trie over their contents gives, at each position, the longest token starting there
// (so leftmost, then longest, like HF's Aho-Corasick search), then single_word, lstrip and rstrip
// are applied. What is left between tokens is plain text for the normal pipeline.
#include "host/text/tokenizer_parts.h"

namespace luatune {

namespace {

// The code point that ends just before `at` (at > 0).
char32_t char_before(std::string_view s, size_t at) {
  size_t start = at - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) start--;
  return utf8_next(s, start);
}

bool is_word_char(char32_t c) {
  return c == '_' || unicode_is_alnum(c);
}

}  // namespace

void AddedTokenMatcher::build(const std::vector<const AddedToken*>& tokens) {
  nodes_.assign(1, Node{});
  tokens_ = tokens;
  first_byte_.fill(false);
  for (size_t t = 0; t < tokens.size(); t++) {
    const std::string& s = tokens[t]->content;
    if (s.empty()) continue;
    first_byte_[static_cast<uint8_t>(s[0])] = true;
    int32_t node = 0;
    for (char ch : s) {
      auto b = static_cast<uint8_t>(ch);
      auto& next = nodes_[node].next;
      auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t{-1}));
      if (it != next.end() && it->first == b) {
        node = it->second;
      } else {
        int32_t child = static_cast<int32_t>(nodes_.size());
        next.insert(it, {b, child});
        nodes_.emplace_back();  // invalidates `next`; not used again below
        node = child;
      }
    }
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(t);  // first definition wins
  }
}

std::vector<Segment> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<Segment> out;
  const uint32_t n = static_cast<uint32_t>(text.size());
  uint32_t plain_start = 0, pos = 0;
  while (pos < n) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      pos++;
      continue;
    }
    // Longest token starting at pos.
    int32_t node = 0, found = -1;
    uint32_t found_end = 0;
    for (uint32_t i = pos; i < n; i++) {
      const auto& next = nodes_[node].next;
      auto b = static_cast<uint8_t>(text[i]);
      auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(b, int32_t{-1}));
      if (it == next.end() || it->first != b) break;
      node = it->second;
      if (nodes_[node].token >= 0) found = nodes_[node].token, found_end = i + 1;
    }
    if (found < 0) {
      pos++;
      continue;
    }
    const AddedToken& tok = *tokens_[found];
    uint32_t start = pos, end = found_end;
    if (tok.single_word) {
      bool alone_left = start == 0 || !is_word_char(char_before(text, start));
      size_t k = end;
      bool alone_right = end == n || !is_word_char(utf8_next(text, k));
      if (!alone_left || !alone_right) {  // not a word of its own: skip past it, as HF does
        pos = end;
        continue;
      }
    }
    if (tok.lstrip) {  // swallow whitespace before it, but not text an earlier token took
      while (start > plain_start) {
        size_t before = start - 1;
        while (before > 0 && (static_cast<unsigned char>(text[before]) & 0xC0) == 0x80) before--;
        if (!unicode_is_whitespace(char_before(text, start))) break;
        start = static_cast<uint32_t>(before);
      }
    }
    if (tok.rstrip) {
      while (end < n) {
        size_t k = end;
        if (!unicode_is_whitespace(utf8_next(text, k))) break;
        end = static_cast<uint32_t>(k);
      }
    }
    if (start > plain_start) out.push_back({-1, plain_start, start});
    out.push_back({tok.id, start, end});
    plain_start = pos = end;
  }
  if (plain_start < n) out.push_back({-1, plain_start, n});
  return out;
}

}  // namespace luatune
