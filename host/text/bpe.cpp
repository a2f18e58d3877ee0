// The BPE model of tokenizer.json: vocab, merges (as pairs or as "a b" strings) and their ranks,
// ignore_merges, byte_fallback, unk/fuse_unk, continuing_subword_prefix and end_of_word_suffix.
// A word is split into characters, then the lowest-ranked adjacent pair (leftmost on ties) is
// merged until none applies, with a priority queue. Results are cached per word in a sharded map.
#include <cstdio>
#include <queue>

#include "host/core/error.h"
#include "host/text/tokenizer_parts.h"

namespace luatune {

// ============================================================================================
// Hash tables

namespace {
uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
uint64_t mix(uint64_t x) {  // a 64-bit finalizer (splitmix64), so nearby id pairs spread out
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
size_t table_size(size_t n) {  // a power of two at most half full
  size_t size = 16;
  while (size < 2 * n) size <<= 1;
  return size;
}
}  // namespace

void TokenTable::build(const std::vector<std::string>& tokens) {
  slots_.assign(table_size(tokens.size()), Slot{0, -1});
  mask_ = slots_.size() - 1;
  for (size_t id = 0; id < tokens.size(); id++) {
    if (tokens[id].empty()) continue;
    uint64_t h = std::hash<std::string_view>()(tokens[id]);
    size_t i = h & mask_;
    while (slots_[i].id >= 0) i = (i + 1) & mask_;
    slots_[i] = {static_cast<uint32_t>(h >> 32), static_cast<int32_t>(id)};
  }
}

int32_t TokenTable::find(std::string_view s, const std::vector<std::string>& tokens) const {
  if (slots_.empty()) return -1;
  uint64_t h = std::hash<std::string_view>()(s);
  auto tag = static_cast<uint32_t>(h >> 32);
  for (size_t i = h & mask_; slots_[i].id >= 0; i = (i + 1) & mask_)
    if (slots_[i].hash == tag && tokens[slots_[i].id] == s) return slots_[i].id;
  return -1;
}

void MergeTable::reserve(size_t n) {
  slots_.assign(table_size(n), Entry{kEmpty, 0, 0});
  mask_ = slots_.size() - 1;
  size_ = 0;
}

void MergeTable::insert(int32_t left, int32_t right, int32_t rank, int32_t id) {
  if (2 * (size_ + 1) > slots_.size()) {  // grow: re-insert everything into a table twice as big
    std::vector<Entry> old = std::move(slots_);
    reserve(std::max<size_t>(old.size(), 8));
    for (const Entry& e : old)
      if (e.key != kEmpty)
        insert(static_cast<int32_t>(e.key >> 32), static_cast<int32_t>(e.key & 0xFFFFFFFF), e.rank, e.id);
  }
  uint64_t key = pair_key(left, right);
  size_t i = mix(key) & mask_;
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
  if (slots_[i].key == kEmpty) size_++;
  slots_[i] = {key, rank, id};
}

const MergeTable::Entry* MergeTable::find(int32_t left, int32_t right) const {
  if (slots_.empty()) return nullptr;
  uint64_t key = pair_key(left, right);
  for (size_t i = mix(key) & mask_; slots_[i].key != kEmpty; i = (i + 1) & mask_)
    if (slots_[i].key == key) return &slots_[i];
  return nullptr;
}

// ============================================================================================
// Loading

// model.vocab and model.merges from the JSON tree (when the streaming reader did not take them).
void BpeModel::read_vocab(const JsonNode& vocab, BpeData& data) {
  vocab.expect_object();
  data.vocab.reserve(vocab.json().size());
  for (const auto& [token, id] : vocab.json().items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      fail(vocab.where() + "[\"" + token + "\"] should be a non-negative integer id, got " + id.dump());
    data.vocab.emplace_back(token, id.get<int64_t>());
  }
}

void BpeModel::read_merges(const JsonNode& merges, BpeData& data) {
  size_t n = merges.size();
  data.merges.reserve(n);
  for (size_t i = 0; i < n; i++) {
    const nlohmann::json& m = merges.json()[i];
    if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
      data.merges.push_back({m[0].get<std::string>(), m[1].get<std::string>(), false});
    else if (m.is_string())
      data.merges.push_back({m.get<std::string>(), "", true});
    else
      merges.at(i).fail("should be a pair of strings or an \"a b\" string, got " + m.dump());
  }
}

BpeModel::BpeModel(const JsonNode& model, BpeData data) {
  if (model.has("dropout")) {
    const nlohmann::json& d = model.at("dropout").json();
    if (!(d.is_number() && d.get<double>() == 0.0))
      model.at("dropout").fail("is " + d.dump() + "; BPE dropout is not supported (expected null or 0)");
  }
  unk_token_ = model.str_or("unk_token", "");
  continuing_prefix_ = model.str_or("continuing_subword_prefix", "");
  end_suffix_ = model.str_or("end_of_word_suffix", "");
  fuse_unk_ = model.boolean_or("fuse_unk", false);
  byte_fallback_ = model.boolean_or("byte_fallback", false);
  ignore_merges_ = model.boolean_or("ignore_merges", false);

  if (!data.streamed_vocab) read_vocab(model.at("vocab"), data);
  if (!data.streamed_merges) read_merges(model.at("merges"), data);

  int64_t max_id = -1;
  for (const auto& entry : data.vocab) max_id = std::max(max_id, entry.second);
  id_to_token_.resize(static_cast<size_t>(max_id + 1));
  for (auto& [token, id] : data.vocab) id_to_token_[static_cast<size_t>(id)] = std::move(token);
  vocab_.build(id_to_token_);

  // Merges: rank = position in the list; the merged token must be in the vocab too.
  merges_.reserve(data.merges.size());
  std::string merged;
  std::string where = model.where() + ".merges";
  for (size_t i = 0; i < data.merges.size(); i++) {
    const BpeData::Merge& m = data.merges[i];
    std::string_view a = m.a, b = m.b;
    std::string at = where + "[" + std::to_string(i) + "]";
    if (m.legacy) {  // "a b"
      if (a.substr(0, 8) == "#version") continue;
      size_t space = a.find(' ');
      LT_CHECK(space != std::string::npos && a.find(' ', space + 1) == std::string::npos,
               at << " is \"" << m.a << "\"; a merge string should be two tokens separated by one space");
      b = a.substr(space + 1);
      a = a.substr(0, space);
    }
    int32_t ia = token_to_id(a), ib = token_to_id(b);
    std::string_view b_rest = b;
    if (!continuing_prefix_.empty() && b_rest.substr(0, continuing_prefix_.size()) == continuing_prefix_)
      b_rest.remove_prefix(continuing_prefix_.size());
    merged.assign(a);
    merged += b_rest;
    int32_t im = token_to_id(merged);
    LT_CHECK(ia >= 0 && ib >= 0 && im >= 0, at << " merges \"" << a << "\" and \"" << b << "\" but \""
                                               << (ia < 0   ? a
                                                   : ib < 0 ? b
                                                            : std::string_view(merged))
                                               << "\" is not in model.vocab");
    merges_.insert(ia, ib, static_cast<int32_t>(i), im);
  }

  byte_ids_.fill(-1);
  if (byte_fallback_) {
    char name[8];
    for (int b = 0; b < 256; b++) {
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      byte_ids_[b] = token_to_id(name);
    }
  }
  if (!unk_token_.empty()) {
    unk_id_ = token_to_id(unk_token_);
    LT_CHECK(unk_id_ >= 0, model.where() << ".unk_token \"" << unk_token_ << "\" is not in model.vocab");
  }
}

int32_t BpeModel::token_to_id(std::string_view token) const {
  return vocab_.find(token, id_to_token_);
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= size()) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::tokenize(std::string_view word, std::vector<ModelToken>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    int32_t id = token_to_id(word);
    if (id >= 0) {
      out.push_back({id, 0, static_cast<uint32_t>(word.size())});
      return;
    }
  }
  if (word.size() > kMaxCachedWord) {
    merge_word(word, out);
    return;
  }
  Shard& shard = cache_[std::hash<std::string_view>()(word) % kShards];
  std::string key(word);
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(key);
    if (it != shard.map.end()) {
      uint32_t begin = 0;
      for (const CachedToken& t : it->second) {
        out.push_back({t.id, begin, t.end});
        begin = t.end;
      }
      return;
    }
  }
  size_t first = out.size();
  merge_word(word, out);
  std::vector<CachedToken> entry;
  entry.reserve(out.size() - first);
  for (size_t i = first; i < out.size(); i++) entry.push_back({out[i].id, out[i].end});
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kShardCapacity) shard.map.clear();  // a bounded cache that adapts
  shard.map.emplace(std::move(key), std::move(entry));
}

void BpeModel::merge_word(std::string_view word, std::vector<ModelToken>& out) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // neighbours in the linked list, -1 at the ends
    uint32_t len;        // bytes of the word this symbol covers; 0 once merged away
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int32_t id, uint32_t len) {
    int32_t at = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, at - 1, -1, len});
    if (at > 0) symbols[at - 1].next = at;
  };

  // Characters to symbols: vocab entry, else byte tokens (byte_fallback), else unk (fused).
  int32_t pending_unk_len = 0;
  std::string s;
  size_t i = 0;
  while (i < word.size()) {
    size_t start = i;
    i += utf8_len(static_cast<unsigned char>(word[i]));
    if (i > word.size()) i = word.size();
    uint32_t byte_len = static_cast<uint32_t>(i - start);
    s.clear();
    if (start > 0) s += continuing_prefix_;
    s.append(word.data() + start, byte_len);
    if (i == word.size()) s += end_suffix_;
    int32_t id = token_to_id(s);
    if (id >= 0) {
      if (pending_unk_len) add(unk_id_, pending_unk_len), pending_unk_len = 0;
      add(id, byte_len);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : s) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        if (pending_unk_len) add(unk_id_, pending_unk_len), pending_unk_len = 0;
        for (size_t k = 0; k < byte_len; k++) add(byte_ids_[static_cast<uint8_t>(word[start + k])], 1);
        continue;
      }
    }
    if (unk_id_ < 0) continue;  // no unk token: the character is dropped, as HF does
    if (pending_unk_len && !fuse_unk_) add(unk_id_, pending_unk_len), pending_unk_len = 0;
    pending_unk_len += byte_len;
  }
  if (pending_unk_len) add(unk_id_, pending_unk_len);

  // Merges: lowest rank first, leftmost on ties. Entries made stale by earlier merges are skipped.
  struct Merge {
    int32_t rank, pos, new_id;
    bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Merge, std::vector<Merge>, std::greater<Merge>> queue;
  auto push_pair = [&](int32_t pos) {
    int32_t next = symbols[pos].next;
    if (next < 0) return;
    if (const MergeTable::Entry* m = merges_.find(symbols[pos].id, symbols[next].id))
      queue.push({m->rank, pos, m->id});
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(symbols.size()); k++) push_pair(k);
  while (!queue.empty()) {
    Merge top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const MergeTable::Entry* m = merges_.find(left.id, right.id);
    if (!m || m->id != top.new_id) continue;
    left.id = top.new_id;
    left.len += right.len;
    right.len = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }

  uint32_t begin = 0;
  for (const Symbol& sym : symbols) {
    if (sym.len == 0) continue;
    uint32_t end = std::min<uint32_t>(begin + sym.len, static_cast<uint32_t>(word.size()));
    out.push_back({sym.id, begin, end});
    begin = end;
  }
}

}  // namespace luatune
