// Preference pairs (see preference.h): records -> two documents each, kept in one unpacked Dataset
// (documents 2k and 2k+1 are record k's chosen and rejected sides); a PreferenceDataset is a list
// of pair numbers into it, so splits and shards share the tokens.
#include "host/data/preference.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "host/core/error.h"
#include "host/text/tokenizer.h"

namespace luatune {

using json = nlohmann::ordered_json;

namespace {

constexpr uint64_t kSplitStream = 0x7072656673706c74ull;  // "prefsplt": the split's own stream

[[noreturn]] void fail_pair(const std::string& where, const std::string& expected, const json& record) {
  fail(where + ": expected " + expected + ", got " + data_record_excerpt(record));
}

// Only the last assistant turn is trained on: earlier turns are the shared history (prompt).
void keep_last_span(Document& d) {
  size_t end = d.mask.size();
  while (end > 0 && !d.mask[end - 1]) end--;
  size_t begin = end;
  while (begin > 0 && d.mask[begin - 1]) begin--;
  std::fill(d.mask.begin(), d.mask.begin() + static_cast<std::ptrdiff_t>(begin), 0);
}

bool is_messages(const json& v) {
  return v.is_array();
}

// [{"role": "user", "content": prompt}] for a string prompt, the list itself for a list.
json as_messages(const json& v) {
  if (v.is_string()) return json::array({json{{"role", "user"}, {"content", v}}});
  return v;
}

Document encode_messages(const Tokenizer& tok, const EncodeOptions& o, const json& messages,
                         const std::string& where, const char* side) {
  if (messages.empty() || !messages.back().is_object() || messages.back().value("role", "") != "assistant")
    fail(where + ": expected the " + side + " conversation to end with an assistant message, got " +
         data_record_excerpt(messages.empty() ? json::array() : messages.back()));
  EncodeOptions co = o;
  co.format = DataFormat::chat;
  Document d = data_encode_record(tok, co, json{{"messages", messages}}, where);
  keep_last_span(d);
  return d;
}

}  // namespace

std::pair<Document, Document> preference_encode_record(const Tokenizer& tok, const EncodeOptions& o,
                                                       const json& record, const std::string& where) {
  preference_check_record(record, where);  // its shape, as `runner validate` checks it
  const json& chosen = record["chosen"];
  const json& rejected = record["rejected"];
  const json* prompt = record.contains("prompt") ? &record["prompt"] : nullptr;
  if (chosen.is_string() && rejected.is_string()) {  // with a prompt (checked)
    if (prompt->is_string() && !o.chat) {
      EncodeOptions po = o;
      po.format = DataFormat::prompt_response;
      return {data_encode_record(tok, po, json{{"prompt", *prompt}, {"response", chosen}}, where),
              data_encode_record(tok, po, json{{"prompt", *prompt}, {"response", rejected}}, where)};
    }
    if (!o.chat)
      fail(where + ": message lists need a chat template",
           "set chat_template = ... (see docs/chat_formats.md)");
    json history = as_messages(*prompt);
    json c = history, r = history;
    c.push_back(json{{"role", "assistant"}, {"content", chosen}});
    r.push_back(json{{"role", "assistant"}, {"content", rejected}});
    return {encode_messages(tok, o, c, where, "chosen"), encode_messages(tok, o, r, where, "rejected")};
  }
  if (!o.chat)
    fail(where + ": message lists need a chat template",
         "set chat_template = ... (see docs/chat_formats.md)");
  json c, r;
  if (prompt) {
    json history = as_messages(*prompt);
    c = history, r = history;
    for (const json& m : chosen) c.push_back(m);
    for (const json& m : rejected) r.push_back(m);
  } else {
    // Anthropic HH style: whole conversations that share everything but the last message.
    if (chosen.empty() || rejected.empty() ||
        !std::equal(chosen.begin(), chosen.end() - 1, rejected.begin(), rejected.end() - 1))
      fail(where + ": expected \"chosen\" and \"rejected\" to share every message but the last, got " +
               std::to_string(chosen.size()) + " and " + std::to_string(rejected.size()) +
               " messages that differ earlier",
           "give the shared history as \"prompt\" and only the responses as \"chosen\"/\"rejected\"");
    c = chosen, r = rejected;
  }
  return {encode_messages(tok, o, c, where, "chosen"), encode_messages(tok, o, r, where, "rejected")};
}

void preference_check_record(const json& record, const std::string& where) {
  const std::string shapes =
      "a JSON object with \"chosen\" and \"rejected\" (strings with a \"prompt\" string, or message lists)";
  if (!record.is_object() || !record.contains("chosen") || !record.contains("rejected"))
    fail_pair(where, shapes, record);
  const json& chosen = record["chosen"];
  const json& rejected = record["rejected"];
  const json* prompt = record.contains("prompt") ? &record["prompt"] : nullptr;
  if (chosen.is_string() && rejected.is_string()) {
    if (!prompt || !(prompt->is_string() || is_messages(*prompt)))
      fail_pair(where, "a \"prompt\" (string or message list) beside string \"chosen\"/\"rejected\"", record);
    return;
  }
  if (!is_messages(chosen) || !is_messages(rejected)) fail_pair(where, shapes, record);
  if (prompt && !prompt->is_string() && !is_messages(*prompt))
    fail_pair(where, "\"prompt\" as a string or a message list", record);
}

int64_t preference_pair_key(const Document& chosen, const Document& rejected) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; i++, v >>= 8) h = (h ^ (v & 0xff)) * 0x100000001b3ull;
  };
  for (const Document* d : {&chosen, &rejected}) {
    mix(d->ids.size());
    for (size_t i = 0; i < d->ids.size(); i++)
      mix(static_cast<uint64_t>(d->ids[i]) | (uint64_t{d->mask[i]} << 32));
  }
  return static_cast<int64_t>(h);
}

// ============================================================================================
// Loading

std::shared_ptr<PreferenceDataset> PreferenceDataset::build(const DataRecordReader& next,
                                                            const Tokenizer& tok, const DataOptions& o) {
  LT_CHECK(!o.train_on_prompt,
           "data.preferences: train_on_prompt is not supported (the loss is on the responses)");
  LT_CHECK(o.max_length >= 2, "data.preferences: max_length must be at least 2, got " << o.max_length);
  std::vector<Document> docs;
  std::vector<int64_t> origins, keys;
  PreferenceStats st;
  EncodeOptions eo;
  eo.add_eos = o.add_eos;
  bool configured = false;
  json record;
  std::string where, parse_error;
  int64_t read = 0, origin = 0;
  while ((o.max_records < 0 || read < o.max_records) && next(record, origin, where, parse_error)) {
    read++;
    std::pair<Document, Document> pair;
    try {
      if (!parse_error.empty()) fail(parse_error);
      if (!configured) {
        // Message lists need a chat format; string records use one when the tokenizer has a template.
        bool messages = record.is_object() && record.contains("chosen") && record["chosen"].is_array();
        eo.chat = data_resolve_chat(messages ? DataFormat::chat : DataFormat::prompt_response, o, tok);
        if (!eo.chat && o.add_eos && tok.special().eos.empty())
          fail_usage("data.preferences: " + tok.source_dir() +
                     " has no EOS token to end each response with; pass add_eos = false");
        configured = true;
      }
      pair = preference_encode_record(tok, eo, record, where);
    } catch (const UsageError&) {
      throw;
    } catch (const Error&) {
      if (!o.skip_bad) throw;
      st.skipped_bad++;
      continue;
    }
    // A side whose response is cut away entirely by max_length leaves nothing to compare.
    auto targets_left = [&](const Document& d) {
      size_t n = std::min<size_t>(d.mask.size(), static_cast<size_t>(o.max_length));
      return std::find(d.mask.begin() + 1, d.mask.begin() + static_cast<std::ptrdiff_t>(n), 1) !=
             d.mask.begin() + static_cast<std::ptrdiff_t>(n);
    };
    if (pair.first.ids.size() < 2 || pair.second.ids.size() < 2 || !targets_left(pair.first) ||
        !targets_left(pair.second)) {
      st.dropped_empty++;
      continue;
    }
    for (Document* d : {&pair.first, &pair.second})
      if (static_cast<int64_t>(d->ids.size()) > o.max_length) {
        d->ids.resize(o.max_length);
        d->mask.resize(o.max_length);
      }
    keys.push_back(preference_pair_key(pair.first, pair.second));
    docs.push_back(std::move(pair.first));
    docs.push_back(std::move(pair.second));
    origins.push_back(origin);
    origins.push_back(origin);
  }
  auto ds = std::shared_ptr<PreferenceDataset>(new PreferenceDataset());
  const int64_t pad = tok.special().pad >= 0 ? tok.special().pad : 0;
  ds->docs_ = Dataset::from_documents(std::move(docs), origins, o, eo.chat, pad);
  ds->options_ = o;
  ds->keys_ = std::make_shared<const std::vector<int64_t>>(std::move(keys));
  ds->pairs_.resize(static_cast<size_t>(ds->docs_->documents() / 2));
  for (size_t i = 0; i < ds->pairs_.size(); i++) ds->pairs_[i] = static_cast<int64_t>(i);
  ds->stats_ = st;
  ds->count();
  return ds;
}

std::shared_ptr<PreferenceDataset> PreferenceDataset::from_jsonl(const std::string& path,
                                                                 const Tokenizer& tok, const DataOptions& o) {
  std::shared_ptr<PreferenceDataset> ds;
  data_jsonl_read(path, "data.preferences", "pairs",
                  [&](const DataRecordReader& next) { ds = build(next, tok, o); });
  return ds;
}

std::shared_ptr<PreferenceDataset> PreferenceDataset::from_records(const std::vector<json>& records,
                                                                   const Tokenizer& tok,
                                                                   const DataOptions& o) {
  return build(data_records_reader(records), tok, o);
}

void PreferenceDataset::count() {
  stats_.pairs = size();
  stats_.tokens = stats_.target_tokens = stats_.truncated = 0;
  for (int64_t p : pairs_) {
    bool cut = false;
    for (int side = 0; side < 2; side++) {
      Document d = docs_->document(2 * p + side);
      stats_.tokens += static_cast<int64_t>(d.ids.size());
      stats_.target_tokens += std::count(d.mask.begin() + 1, d.mask.end(), 1);
      DataRow row = docs_->row(2 * p + side);
      cut = cut || static_cast<int64_t>(row.ids.size()) >= options_.max_length;
    }
    stats_.truncated += cut;
  }
}

std::shared_ptr<PreferenceDataset> PreferenceDataset::subset(std::vector<int64_t> pairs) const {
  auto ds = std::shared_ptr<PreferenceDataset>(new PreferenceDataset());
  ds->docs_ = docs_;
  ds->keys_ = keys_;
  ds->pairs_ = std::move(pairs);
  ds->options_ = options_;
  ds->stats_ = PreferenceStats{};
  ds->count();
  return ds;
}

std::pair<std::shared_ptr<PreferenceDataset>, std::shared_ptr<PreferenceDataset>> PreferenceDataset::split(
    double fraction) const {
  LT_CHECK(fraction >= 0 && fraction <= 1, "data: split fraction must be in [0, 1], got " << fraction);
  const int64_t n = size();
  const int64_t n_train = data_split_train_count(n, fraction);
  std::vector<int64_t> perm = data_permutation(n, options_.seed ^ kSplitStream);
  std::vector<int64_t> train, held;
  for (int64_t i = 0; i < n; i++) (i < n_train ? train : held).push_back(pairs_[perm[i]]);
  std::sort(train.begin(), train.end());
  std::sort(held.begin(), held.end());
  return {subset(std::move(train)), subset(std::move(held))};
}

// ============================================================================================
// Order and batches

std::vector<int64_t> PreferenceDataset::step_pairs(int64_t step, int64_t size, bool shuffle,
                                                   bool cycle) const {
  return order_.step(step, size, this->size(), options_.seed, shuffle, cycle, "pair", [&] {
    return "data: the preference set has no pairs (" + std::to_string(stats_.skipped_bad) +
           " bad records skipped, " + std::to_string(stats_.dropped_empty) + " cut away by max_length)";
  });
}

std::vector<int64_t> PreferenceDataset::shard_pairs(int64_t step, int64_t size, bool shuffle, bool cycle,
                                                    int rank, int world) const {
  return data_shard(size, cycle, rank, world, [&](int64_t n) { return step_pairs(step, n, shuffle, cycle); });
}

Batch PreferenceDataset::batch(const std::vector<int64_t>& pairs) const {
  LT_CHECK(!pairs.empty(), "data: a batch needs at least one pair");
  std::vector<int64_t> rows;
  at::Tensor ids = at::empty({static_cast<int64_t>(pairs.size())}, at::kLong);
  for (size_t i = 0; i < pairs.size(); i++) {
    LT_CHECK(pairs[i] >= 0 && pairs[i] < size(),
             "data: pair " << pairs[i] << " out of range (the preference set has " << size() << " pairs)");
    const int64_t p = pairs_[pairs[i]];
    rows.push_back(2 * p);
    rows.push_back(2 * p + 1);
    ids[static_cast<int64_t>(i)] = (*keys_)[static_cast<size_t>(p)];
  }
  Batch b = docs_->batch(rows);
  b.segments = at::Tensor();  // one sequence a row, right-padded: plain causal attention is exact
  b.pairs = static_cast<int64_t>(pairs.size());
  b.pair_ids = ids;
  return b;
}

Batch PreferenceDataset::empty_batch() const {
  Batch b = batch({0});
  b.targets.fill_(kIgnoreTarget);
  b.target_tokens = 0;
  b.tokens = 0;
  b.pairs = 0;
  b.pair_ids = at::empty({0}, at::kLong);
  return b;
}

int64_t PreferenceDataset::origin(int64_t pair) const {
  LT_CHECK(pair >= 0 && pair < size(), "data: pair " << pair << " out of range");
  return docs_->document_origin(2 * pairs_[pair]);
}

Document PreferenceDataset::document(int64_t pair, int side) const {
  LT_CHECK(pair >= 0 && pair < size() && (side == 0 || side == 1), "data: pair " << pair << " out of range");
  return docs_->document(2 * pairs_[pair] + side);
}

}  // namespace luatune
