// Dataset (see dataset.h): loading records into the token store, packing documents into rows,
// split, the seeded epoch order, and rows -> Batch tensors.
#include "host/data/dataset.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "host/core/error.h"
#include "host/core/strings.h"
#include "host/io/jsonl.h"
#include "host/text/tokenizer.h"

namespace luatune {

using json = nlohmann::ordered_json;

// ============================================================================================
// The seeded order: splitmix64 and an unbiased Fisher-Yates, written out so the order does not
// depend on the standard library's distributions (which differ between implementations).

namespace {

uint64_t splitmix64_next(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t uniform_below(uint64_t& state, uint64_t n) {  // in [0, n), by rejection of the biased tail
  uint64_t threshold = (0 - n) % n;
  for (;;) {
    uint64_t r = splitmix64_next(state);
    if (r >= threshold) return r % n;
  }
}

constexpr uint64_t kSplitStream = 0x73706c6974000000ull;  // "split": its own stream beside the epochs'

}  // namespace

std::vector<int64_t> data_permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) p[i] = i;
  uint64_t state = seed;
  for (int64_t i = n - 1; i > 0; i--) std::swap(p[i], p[uniform_below(state, static_cast<uint64_t>(i + 1))]);
  return p;
}

int64_t data_split_train_count(int64_t n, double fraction) {
  return std::llround(fraction * static_cast<double>(n));
}

std::string data_eval_split_warning(int64_t items, double eval_fraction, const std::string& unit) {
  if (items <= 0 || !(eval_fraction > 0 && eval_fraction < 1)) return "";
  if (items - data_split_train_count(items, 1 - eval_fraction) > 0) return "";
  const std::string n = std::to_string(items), f = str_from_number(eval_fraction);
  std::string text = "data: eval_fraction = " + f + " holds out none of the " + n + " " + unit + " (" + n +
                     " x " + f + " = " + str_from_number(eval_fraction * static_cast<double>(items)) +
                     " rounds to 0), so this run trains without evaluation; hint: ";
  if (items >= 2) {
    // The smallest fraction of two significant digits >= 1 / items: it holds out exactly one.
    const double one = 1.0 / static_cast<double>(items);
    const double scale = std::pow(10.0, 1 - std::floor(std::log10(one)));
    double suggest = std::ceil(one * scale - 1e-9) / scale;
    while (items - data_split_train_count(items, 1 - suggest) < 1) suggest += 1 / scale;  // rounding slack
    text += "eval_fraction = " + str_from_number(suggest) + " holds out 1 of them";
  } else {
    text +=
        "give more data (1 " + unit.substr(0, unit.size() - 1) + " cannot be both trained on and held out)";
  }
  return text + " (eval_fraction = 0: no evaluation, no warning)";
}

void data_check_batch_size(double size, int world, int64_t items, const char* unit) {
  const std::string given = str_from_number(size);
  LT_CHECK(size >= 1 && size == std::floor(size),
           "data: batches: option 'size' must be a whole number of " << unit << " >= 1, got " << given);
  const double total = size * world;  // over all ranks; exact while it is below 2^53
  const double limit = static_cast<double>(std::max(items, kDataMaxBatchBeyondData));
  if (total <= limit) return;
  fail("data: batches: option 'size' is " + given + " " + unit + " per step" +
       (world > 1 ? " on each of " + std::to_string(world) + " ranks" : "") + ", more than the dataset's " +
       std::to_string(items) + " " + unit + " and more than " + std::to_string(kDataMaxBatchBeyondData) +
       " (recipes pass batch_size * gradient_accumulation_steps as size; see docs/limits.md)");
}

// ============================================================================================
// Loading

std::shared_ptr<const ChatSetup> data_resolve_chat(DataFormat format, const DataOptions& o,
                                                   const Tokenizer& tok) {
  if (format == DataFormat::text) return nullptr;
  bool want = format == DataFormat::chat ||
              o.chat.value_or(!o.chat_template.empty() || !tok.chat_templates().empty());
  if (!want) return nullptr;
  if (o.chat_template.empty() && tok.chat_templates().empty()) {
    std::vector<std::string> shipped = chat_template_shipped_names();
    std::string hint =
        "set chat_template = FILE.jinja or one luatune ships (" + str_join(shipped, ", ") + ")";
    if (format != DataFormat::chat) hint += "; or chat = false for the plain text template";
    hint += format != DataFormat::chat ? " (runner data: --chat-template T, --no-chat)"
                                       : " (runner data: --chat-template T)";
    fail_usage(std::string("data: ") + data_format_name(format) +
                   " records are rendered as conversations but " + tok.source_dir() + " has no chat_template",
               hint);
  }
  auto setup = std::make_shared<ChatSetup>();
  try {
    setup->tmpl = chat_template_resolve(tok, o.chat_template);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    fail_usage(e.what());  // a key the user set, or the model's template: theirs to fix
  }
  ChatOptions co;
  LT_CHECK(o.chat_template_kwargs.is_object() || o.chat_template_kwargs.is_null(),
           "data: chat_template_kwargs must be a table of template variables");
  if (o.chat_template_kwargs.is_object()) co.kwargs = o.chat_template_kwargs;
  setup->options = chat_options_for(tok, co);
  return setup;
}

std::shared_ptr<Dataset> Dataset::build(const DataRecordReader& next, const Tokenizer& tok,
                                        const DataOptions& o) {
  LT_CHECK(o.max_length >= 2, "data: max_length must be at least 2, got " << o.max_length);
  auto store = std::make_shared<TokenStore>();
  std::optional<DataFormat> format = o.format;
  EncodeOptions eo;
  eo.train_on_prompt = o.train_on_prompt;
  eo.add_eos = o.add_eos;
  auto configure = [&](DataFormat f) {
    eo.format = f;
    eo.chat = data_resolve_chat(f, o, tok);
    bool appends_eos = !eo.chat && f != DataFormat::chat;
    if (o.add_eos && appends_eos && tok.special().eos.empty())
      fail_usage("data: " + tok.source_dir() +
                 " has no EOS token to end each document with; pass add_eos = false");
  };
  if (format) configure(*format);

  json record;
  std::string where, parse_error;
  int64_t read = 0, origin = 0;
  while ((o.max_records < 0 || read < o.max_records) && next(record, origin, where, parse_error)) {
    read++;
    Document doc;
    try {
      if (!parse_error.empty()) fail(parse_error);
      if (!format) {
        format = data_format_detect(record, where);
        configure(*format);
      }
      doc = data_encode_record(tok, eo, record, where);
    } catch (const UsageError&) {
      throw;  // not the record's fault: skip_bad does not hide it
    } catch (const Error&) {
      if (!o.skip_bad) throw;
      store->skipped_bad++;
      continue;
    }
    bool truncated = static_cast<int64_t>(doc.ids.size()) > o.max_length;
    if (truncated) {
      doc.ids.resize(o.max_length);
      doc.mask.resize(o.max_length);
    }
    if (std::find(doc.mask.begin(), doc.mask.end(), 1) == doc.mask.end()) {
      store->dropped_empty++;
      continue;
    }
    for (size_t i = 0; i < doc.ids.size(); i++) {
      LT_ASSERT(doc.ids[i] >= 0, "negative token id " << doc.ids[i]);
      store->tokens.push_back(static_cast<uint32_t>(doc.ids[i]) | (doc.mask[i] ? TokenStore::kTargetBit : 0));
    }
    store->starts.push_back(static_cast<int64_t>(store->tokens.size()));
    store->truncated.push_back(truncated);
    store->origins.push_back(origin);
  }
  store->tokens.shrink_to_fit();
  std::vector<int64_t> docs(store->documents());
  for (size_t i = 0; i < docs.size(); i++) docs[i] = static_cast<int64_t>(i);
  Resolved resolved;
  resolved.format = format.value_or(DataFormat::text);
  resolved.chat = eo.chat;
  resolved.pad_id = tok.special().pad >= 0 ? tok.special().pad : 0;
  return std::shared_ptr<Dataset>(new Dataset(std::move(store), std::move(docs), o, resolved));
}

std::shared_ptr<Dataset> Dataset::from_documents(std::vector<Document> documents,
                                                 const std::vector<int64_t>& origins,
                                                 const DataOptions& options,
                                                 std::shared_ptr<const ChatSetup> chat, int64_t pad_id) {
  LT_CHECK(origins.size() == documents.size(), "data: from_documents: one origin per document");
  LT_CHECK(options.max_length >= 2, "data: max_length must be at least 2, got " << options.max_length);
  auto store = std::make_shared<TokenStore>();
  for (size_t d = 0; d < documents.size(); d++) {
    Document& doc = documents[d];
    LT_CHECK(doc.ids.size() == doc.mask.size(), "data: from_documents: document "
                                                    << d << " has " << doc.ids.size() << " ids and "
                                                    << doc.mask.size() << " mask entries");
    bool truncated = static_cast<int64_t>(doc.ids.size()) > options.max_length;
    if (truncated) doc.ids.resize(options.max_length);
    for (size_t i = 0; i < doc.ids.size(); i++) {
      LT_ASSERT(doc.ids[i] >= 0, "negative token id " << doc.ids[i]);
      store->tokens.push_back(static_cast<uint32_t>(doc.ids[i]) | (doc.mask[i] ? TokenStore::kTargetBit : 0));
    }
    store->starts.push_back(static_cast<int64_t>(store->tokens.size()));
    store->truncated.push_back(truncated);
    store->origins.push_back(origins[d]);
  }
  std::vector<int64_t> docs(store->documents());
  for (size_t i = 0; i < docs.size(); i++) docs[i] = static_cast<int64_t>(i);
  DataOptions o = options;
  o.pack = false;
  Resolved resolved;
  resolved.format = DataFormat::chat;
  resolved.chat = chat;
  resolved.pad_id = pad_id;
  return std::shared_ptr<Dataset>(new Dataset(std::move(store), std::move(docs), o, resolved));
}

DataRecordReader data_records_reader(const std::vector<json>& records) {
  return [&records, i = size_t(0)](json& record, int64_t& origin, std::string& where,
                                   std::string& error) mutable {
    if (i >= records.size()) return false;
    record = records[i++];
    origin = static_cast<int64_t>(i);
    where = "records[" + std::to_string(i) + "]";
    error.clear();
    return true;
  };
}

void data_jsonl_read(const std::string& path, const std::string& what, const std::string& held,
                     const std::function<void(const DataRecordReader&)>& build) {
  JsonlReadOptions ro;
  ro.bad = JsonlBad::report;  // a bad line is a bad record: build() fails or, with skip_bad, counts it
  ro.expected = "a JSON object";
  JsonlReaderOf<nlohmann::ordered_json> in(path, ro);
  LT_CHECK(in.is_open(), what << ": cannot open '" << path << "'");
  auto next = [&](json& record, int64_t& origin, std::string& where, std::string& error) {
    if (!in.next()) return false;
    origin = in.line();
    where = in.where();
    error = in.error();
    record = error.empty() ? std::move(in.value()) : json();
    return true;
  };
  try {
    build(next);
  } catch (...) {
    rethrow_out_of_memory("data: " + in.where() + ": holding the " + held + " read so far");
  }
}

std::shared_ptr<Dataset> Dataset::from_jsonl(const std::string& path, const Tokenizer& tok,
                                             const DataOptions& o) {
  std::shared_ptr<Dataset> ds;
  data_jsonl_read(path, "data", "tokens", [&](const DataRecordReader& next) { ds = build(next, tok, o); });
  return ds;
}

std::shared_ptr<Dataset> Dataset::from_records(const std::vector<json>& records, const Tokenizer& tok,
                                               const DataOptions& o) {
  return build(data_records_reader(records), tok, o);
}

// ============================================================================================
// Rows

Dataset::Dataset(std::shared_ptr<const TokenStore> store, std::vector<int64_t> docs,
                 const DataOptions& options, const Resolved& resolved)
    : store_(std::move(store)), docs_(std::move(docs)), options_(options), resolved_(resolved) {
  plan_rows();
  stats_.records = static_cast<int64_t>(docs_.size());
  stats_.skipped_bad = store_->skipped_bad;
  stats_.dropped_empty = store_->dropped_empty;
  stats_.rows = size();
  for (int64_t d : docs_) {
    int64_t b = store_->starts[d], e = store_->starts[d + 1];
    stats_.tokens += e - b;
    for (int64_t t = b + 1; t < e; t++)
      stats_.target_tokens += (store_->tokens[t] & TokenStore::kTargetBit) != 0;
    stats_.truncated += store_->truncated[d];
  }
}

// Next-fit packing in document order: a row takes documents until the next one would not fit.
// Documents are never split across rows, so each is seen with its whole context, as when alone.
void Dataset::plan_rows() {
  row_starts_.assign(1, 0);
  int64_t used = 0;
  for (size_t i = 0; i < docs_.size(); i++) {
    int64_t n = store_->starts[docs_[i] + 1] - store_->starts[docs_[i]];
    if (i > 0 && (!options_.pack || used + n > options_.max_length)) {
      row_starts_.push_back(static_cast<int64_t>(i));
      used = 0;
    }
    used += n;
  }
  if (!docs_.empty()) row_starts_.push_back(static_cast<int64_t>(docs_.size()));
}

int64_t Dataset::row_length(int64_t r) const {
  return store_->starts[docs_[row_starts_[r + 1] - 1] + 1] - store_->starts[docs_[row_starts_[r]]];
}

int64_t Dataset::write_row(int64_t r, int64_t T, int64_t* ids, int64_t* targets, int64_t* positions,
                           int64_t* segments) const {
  const std::vector<uint32_t>& tok = store_->tokens;
  int64_t col = 0, segment = 0;
  for (int64_t i = row_starts_[r]; i < row_starts_[r + 1]; i++, segment++) {
    int64_t b = store_->starts[docs_[i]], e = store_->starts[docs_[i] + 1];
    for (int64_t t = b; t < e; t++, col++) {
      LT_ASSERT(col < T, "row " << r << " is longer than " << T);
      ids[col] = tok[t] & ~TokenStore::kTargetBit;
      // Position t predicts token t+1 of the same document only: the last token of a document has
      // no target, so nothing is learned across a document boundary.
      bool has_target = t + 1 < e && (tok[t + 1] & TokenStore::kTargetBit);
      targets[col] = has_target ? static_cast<int64_t>(tok[t + 1] & ~TokenStore::kTargetBit) : kIgnoreTarget;
      positions[col] = t - b;
      segments[col] = segment;
    }
  }
  int64_t used = col;
  for (int64_t p = 0; col < T; col++, p++) {  // padding: its own segment, no targets
    ids[col] = resolved_.pad_id;
    targets[col] = kIgnoreTarget;
    positions[col] = p;
    segments[col] = segment;
  }
  return used;
}

DataRow Dataset::row(int64_t index) const {
  LT_CHECK(index >= 0 && index < size(),
           "data: row " << index << " out of range (the dataset has " << size() << " rows, numbered from 0)");
  int64_t T = options_.pack ? options_.max_length : row_length(index);
  DataRow r;
  r.ids.resize(T);
  r.targets.resize(T);
  r.positions.resize(T);
  r.segments.resize(T);
  write_row(index, T, r.ids.data(), r.targets.data(), r.positions.data(), r.segments.data());
  return r;
}

Document Dataset::document(int64_t doc) const {
  LT_CHECK(doc >= 0 && doc < documents(), "data: document " << doc << " out of range");
  Document out;
  for (int64_t t = store_->starts[docs_[doc]]; t < store_->starts[docs_[doc] + 1]; t++) {
    out.ids.push_back(static_cast<int32_t>(store_->tokens[t] & ~TokenStore::kTargetBit));
    out.mask.push_back((store_->tokens[t] & TokenStore::kTargetBit) ? 1 : 0);
  }
  return out;
}

int64_t Dataset::document_origin(int64_t doc) const {
  LT_CHECK(doc >= 0 && doc < documents(), "data: document " << doc << " out of range");
  return store_->origins[docs_[doc]];
}

// ============================================================================================
// Split, order, batches

std::pair<std::shared_ptr<Dataset>, std::shared_ptr<Dataset>> Dataset::split(double fraction) const {
  LT_CHECK(fraction >= 0 && fraction <= 1, "data: split fraction must be in [0, 1], got " << fraction);
  int64_t n = static_cast<int64_t>(docs_.size());
  int64_t n_train = data_split_train_count(n, fraction);
  std::vector<int64_t> perm = data_permutation(n, options_.seed ^ kSplitStream);
  std::vector<int64_t> train, val;
  for (int64_t i = 0; i < n; i++) (i < n_train ? train : val).push_back(docs_[perm[i]]);
  std::sort(train.begin(), train.end());  // file order within each part
  std::sort(val.begin(), val.end());
  return {std::shared_ptr<Dataset>(new Dataset(store_, std::move(train), options_, resolved_)),
          std::shared_ptr<Dataset>(new Dataset(store_, std::move(val), options_, resolved_))};
}

std::vector<int64_t> DataOrder::step(int64_t step, int64_t size, int64_t n, uint64_t seed, bool shuffle,
                                     bool cycle, const char* unit,
                                     const std::function<std::string()>& why_empty) const {
  LT_CHECK(size >= 1, "data: batch size must be at least 1, got " << size);
  LT_CHECK(step >= 1, "data: steps are numbered from 1, got " << step);
  LT_CHECK(step <= INT64_MAX / size, "data: step " << step << " of " << size << " " << unit
                                                   << "s is past the last " << unit
                                                   << " a 64-bit count reaches");
  if (n <= 0) fail(why_empty());
  std::vector<int64_t> out;
  for (int64_t p = (step - 1) * size; p < step * size; p++) {
    if (!cycle && p >= n) break;
    const int64_t epoch = p / n, index = p % n;
    if (!shuffle) {
      out.push_back(index);
      continue;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (epoch_ != epoch) {
      order_ = data_permutation(n, seed + static_cast<uint64_t>(epoch));
      epoch_ = epoch;
    }
    out.push_back(order_[index]);
  }
  return out;
}

std::vector<int64_t> Dataset::step_rows(int64_t step, int64_t size, bool shuffle, bool cycle) const {
  return order_.step(step, size, this->size(), options_.seed, shuffle, cycle, "row", [&] {
    return "data: the dataset has no rows (" + std::to_string(stats_.skipped_bad) + " bad records skipped, " +
           std::to_string(stats_.dropped_empty) + " with no target dropped)";
  });
}

std::vector<int64_t> Dataset::shard_rows(int64_t step, int64_t size, bool shuffle, bool cycle, int rank,
                                         int world) const {
  return data_shard(size, cycle, rank, world, [&](int64_t n) { return step_rows(step, n, shuffle, cycle); });
}

std::vector<int64_t> data_shard(int64_t size, bool cycle, int rank, int world,
                                const std::function<std::vector<int64_t>(int64_t)>& draw) {
  LT_CHECK(world >= 1 && rank >= 0 && rank < world, "data: rank " << rank << " outside [0, " << world << ")");
  std::vector<int64_t> all = draw(size * world);
  const int64_t n = static_cast<int64_t>(all.size());
  const int64_t per = cycle ? size : (n + world - 1) / world;
  const int64_t begin = std::min(n, rank * per), end = std::min(n, begin + per);
  return std::vector<int64_t>(all.begin() + begin, all.begin() + end);
}

Batch Dataset::empty_batch() const {
  Batch b = batch({0});
  b.targets.fill_(kIgnoreTarget);
  b.target_tokens = 0;
  b.tokens = 0;
  return b;
}

Batch Dataset::batch(const std::vector<int64_t>& rows) const {
  LT_CHECK(!rows.empty(), "data: a batch needs at least one row");
  int64_t T = 0;
  for (int64_t r : rows) {
    LT_CHECK(r >= 0 && r < size(),
             "data: row " << r << " out of range (the dataset has " << size() << " rows)");
    T = std::max(T, row_length(r));
  }
  if (options_.pack || options_.pad_to_max_length) T = options_.max_length;
  int64_t B = static_cast<int64_t>(rows.size());
  Batch b;
  try {
    b.ids = at::empty({B, T}, at::kLong);
    b.targets = at::empty({B, T}, at::kLong);
    b.positions = at::empty({B, T}, at::kLong);
    b.segments = at::empty({B, T}, at::kLong);
  } catch (...) {
    rethrow_out_of_memory("data: allocating a batch of " + std::to_string(B) + " rows x " +
                          std::to_string(T) + " tokens (4 int64 tensors)");
  }
  int64_t *ids = b.ids.data_ptr<int64_t>(), *targets = b.targets.data_ptr<int64_t>();
  int64_t *positions = b.positions.data_ptr<int64_t>(), *segments = b.segments.data_ptr<int64_t>();
  b.lengths = at::empty({B}, at::kLong);
  int64_t* lengths = b.lengths.data_ptr<int64_t>();
  for (int64_t i = 0; i < B; i++) {
    int64_t o = i * T;
    lengths[i] = write_row(rows[i], T, ids + o, targets + o, positions + o, segments + o);
    b.tokens += lengths[i];
  }
  for (int64_t i = 0; i < B * T; i++) b.target_tokens += targets[i] != kIgnoreTarget;
  b.row_ids = at::tensor(rows, at::kLong);
  return b;
}

}  // namespace luatune
