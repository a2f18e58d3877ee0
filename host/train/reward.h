// Reward modelling: a scalar head on the model's last hidden state (HF's *ForSequenceClassification
// with num_labels 1: score.weight (1, C), no bias, read at each sequence's last token), trained with
// the Bradley-Terry pairwise loss -log sigmoid(r_chosen - r_rejected) on preference pairs, as a
// Trainer hook; scoring for rejection sampling; saved so HF transformers loads it as a sequence-
// classification model. Sources and the HF layout: docs/alignment.md.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/model/checkpoint.h"
#include "host/train/preference.h"
#include "host/train/trainer.h"

namespace luatune {

class RewardModel : public PairLossHook {
 public:
  // A new head: float32 (1, C), normal(0, 1/sqrt(C)) from `seed` (HF initialises it with
  // initializer_range; the scale only sets the starting spread of rewards).
  RewardModel(std::shared_ptr<Model> model, uint64_t seed);
  std::shared_ptr<Model> model() const { return model_; }
  at::Tensor& head() { return head_; }

  // Rewards of each row of a batch, read at its last token (batch.lengths - 1), float32 (B), no
  // gradients. Rows must be right-padded (as data.preferences and reward_batch make them).
  at::Tensor score(const Batch& batch);
  // The same for every pair of a preference set, `batch_size` pairs a forward: (pairs, 2) float32,
  // column 0 the chosen response's reward, 1 the rejected's.
  at::Tensor score_pairs(const PreferenceDataset& data, int64_t batch_size);

  // TrainerHook: the head trains with the model (its own name "score.weight"); the loss of a
  // micro-batch is the sum over its pairs of -log sigmoid(r_c - r_r); the step divides by the
  // pairs. stats (means per pair since begin()): rewards_chosen, rewards_rejected, reward_margin,
  // preference_accuracy.
  std::vector<ParamGroup> parameter_groups() override;
  at::Tensor micro_loss(const MicroBatch& mb, const at::Tensor& ce_sum) override;
  std::vector<std::pair<std::string, double>> stats(bool training) override;

 private:
  std::shared_ptr<Model> model_;
  at::Tensor head_;  // (1, C) float32
};

// Writes `dir` as HF loads a sequence-classification model: config.json (architectures
// <Family>ForSequenceClassification, num_labels 1, id2label/label2id, pad_token_id), model.safetensors
// with the body's weights (no lm_head) and score.weight in the model's dtype; each file atomically.
// Adapters must be merged first (lora.merge). pad_token_id: the id HF uses to find each row's last
// token (it must differ from every token a scored sequence ends with). tokenizer_files are copied in.
void reward_save(RewardModel& reward, const std::string& dir, int64_t pad_token_id,
                 const std::vector<std::string>& tokenizer_files = {});
// Loads score.weight from a directory reward_save wrote (the body loads with models.load).
void reward_load_head(RewardModel& reward, const std::string& dir);
// Both: the body (model_load with `options`: dtype, device; a <Family>ForSequenceClassification
// directory loads without an lm_head) and its head.
std::shared_ptr<RewardModel> reward_load(const std::string& dir, const LoadOptions& options);

}  // namespace luatune
