// Preference optimisation as a Trainer hook: DPO (sigmoid loss with beta and label smoothing), its
// IPO and hinge variants, and ORPO (SFT loss plus an odds-ratio term, no reference). Sequence
// log-probabilities are sums of per-token log-probs over each response, computed in chunks from
// the trainer's hidden states (never the full-vocabulary logits of a batch). The reference policy is
// a separate frozen model, the policy itself with its adapters switched off (LoRA/QLoRA: no second
// copy), or log-probs computed ahead and cached on disk. Formulas and sources: docs/alignment.md.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/train/trainer.h"

namespace luatune {

struct PreferenceOptions {
  std::string loss = "sigmoid";  // "sigmoid" (DPO), "ipo", "hinge", "orpo"
  double beta = 0.1;             // DPO's temperature; ORPO's lambda (weight of the odds-ratio term)
  double label_smoothing = 0.0;  // sigmoid only: the chance a label is flipped (cDPO), in [0, 0.5)
  int64_t chunk = 1024;          // rows of logits materialised at once
};

// Reference log-probabilities per pair, keyed by the pair's content key (preference_pair_key).
struct ReferenceEntry {
  double chosen = 0, rejected = 0;  // summed log-probs of each response
  int64_t chosen_tokens = 0, rejected_tokens = 0;
};
using ReferenceCache = std::map<int64_t, ReferenceEntry>;

// Summed log-probabilities of each row's targets and their count, (rows) float64 and int64, for
// the model as it is now (no gradients). Used for the reference and for tests.
std::pair<at::Tensor, at::Tensor> sequence_logprobs(const Model& model, const Batch& batch, int64_t chunk);

class PreferenceDataset;
// The reference's log-probs for every pair of `data`, `batch_size` pairs at a time; with
// adapters_off the model's adapters are switched off meanwhile (and back on after).
ReferenceCache reference_logprobs(Model& model, bool adapters_off, const PreferenceDataset& data,
                                  int64_t batch_size, int64_t chunk, ReferenceCache cache = {});
// Save (atomically) and load a cache: safetensors with pair_ids, chosen/rejected log-probs and
// token counts. Load errors name the file and the tensor.
void reference_cache_save(const ReferenceCache& cache, const std::string& path);
ReferenceCache reference_cache_load(const std::string& path);

// Means per preference pair of statistics a hook sums on the device over a step or an evaluation:
// one host sync when read, summed over data-parallel ranks. Shared by PreferenceLoss and
// RewardModel (host/train/reward.h).
class PairStats {
 public:
  void clear();
  // `sums`: scalar tensors, each a sum over the `pairs` pairs just seen, in the same order each call.
  void add(const std::vector<at::Tensor>& sums, int64_t pairs);
  // The means of the first names.size() sums, named (0 with no pairs). Every rank must call this at
  // the same point: the sums are all-reduced.
  std::vector<std::pair<std::string, double>> means(const std::vector<const char*>& names) const;

 private:
  at::Tensor sums_;  // (statistics) float64 on the device; undefined before the first add
  int64_t pairs_ = 0;
};

// The TrainerHook part that PreferenceLoss and RewardModel share: their loss replaces the LM loss,
// a step's units are its preference pairs (a batch without pairs fails naming `loss_name`), and
// the pair statistics restart at begin().
class PairLossHook : public TrainerHook {
 public:
  explicit PairLossHook(std::string loss_name) : loss_name_(std::move(loss_name)) {}
  void begin(bool training) override { stats_.clear(); }
  bool replaces_lm_loss() const override { return true; }
  int64_t loss_units(const Batch& batch) const override;

 protected:
  PairStats stats_;  // see each hook's stats()

 private:
  std::string loss_name_;  // "the reward model's loss"
};

class PreferenceLoss : public PairLossHook {
 public:
  // reference: nullptr for ORPO; the policy itself (with adapters) for "adapters off"; another
  // model (frozen here) otherwise. Or give a cache (set_reference_cache) instead of a model.
  PreferenceLoss(std::shared_ptr<Model> policy, std::shared_ptr<Model> reference, PreferenceOptions options);
  void set_reference_cache(ReferenceCache cache, std::string source);
  const PreferenceOptions& options() const { return options_; }

  // TrainerHook: the loss of a micro-batch is the sum of its pairs' losses; the step divides by
  // the pairs. stats (means per pair since begin()): rewards_chosen, rewards_rejected,
  // reward_margin, preference_accuracy, logps_chosen, logps_rejected, logps_accuracy (the share of
  // pairs whose chosen response the policy itself gives the higher summed log-prob, which unlike
  // the implicit rewards is meaningful before the first step); ORPO adds nll_loss, log_odds_ratio,
  // log_odds_chosen.
  at::Tensor micro_loss(const MicroBatch& mb, const at::Tensor& ce_sum) override;
  std::vector<std::pair<std::string, double>> stats(bool training) override;

 private:
  // Reference summed log-probs and token counts of the micro-batch's rows, (n) each.
  std::pair<at::Tensor, at::Tensor> reference_rows(const MicroBatch& mb);

  std::shared_ptr<Model> policy_, reference_;
  PreferenceOptions options_;
  ReferenceCache cache_;
  std::string cache_source_;
  bool use_cache_ = false;
};

// The per-pair loss and the rewards from summed log-probs (float64 or float32 tensors (P)):
// returns {loss (P), chosen reward (P), rejected reward (P)}. Exposed for the hand-computed test.
std::vector<at::Tensor> preference_pair_loss(const PreferenceOptions& o, const at::Tensor& chosen_logps,
                                             const at::Tensor& rejected_logps, const at::Tensor& ref_chosen,
                                             const at::Tensor& ref_rejected, const at::Tensor& chosen_tokens,
                                             const at::Tensor& rejected_tokens);

}  // namespace luatune
