// Preference pairs for DPO, ORPO and reward modelling: JSONL records as people have them, each a
// prompt with a chosen and a rejected response, tokenized with the chat format (or the plain
// prompt/response template) with the loss mask on the responses only. Pair i becomes rows 2i
// (chosen) and 2i+1 (rejected) of a batch, right-padded, one sequence per row (never packed: a
// pair's log-probability is a sum over its own row). Record shapes, in docs/alignment.md:
//   {"prompt": "...", "chosen": "...", "rejected": "..."}                strings
//   {"prompt": [messages], "chosen": [messages], "rejected": [messages]}  TRL's conversational form
//   {"chosen": [messages], "rejected": [messages]}                        shared history, last turn differs
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "host/data/dataset.h"

namespace luatune {

class Tokenizer;

struct PreferenceStats {
  int64_t pairs = 0;
  int64_t skipped_bad = 0;    // malformed records skipped (skip_bad)
  int64_t dropped_empty = 0;  // pairs whose chosen or rejected response was cut away by max_length
  int64_t truncated = 0;      // pairs with a side of max_length tokens (cut there, or exactly that long)
  int64_t tokens = 0, target_tokens = 0;
};

class PreferenceDataset {
 public:
  // options: max_length (per side), chat / chat_template, seed, skip_bad, max_records, train_on_prompt
  // is refused (the loss is on the responses). Errors are "PATH:LINE: expected ...".
  static std::shared_ptr<PreferenceDataset> from_jsonl(const std::string& path, const Tokenizer& tokenizer,
                                                       const DataOptions& options);
  static std::shared_ptr<PreferenceDataset> from_records(const std::vector<nlohmann::ordered_json>& records,
                                                         const Tokenizer& tokenizer,
                                                         const DataOptions& options);

  int64_t size() const { return static_cast<int64_t>(pairs_.size()); }  // pairs
  PreferenceStats stats() const { return stats_; }
  const DataOptions& options() const { return options_; }
  // Train and held-out pairs: a seeded permutation, the first round(fraction * n) to train.
  std::pair<std::shared_ptr<PreferenceDataset>, std::shared_ptr<PreferenceDataset>> split(
      double fraction) const;

  // Pair indices (0-based, into this set) of 1-based step `step`, `size` pairs a step, epochs in
  // seeded order (as Dataset::step_rows); shard_pairs gives rank `rank` its contiguous slice of
  // step_pairs(step, size * world) (as Dataset::shard_rows).
  std::vector<int64_t> step_pairs(int64_t step, int64_t size, bool shuffle, bool cycle) const;
  std::vector<int64_t> shard_pairs(int64_t step, int64_t size, bool shuffle, bool cycle, int rank,
                                   int world) const;
  // 2 * pairs.size() rows: chosen, rejected, chosen, ... (CPU int64 tensors); pair_ids are the
  // pairs' content keys (pair_key), so cached reference log-probs follow a pair across files,
  // splits and orders.
  Batch batch(const std::vector<int64_t>& pairs) const;
  // A batch that trains on nothing, for a rank left without pairs in a short last step.
  Batch empty_batch() const;
  // The record (line in the file, 1-based) pair i came from.
  int64_t origin(int64_t pair) const;
  // Pair i's two sequences: its chosen (0) or rejected (1) document, ids and mask.
  Document document(int64_t pair, int side) const;

 private:
  PreferenceDataset() = default;
  static std::shared_ptr<PreferenceDataset> build(const DataRecordReader& next, const Tokenizer& tokenizer,
                                                  const DataOptions& options);
  std::shared_ptr<PreferenceDataset> subset(std::vector<int64_t> pairs) const;
  void count();

  std::shared_ptr<const Dataset> docs_;  // unpacked, 2 documents per pair (chosen, rejected)
  std::vector<int64_t> pairs_;           // pair i = documents 2 * pairs_[i] and 2 * pairs_[i] + 1 of docs_
  std::shared_ptr<const std::vector<int64_t>> keys_;  // per pair of docs_: its pair_key
  DataOptions options_;
  PreferenceStats stats_;
  DataOrder order_;
};

// A pair's content key: FNV-1a (64-bit) over both sides' token ids and loss masks, as int64. Two
// pairs with one key have the same tokens and masks, hence the same reference log-probs.
int64_t preference_pair_key(const Document& chosen, const Document& rejected);

// One preference record -> its chosen and rejected documents (mask on the final response only).
// Exposed for tests. `chat` unset: the plain prompt + response template (string records only).
std::pair<Document, Document> preference_encode_record(const Tokenizer& tokenizer,
                                                       const EncodeOptions& options,
                                                       const nlohmann::ordered_json& record,
                                                       const std::string& where);

// The shape checks of preference_encode_record, without a tokenizer: fails with the same "WHERE: expected
// ..." for a record that loading would refuse (`runner validate` reads pair files with it). What needs the
// tokenizer (a chat format for message lists) is not checked.
void preference_check_record(const nlohmann::ordered_json& record, const std::string& where);

}  // namespace luatune
