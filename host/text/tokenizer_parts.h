// The pieces a Tokenizer is built from, shared by the files under host/text/ (not a public API):
// text with per-byte source offsets, UTF-8 and Unicode helpers, the PCRE2 regex wrapper, the JSON
// reader that names the failing path, and the normalizer / pre-tokenizer / model / post-processor /
// decoder components a tokenizer.json describes.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "host/text/tokenizer.h"

namespace luatune {

using Span = std::pair<uint32_t, uint32_t>;  // half-open byte range [first, second)

// ============================================================================================
// Text with provenance: text[i] came from bytes src[i] of the original input. Normalizers and
// pre-tokenizers rewrite both together so token offsets map back exactly.

struct Piece {
  std::string text;
  std::vector<Span> src;  // one per byte of text

  static Piece of_original(std::string_view text, uint32_t base);  // src[i] = {base+i, base+i+1}
  Piece slice(size_t begin, size_t end) const;
  Span source_range(size_t begin, size_t end) const;  // original range covered by text[begin, end)
  void append(std::string_view s, Span from);         // every new byte comes from `from`
  void append_from(const Piece& p, size_t begin, size_t end);
};

// ============================================================================================
// UTF-8 and Unicode (host/text/unicode.cpp; Unicode data from utf8proc and PCRE2, no own tables)

// Length of the UTF-8 sequence starting with byte b (1 for invalid lead bytes).
inline size_t utf8_len(unsigned char b) {
  return b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
}
// Decodes the code point at s[i] (s is valid UTF-8) and advances i.
char32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, char32_t cp);
// Bytes -> text, each maximal ill-formed subsequence replaced by U+FFFD (Rust's from_utf8_lossy,
// the WHATWG decoder). Returns true if `bytes` was valid already.
bool utf8_lossy(std::string_view bytes, std::string& out);
// The offset of the first byte that is not part of valid UTF-8, or npos when all of it is valid.
size_t utf8_invalid_at(std::string_view bytes);
bool unicode_is_whitespace(char32_t c);  // the White_Space property
bool unicode_is_alnum(char32_t c);       // letters and numbers (L*, N*)
char32_t unicode_lower(char32_t c);
enum class UnicodeForm { nfc, nfd, nfkc, nfkd };
// Normalizes `s`; returns false (leaving out empty) when `s` is already normalized that way.
bool unicode_normalize(std::string_view s, UnicodeForm form, std::string& out);

// ============================================================================================
// PCRE2 with UTF and UCP, JIT-compiled when available (host/text/regex.cpp). Thread-safe: match
// data is per call.

class Regex {
 public:
  // `where` names the pattern in errors (file and JSON path).
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Every non-overlapping match in `s` as byte ranges, left to right (empty matches skipped).
  std::vector<Span> find_all(std::string_view s) const;
  static std::string quote(std::string_view literal);  // a pattern matching `literal` exactly

 private:
  void* code_ = nullptr;  // pcre2_code*
};

// ============================================================================================
// Reading tokenizer.json: each node knows its file and JSON path, so errors read
// "tokenizer.json: pre_tokenizer.pretokenizers[1].type \"X\" is not supported (supported: ...)".

class JsonNode {
 public:
  JsonNode(const nlohmann::json& j, std::string file, std::string path)
      : j_(&j), file_(std::move(file)), path_(std::move(path)) {}
  const nlohmann::json& json() const { return *j_; }
  const std::string& path() const { return path_; }
  std::string where() const { return file_ + ": " + path_; }
  bool has(const char* key) const;      // present and not null
  JsonNode at(const char* key) const;   // must be present and not null
  JsonNode get(const char* key) const;  // a null node when absent
  JsonNode at(size_t i) const;
  size_t size() const;  // of an array
  std::string str(const char* key) const;
  std::string str_or(const char* key, const std::string& def) const;
  bool boolean_or(const char* key, bool def) const;
  int64_t integer(const char* key) const;
  int64_t integer_or(const char* key, int64_t def) const;
  std::string type() const;                                                        // the "type" field
  [[noreturn]] void fail(const std::string& what) const;                           // "file: path what"
  [[noreturn]] void unsupported(const std::vector<std::string>& supported) const;  // on its type
  void expect_array() const;
  void expect_object() const;

 private:
  const nlohmann::json* j_;
  std::string file_, path_;
};

// ============================================================================================
// Components. Each `create` reads one JSON node (which may be null for "none").

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(Piece& p) const = 0;
  static std::unique_ptr<Normalizer> create(const JsonNode& n);  // host/text/normalizers.cpp
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits/rewrites each piece of `pieces` in place (a piece may become several).
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
  static std::unique_ptr<PreTokenizer> create(const JsonNode& n);  // host/text/pre_tokenizers.cpp
};

// How a split delimiter is kept (HF SplitDelimiterBehavior).
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };
// Splits `p` at the given delimiter matches (sorted, non-overlapping byte ranges of p.text).
void split_piece(const Piece& p, const std::vector<Span>& matches, SplitBehavior behavior, bool invert,
                 std::vector<Piece>& out);

// A token the model produced for a piece: its id and byte range within the piece's text.
struct ModelToken {
  int32_t id;
  uint32_t begin, end;
};

// Open-addressing hash tables for the BPE model (host/text/bpe.cpp): a flat array of slots and
// linear probing, no allocation per entry, so building 500k merges and looking them up is cheap.
class TokenTable {  // token text -> id; the texts themselves stay in the model's id -> token list
 public:
  void build(const std::vector<std::string>& tokens);  // empty strings are left out
  int32_t find(std::string_view s, const std::vector<std::string>& tokens) const;  // -1 if absent

 private:
  struct Slot {
    uint32_t hash;
    int32_t id;  // -1: empty
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

class MergeTable {  // (left id, right id) -> (rank, merged id)
 public:
  struct Entry {
    uint64_t key;  // left << 32 | right; kEmpty for a free slot
    int32_t rank, id;
  };
  void reserve(size_t n);
  void insert(int32_t left, int32_t right, int32_t rank, int32_t id);  // a later duplicate wins
  const Entry* find(int32_t left, int32_t right) const;                // nullptr if absent

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  std::vector<Entry> slots_;
  size_t mask_ = 0, size_ = 0;
};

// model.vocab and model.merges as lists, filled while reading the file (tokenizer_json.cpp) or
// from the JSON tree.
struct BpeData {
  struct Merge {
    std::string a, b;
    bool legacy = false;  // a holds an "a b" string
  };
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<Merge> merges;
  bool streamed_vocab = false, streamed_merges = false;  // taken out of the tree while reading
};
// Parses tokenizer.json text, streaming model.vocab/merges into `bpe`; fails naming `path` if the
// text is not JSON.
nlohmann::json tokenizer_json_parse(const std::string& path, const std::string& text, BpeData& bpe);

class BpeModel {  // host/text/bpe.cpp
 public:
  BpeModel(const JsonNode& model, BpeData data);
  void tokenize(std::string_view word, std::vector<ModelToken>& out) const;
  int32_t size() const { return static_cast<int32_t>(id_to_token_.size()); }
  int32_t token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;
  int32_t unk_id() const { return unk_id_; }

 private:
  void merge_word(std::string_view word, std::vector<ModelToken>& out) const;
  static void read_vocab(const JsonNode& vocab, BpeData& data);
  static void read_merges(const JsonNode& merges, BpeData& data);
  TokenTable vocab_;
  std::vector<std::string> id_to_token_;
  MergeTable merges_;
  std::array<int32_t, 256> byte_ids_;  // "<0xAB>" ids for byte_fallback, -1 when absent
  int32_t unk_id_ = -1;
  std::string unk_token_, continuing_prefix_, end_suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;

  // Word cache: pre-token -> its tokens (end offsets only). Sharded so threads rarely contend.
  struct CachedToken {
    int32_t id;
    uint32_t end;
  };
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<CachedToken>> map;
  };
  static constexpr size_t kShards = 16, kShardCapacity = 8192, kMaxCachedWord = 256;
  mutable std::array<Shard, kShards> cache_;
};

// The text of token `id` (model vocab or added token), for components that look at token text.
using TokenText = std::function<std::string_view(int32_t id)>;

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Rewrites an encoding of one sequence; add_special says whether to add BOS/EOS and the like.
  virtual void process(Encoding& e, bool add_special, const TokenText& text) const = 0;
  static std::unique_ptr<PostProcessor> create(const JsonNode& n);  // host/text/post_processor.cpp
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  static std::unique_ptr<Decoder> create(const JsonNode& n);  // host/text/decoders.cpp
};

// A "Sequence" component's parts: the array under `key` ("normalizers", "pretokenizers",
// "processors" or "decoders"), each entry built by T::create; a null entry gives nullptr, which
// the Sequence skips.
template <class T>
std::vector<std::unique_ptr<T>> sequence_parts(const JsonNode& n, const char* key) {
  JsonNode list = n.at(key);
  std::vector<std::unique_ptr<T>> parts;
  for (size_t i = 0; i < list.size(); i++) parts.push_back(T::create(list.at(i)));
  return parts;
}

// The base of each kind's Sequence, which overrides T's one method to call it on every part
// through each().
template <class T>
class Sequence : public T {
 public:
  Sequence(const JsonNode& n, const char* key) : parts_(sequence_parts<T>(n, key)) {}

 protected:
  template <class F>
  void each(F f) const {
    for (const std::unique_ptr<T>& part : parts_)
      if (part) f(*part);
  }

 private:
  std::vector<std::unique_ptr<T>> parts_;
};

// One row of a component's `create`: the "type" it reads and how that type is built from its node.
template <class T>
struct PartMaker {
  const char* type;
  std::unique_ptr<T> (*make)(const JsonNode& n);
};

// Builds a Part from its node, or from nothing when its constructor takes no arguments.
template <class T, class Part>
std::unique_ptr<T> make_part(const JsonNode& n) {
  if constexpr (std::is_constructible<Part, const JsonNode&>::value)
    return std::make_unique<Part>(n);
  else
    return std::make_unique<Part>();
}

// The component that node `n` describes (nullptr for a null node), built by the row of `makers`
// its "type" names; any other type fails naming the supported ones in the rows' order.
template <class T, size_t N>
std::unique_ptr<T> create_part(const JsonNode& n, const PartMaker<T> (&makers)[N]) {
  if (n.json().is_null()) return nullptr;
  const std::string type = n.type();
  std::vector<std::string> supported;
  for (const PartMaker<T>& m : makers) {
    if (type == m.type) return m.make(n);
    supported.push_back(m.type);
  }
  n.unsupported(supported);
}

// ============================================================================================
// Byte-level (GPT-2) alphabet (host/text/byte_level.cpp)

const std::string& byte_level_char(uint8_t b);  // the UTF-8 text of the char byte b maps to
// Maps each char of `token` back to its byte; false if a char is not in the alphabet.
bool byte_level_unmap(std::string_view token, std::string& bytes);
// Rewrites p byte by byte into the alphabet (each new char keeps its byte's source range).
void byte_level_map(Piece& p);
const char* byte_level_gpt2_pattern();

// ============================================================================================
// Added tokens (host/text/added_tokens.cpp)

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// One segment of text after splitting out added tokens: either a token (id >= 0) or plain text.
struct Segment {
  int32_t id;  // -1 for plain text
  uint32_t begin, end;
};

// Finds added tokens in text: leftmost, then longest match; single_word/lstrip/rstrip honoured.
class AddedTokenMatcher {
 public:
  void build(const std::vector<const AddedToken*>& tokens);
  bool empty() const { return nodes_.size() <= 1; }
  std::vector<Segment> split(std::string_view text) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
    int32_t token = -1;                             // index into tokens_ when a token ends here
  };
  std::vector<Node> nodes_{Node{}};
  std::vector<const AddedToken*> tokens_;
  std::array<bool, 256> first_byte_{};
};

}  // namespace luatune
