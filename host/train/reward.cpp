// Reward modelling (see reward.h): a (1, C) score head read at each row's last token, the
// Bradley-Terry pairwise loss as a trainer hook, and HF's sequence-classification layout in and out.
#include "host/train/reward.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "host/core/error.h"
#include "host/data/preference.h"
#include "host/io/hub_cache.h"
#include "host/io/safetensors.h"

namespace luatune {

namespace {

// Each row's hidden state at its last token: h (n, T, C), lengths (n) -> (n, C) float32.
at::Tensor last_token_hidden(const at::Tensor& h, const at::Tensor& lengths) {
  const int64_t n = h.size(0), T = h.size(1);
  at::Tensor last = (lengths.to(h.device()) - 1).clamp(0, T - 1);
  at::Tensor rows = at::arange(n, lengths.options().device(h.device()));
  return h.index({rows, last}).to(at::kFloat);
}

void check_lengths(const Batch& batch, const char* what) {
  LT_CHECK(batch.lengths.defined() && batch.lengths.size(0) == batch.ids.size(0),
           what << ": the batch does not say where each row ends (build it with data.preferences)");
}

}  // namespace

RewardModel::RewardModel(std::shared_ptr<Model> model, uint64_t seed)
    : PairLossHook("the reward model's loss"), model_(std::move(model)) {
  LT_CHECK(model_ != nullptr, "train.reward_model: model is nil");
  const int64_t C = model_->config.hidden_size;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  head_ = at::normal(0.0, 1.0 / std::sqrt(static_cast<double>(C)), {1, C}, gen, at::TensorOptions(at::kFloat))
              .to(model_->device())
              .set_requires_grad(true);
}

at::Tensor RewardModel::score(const Batch& batch) {
  check_lengths(batch, "reward:score");
  at::NoGradGuard no_grad;
  model_->set_training(false);
  const c10::Device dev = model_->device();
  ForwardOptions fo;
  if (batch.positions.defined()) fo.positions = batch.positions.to(dev);
  at::Tensor h = model_->hidden(batch.ids.to(dev), fo);
  return at::matmul(last_token_hidden(h, batch.lengths), head_.t()).squeeze(1).cpu();
}

at::Tensor RewardModel::score_pairs(const PreferenceDataset& data, int64_t batch_size) {
  LT_CHECK(batch_size > 0, "reward:score: batch_size must be positive");
  at::Tensor out = at::empty({data.size(), 2}, at::kFloat);
  for (int64_t p0 = 0; p0 < data.size(); p0 += batch_size) {
    std::vector<int64_t> pairs;
    for (int64_t p = p0; p < std::min(data.size(), p0 + batch_size); p++) pairs.push_back(p);
    out.narrow(0, p0, static_cast<int64_t>(pairs.size())).copy_(score(data.batch(pairs)).view({-1, 2}));
  }
  return out;
}

std::vector<ParamGroup> RewardModel::parameter_groups() {
  ParamGroup g;
  g.params = {{"score.weight", &head_}};
  g.clip = true;
  return {g};
}

at::Tensor RewardModel::micro_loss(const MicroBatch& mb, const at::Tensor& ce_sum) {
  LT_CHECK(mb.batch && mb.batch->pairs > 0 && mb.row_begin % 2 == 0 && mb.ids.size(0) % 2 == 0,
           "train: the reward model's loss needs whole pairs in each micro-batch");
  check_lengths(*mb.batch, "train: reward model");
  const int64_t n = mb.ids.size(0);
  at::Tensor lengths = mb.batch->lengths.narrow(0, mb.row_begin, n);
  at::Tensor r = at::matmul(last_token_hidden(mb.hidden_all, lengths), head_.t()).squeeze(1);  // (n)
  at::Tensor rc = r.slice(0, 0, n, 2), rr = r.slice(0, 1, n, 2);
  at::Tensor loss =
      -at::log_sigmoid(rc - rr).sum();  // Bradley-Terry: P(chosen > rejected) = sigmoid(rc - rr)
  at::NoGradGuard no_grad;
  stats_.add({rc.sum(), rr.sum(), (rc - rr).sum(), rc.gt(rr).sum()}, n / 2);
  return loss;
}

std::vector<std::pair<std::string, double>> RewardModel::stats(bool training) {
  return stats_.means({"rewards_chosen", "rewards_rejected", "reward_margin", "preference_accuracy"});
}

// ============================================================================================
// HF's <Family>ForSequenceClassification layout

void reward_save(RewardModel& reward, const std::string& dir, int64_t pad_token_id,
                 const std::vector<std::string>& tokenizer_files) {
  Model& model = *reward.model();
  if (!model.adapter_parameters().empty())
    fail("reward:save: the model has adapters; HF's sequence-classification layout holds plain weights",
         "merge them first (lora.merge(model)), or save the adapter with lora.save");
  LT_CHECK(pad_token_id >= 0,
           "reward:save: pad_token_id must be >= 0 (HF finds each row's last token with it)");
  // A shallow copy (the tensors are shared): the same body, described as a sequence classifier.
  Model body = model;
  body.config.score_head = true;
  body.config.pad_token_id = pad_token_id;
  nlohmann::json extra = nlohmann::json::parse(body.config.extra_json);
  extra["id2label"] = {{"0", "LABEL_0"}};
  extra["label2id"] = {{"LABEL_0", 0}};
  extra.erase("num_labels");
  body.config.extra_json = extra.dump();
  SaveOptions so;
  so.tokenizer_files = tokenizer_files;
  so.extra_tensors = {{"score.weight", reward.head().detach().to(model.dtype())}};
  model_save(body, dir, so);
}

void reward_load_head(RewardModel& reward, const std::string& name_or_dir) {
  const std::string dir = model_path_from_hub(name_or_dir);  // "org/name": its snapshot in the hub cache
  SafetensorsReader st(dir);
  LT_CHECK(st.contains("score.weight"),
           dir << ": tensor score.weight is missing (not a reward model saved as "
                  "<Family>ForSequenceClassification?)");
  at::Tensor w = st.tensor("score.weight");
  LT_CHECK(w.sizes() == reward.head().sizes(),
           st.file_of("score.weight") << ": tensor score.weight has shape " << w.sizes() << ", expected "
                                      << reward.head().sizes() << " (one label, the model's hidden size)");
  at::NoGradGuard no_grad;
  reward.head().copy_(w.to(at::kFloat));
}

std::shared_ptr<RewardModel> reward_load(const std::string& dir, const LoadOptions& options) {
  auto model = model_load(dir, options);
  LT_CHECK(model->config.score_head, dir << "/config.json: expected a reward model (architectures "
                                            "<Family>ForSequenceClassification), got "
                                         << model->config.arch_name());
  auto reward = std::make_shared<RewardModel>(model, 0);
  reward_load_head(*reward, dir);
  return reward;
}

}  // namespace luatune
