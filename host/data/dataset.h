// A tokenized JSONL dataset: records are read one line at a time, tokenized (format.h) and kept
// only as compact token ids (4 bytes a token, the loss mask in the top bit) plus one offset per
// record; rows are whole documents, packed several to a row or one per row. Batches come from a
// seeded per-epoch permutation of the rows, so the batch at step k is a pure function of (seed,
// k, batch size) and a resumed run sees exactly what a straight run would.
// What stays in memory and why: docs/data.md.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "host/data/batch.h"
#include "host/data/format.h"

namespace luatune {

class Tokenizer;  // host/text/tokenizer.h

struct DataOptions {
  std::optional<DataFormat> format;  // unset: detected from the first record
  int64_t max_length = 2048;         // tokens per row; longer documents are truncated (the start kept)
  bool pack = true;                  // several whole documents per row of exactly max_length tokens
  bool pad_to_max_length = false;    // unpacked rows: pad batches to max_length, not their longest row
  bool train_on_prompt = false;
  bool add_eos = true;
  uint64_t seed = 0;          // shuffling (epoch e uses seed + e) and split
  bool skip_bad = false;      // skip (and count) malformed records instead of failing
  std::optional<bool> chat;   // render non-chat formats as conversations; unset: when the
                              // tokenizer has a chat template or chat_template is given
  std::string chat_template;  // "" = the tokenizer's own; else a file or a name (chat_template_resolve)
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();  // extra template variables
  int64_t max_records = -1;  // read at most this many records (-1: all)
};

// Every document, tokenized: token t of document d is tokens[starts[d] + t].
struct TokenStore {
  static constexpr uint32_t kTargetBit = 0x80000000u;  // set: the token is a target (mask 1)
  std::vector<uint32_t> tokens;                        // id | kTargetBit
  std::vector<int64_t> starts{0};                      // (documents + 1) offsets into tokens
  std::vector<bool> truncated;                         // per document: cut to max_length
  std::vector<int64_t> origins;                        // per document: its line (file) or index (records)
  int64_t skipped_bad = 0;                             // malformed records skipped (skip_bad)
  int64_t dropped_empty = 0;                           // records with no target token left
  size_t documents() const { return truncated.size(); }
};

struct DataStats {
  int64_t records = 0;        // documents in this dataset
  int64_t skipped_bad = 0;    // of the source, at load
  int64_t dropped_empty = 0;  // of the source, at load
  int64_t rows = 0;
  int64_t tokens = 0;         // non-padding tokens
  int64_t target_tokens = 0;  // tokens the loss is on
  int64_t truncated = 0;      // documents in this dataset cut to max_length
};

// One row as plain vectors (ids, targets, positions, segments), padded only when packed.
struct DataRow {
  std::vector<int64_t> ids, targets, positions, segments;
};

// Where Dataset::build and PreferenceDataset::build take their records from: each call gives the
// next record, its origin (line in the file or index in the records, 1-based) and where it came
// from ("FILE:LINE", "records[N]"), or the parse error for it; false at the end.
using DataRecordReader = std::function<bool(nlohmann::ordered_json& record, int64_t& origin,
                                            std::string& where, std::string& error)>;
// `records` one by one, "records[1]" first; `records` must outlive the reader.
DataRecordReader data_records_reader(const std::vector<nlohmann::ordered_json>& records);
// Calls `build` with a reader of JSONL file `path`'s lines; a bad line is a record with its error
// set (build fails on it or, with skip_bad, counts it). Fails "WHAT: cannot open 'PATH'"; running
// out of memory in `build` fails "data: PATH:LINE: holding the HELD read so far: out of memory".
void data_jsonl_read(const std::string& path, const std::string& what, const std::string& held,
                     const std::function<void(const DataRecordReader&)>& build);

// Data parallel: rank `rank` of `world`'s contiguous slice of the items draw(size * world) gives
// for one step (Dataset::shard_rows, PreferenceDataset::shard_pairs). Each rank takes `size`; a
// short last step (cycle=false) is split in slices of ceil(n / world), so a rank may get fewer or
// none. Fails "data: rank R outside [0, W)" before drawing.
std::vector<int64_t> data_shard(int64_t size, bool cycle, int rank, int world,
                                const std::function<std::vector<int64_t>(int64_t)>& draw);

// The item indices of 1-based step `step` with `size` items a step, for Dataset::step_rows and
// PreferenceDataset::step_pairs: positions (step-1)*size onward in the endless sequence of epochs
// over n items, epoch e in the order of a permutation seeded with seed + e (identity without
// shuffle); with cycle=false the sequence ends after the first epoch (a short last step). Bad
// arguments fail naming `unit` ("row", "pair"); n = 0 fails with why_empty(). Keeps the permutation
// of the last epoch asked for.
class DataOrder {
 public:
  std::vector<int64_t> step(int64_t step, int64_t size, int64_t n, uint64_t seed, bool shuffle, bool cycle,
                            const char* unit, const std::function<std::string()>& why_empty) const;

 private:
  mutable std::mutex mutex_;
  mutable int64_t epoch_ = -1;
  mutable std::vector<int64_t> order_;
};

class Dataset {
 public:
  // Reads a JSONL file line by line; errors are "PATH:LINE: expected ...".
  static std::shared_ptr<Dataset> from_jsonl(const std::string& path, const Tokenizer& tokenizer,
                                             const DataOptions& options);
  // Records built in memory (a recipe's own data); errors name "records[i]" (1-based).
  static std::shared_ptr<Dataset> from_records(const std::vector<nlohmann::ordered_json>& records,
                                               const Tokenizer& tokenizer, const DataOptions& options);

  // Documents tokenized elsewhere (a preference set's chosen and rejected sequences), one row each
  // (options.pack is ignored), kept in the given order: none is dropped, a longer one than
  // max_length is cut (the start kept). origins[d] names document d in messages.
  static std::shared_ptr<Dataset> from_documents(std::vector<Document> documents,
                                                 const std::vector<int64_t>& origins,
                                                 const DataOptions& options,
                                                 std::shared_ptr<const ChatSetup> chat, int64_t pad_id);

  // Train and validation sets: a seeded permutation of the documents, the first round(fraction * n)
  // to train; each keeps file order among its documents and is packed on its own.
  std::pair<std::shared_ptr<Dataset>, std::shared_ptr<Dataset>> split(double fraction) const;

  int64_t size() const { return static_cast<int64_t>(row_starts_.size()) - 1; }  // rows
  DataStats stats() const { return stats_; }
  const DataOptions& options() const { return options_; }
  DataFormat format() const { return resolved_.format; }
  const std::shared_ptr<const ChatSetup>& chat() const {
    return resolved_.chat;
  }                                  // null: plain text templates
  DataRow row(int64_t index) const;  // rows in dataset order, 0-based

  // The rows of 1-based step `step` with `size` rows a batch: positions (step-1)*size onward in the
  // endless sequence of epochs, epoch e in the order of a permutation seeded with seed + e (identity
  // without shuffle). With cycle=false the sequence ends after the first epoch (a short last batch).
  std::vector<int64_t> step_rows(int64_t step, int64_t size, bool shuffle, bool cycle) const;
  // Data parallel: rank `rank` of `world`'s share of step `step` when each rank takes `size` rows.
  // The step's rows are step_rows(step, size * world, ...) and rank r takes the r-th contiguous
  // slice, so N ranks together train on what one process with N times the batch trains on. A
  // short last batch (cycle=false) is split in slices of ceil(n / world); a rank left with none
  // gets an empty list (train it on empty_batch()).
  std::vector<int64_t> shard_rows(int64_t step, int64_t size, bool shuffle, bool cycle, int rank,
                                  int world) const;
  Batch batch(const std::vector<int64_t>& rows) const;  // CPU int64 tensors (B, T)
  // A batch that trains on nothing (row 0 with every target ignored, 0 tokens): a rank's share of
  // a short last batch, so that it still joins the step's collectives.
  Batch empty_batch() const;

  // Documents as stored (for the debug view): ids with the mask bit cleared, and the mask.
  Document document(int64_t doc) const;
  int64_t document_origin(int64_t doc) const;  // its line in the file (or index in the records), 1-based
  int64_t documents() const { return static_cast<int64_t>(docs_.size()); }

 private:
  static std::shared_ptr<Dataset> build(const DataRecordReader& next, const Tokenizer& tokenizer,
                                        const DataOptions& options);
  struct Resolved {  // what loading settled: the format, the chat format used, the padding id
    DataFormat format = DataFormat::text;
    std::shared_ptr<const ChatSetup> chat;
    int64_t pad_id = 0;
  };
  Dataset(std::shared_ptr<const TokenStore> store, std::vector<int64_t> docs, const DataOptions& options,
          const Resolved& resolved);
  void plan_rows();
  // Writes row r into T columns starting at the given pointers; returns its non-padding tokens.
  int64_t write_row(int64_t r, int64_t T, int64_t* ids, int64_t* targets, int64_t* positions,
                    int64_t* segments) const;
  int64_t row_length(int64_t r) const;  // tokens before padding

  std::shared_ptr<const TokenStore> store_;
  std::vector<int64_t> docs_;        // indices into store_, in order
  std::vector<int64_t> row_starts_;  // row r holds docs_[row_starts_[r] .. row_starts_[r+1])
  DataOptions options_;
  Resolved resolved_;
  DataStats stats_;

  DataOrder order_;
};

// Whether records of `format` are rendered through a chat template (options.chat, chat_template, or
// the tokenizer's own), and which; null for plain text templates. A usage error with a hint naming
// the chat_template key when none can be had, and the template's own error when it does not compile.
std::shared_ptr<const ChatSetup> data_resolve_chat(DataFormat format, const DataOptions& options,
                                                   const Tokenizer& tokenizer);

// A seeded Fisher-Yates permutation of 0..n-1 (splitmix64; the same on every platform).
std::vector<int64_t> data_permutation(int64_t n, uint64_t seed);

// How many of `n` items a split keeping `fraction` to train puts in the training part: round(fraction * n)
// (Dataset::split, PreferenceDataset::split). The rest are held out.
int64_t data_split_train_count(int64_t n, double fraction);
// The one-line warning for holding out `eval_fraction` of `items` (records, or `unit`) when that holds out
// none, so there is nothing to evaluate on: what it rounds to and the eval_fraction that holds out one.
// "" when it holds out at least one, when eval_fraction is 0 (no evaluation asked for) or there are no
// items. The recipes' run.sets and pref.sets print it and turn evaluation off; `runner validate` prints
// the same line from the data file's records, before anything is loaded (docs/data.md).
std::string data_eval_split_warning(int64_t items, double eval_fraction, const std::string& unit = "records");

// The most rows (pairs for a preference set) one step may take over all ranks when that is more
// than the dataset holds: a batch bigger than the data repeats rows inside one step, and a
// mistyped size (gradient_accumulation_steps=1e18) would otherwise grow the batch until the process is
// killed.
constexpr int64_t kDataMaxBatchBeyondData = 65536;
// Fails naming option 'size' when `size` per rank times `world` ranks is not a batch to take from
// `items` (`unit`: "rows" or "pairs"): not a whole number >= 1, past 2^53, or more than both
// `items` and kDataMaxBatchBeyondData. `size` is a double so 1e18 is reported as given.
void data_check_batch_size(double size, int world, int64_t items, const char* unit);

}  // namespace luatune
