// DPO / IPO / hinge / ORPO (see preference.h). The pair loss is written once over summed
// log-probs, so the trainer's micro-batch path, the evaluation and the hand-computed test share it.
#include "host/train/preference.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>

#include "host/core/error.h"
#include "host/data/preference.h"
#include "host/dist/dist.h"
#include "host/io/safetensors.h"
#include "host/train/loss.h"

namespace luatune {

namespace {

void check_options(const PreferenceOptions& o) {
  LT_CHECK(
      o.loss == "sigmoid" || o.loss == "ipo" || o.loss == "hinge" || o.loss == "orpo",
      "train.preference: loss must be \"sigmoid\", \"ipo\", \"hinge\" or \"orpo\", got \"" << o.loss << "\"");
  LT_CHECK(o.beta > 0, "train.preference: beta must be positive, got " << o.beta);
  LT_CHECK(o.label_smoothing >= 0 && o.label_smoothing < 0.5,
           "train.preference: label_smoothing must be in [0, 0.5), got " << o.label_smoothing);
  LT_CHECK(o.label_smoothing == 0 || o.loss == "sigmoid",
           "train.preference: label_smoothing applies to the sigmoid loss only, not \"" << o.loss << "\"");
  LT_CHECK(o.chunk > 0, "train.preference: chunk must be positive");
}

// Per row of a (n, T) micro-batch: sum of token log-probs over its kept positions, and the count.
std::pair<at::Tensor, at::Tensor> rows_from_tokens(const at::Tensor& token_lp, const at::Tensor& keep,
                                                   int64_t n, int64_t T) {
  at::Tensor row = at::div(keep, T, "floor");
  at::Tensor sums = at::zeros({n}, token_lp.options()).index_add(0, row, token_lp);
  at::Tensor counts = at::zeros({n}, keep.options()).index_add(0, row, at::ones_like(keep));
  return {sums, counts};
}

}  // namespace

std::vector<at::Tensor> preference_pair_loss(const PreferenceOptions& o, const at::Tensor& pc,
                                             const at::Tensor& pr, const at::Tensor& rc, const at::Tensor& rr,
                                             const at::Tensor& nc, const at::Tensor& nr) {
  const double beta = o.beta;
  if (o.loss == "orpo") {
    // ORPO (Hong et al. 2024; TRL's odds_ratio_loss): average log-probs per token, log odds
    // log(p / (1 - p)) of each response, loss = NLL(chosen) - beta * log sigmoid(log odds ratio).
    at::Tensor ac = pc / nc.to(pc.scalar_type()), ar = pr / nr.to(pr.scalar_type());
    at::Tensor log_odds = (ac - ar) - (at::log1p(-at::exp(ac)) - at::log1p(-at::exp(ar)));
    at::Tensor loss = -ac - beta * at::log_sigmoid(log_odds);
    return {loss, beta * ac.detach(), beta * ar.detach(), log_odds.detach()};
  }
  at::Tensor chosen_reward = beta * (pc - rc).detach(), rejected_reward = beta * (pr - rr).detach();
  if (o.loss == "ipo") {
    // IPO (Azar et al. 2023) on log-probs averaged per token, as TRL does: (h - 1/(2 beta))^2.
    at::Tensor h = (pc - rc) / nc.to(pc.scalar_type()) - (pr - rr) / nr.to(pr.scalar_type());
    return {(h - 1.0 / (2.0 * beta)).pow(2), chosen_reward, rejected_reward};
  }
  at::Tensor z = (pc - pr) - (rc - rr);
  if (o.loss == "hinge") return {at::relu(1.0 - beta * z), chosen_reward, rejected_reward};
  const double eps = o.label_smoothing;
  at::Tensor loss = -(1.0 - eps) * at::log_sigmoid(beta * z) - eps * at::log_sigmoid(-beta * z);
  return {loss, chosen_reward, rejected_reward};
}

std::pair<at::Tensor, at::Tensor> sequence_logprobs(const Model& model, const Batch& batch, int64_t chunk) {
  at::NoGradGuard no_grad;
  const c10::Device dev = model.device();
  at::Tensor ids = batch.ids.to(dev);
  const int64_t n = ids.size(0), T = ids.size(1);
  ForwardOptions fo;
  if (batch.positions.defined()) fo.positions = batch.positions.to(dev);
  if (batch.segments.defined()) fo.segments = batch.segments.to(dev);
  at::Tensor targets = batch.targets.to(dev).reshape({-1});
  at::Tensor keep = targets.ne(kIgnoreTarget).nonzero().squeeze(1);
  at::Tensor h = model.hidden(ids, fo);
  h = h.reshape({-1, h.size(-1)}).index_select(0, keep);
  at::Tensor lp = chunked_token_logprobs(h, model.output_weight(), targets.index_select(0, keep), chunk,
                                         model.config.final_logit_softcap);
  auto [sums, counts] = rows_from_tokens(lp.to(at::kDouble), keep, n, T);
  return {sums.cpu(), counts.cpu()};
}

ReferenceCache reference_logprobs(Model& model, bool adapters_off, const PreferenceDataset& data,
                                  int64_t batch_size, int64_t chunk, ReferenceCache cache) {
  LT_CHECK(batch_size > 0, "train.reference_logprobs: batch_size must be positive");
  if (adapters_off) model.set_adapters_enabled(false);
  model.set_training(false);
  try {
    for (int64_t p0 = 0; p0 < data.size(); p0 += batch_size) {
      std::vector<int64_t> pairs;
      for (int64_t p = p0; p < std::min(data.size(), p0 + batch_size); p++) pairs.push_back(p);
      Batch b = data.batch(pairs);
      auto [sums, counts] = sequence_logprobs(model, b, chunk);
      for (size_t i = 0; i < pairs.size(); i++) {
        const int64_t c = 2 * static_cast<int64_t>(i), r = c + 1;
        cache[b.pair_ids[static_cast<int64_t>(i)].item<int64_t>()] =
            ReferenceEntry{sums[c].item<double>(), sums[r].item<double>(), counts[c].item<int64_t>(),
                           counts[r].item<int64_t>()};
      }
    }
  } catch (...) {
    if (adapters_off) model.set_adapters_enabled(true);
    throw;
  }
  if (adapters_off) model.set_adapters_enabled(true);
  return cache;
}

void reference_cache_save(const ReferenceCache& cache, const std::string& path) {
  const int64_t n = static_cast<int64_t>(cache.size());
  at::Tensor ids = at::empty({n}, at::kLong), nc = at::empty({n}, at::kLong), nr = at::empty({n}, at::kLong);
  at::Tensor c = at::empty({n}, at::kDouble), r = at::empty({n}, at::kDouble);
  int64_t i = 0;
  for (const auto& [id, e] : cache) {
    ids[i] = id;
    c[i] = e.chosen;
    r[i] = e.rejected;
    nc[i] = e.chosen_tokens;
    nr[i] = e.rejected_tokens;
    i++;
  }
  safetensors_save_file(path,
                        {{"pair_ids", ids},
                         {"chosen_logps", c},
                         {"rejected_logps", r},
                         {"chosen_tokens", nc},
                         {"rejected_tokens", nr}},
                        {{"format", "luatune.reference_logprobs"}});
}

ReferenceCache reference_cache_load(const std::string& path) {
  SafetensorsReader st(path);
  auto get = [&](const char* name, at::ScalarType dtype) {
    LT_CHECK(st.contains(name),
             path << ": tensor " << name << " is missing (not a reference log-prob cache?)");
    at::Tensor t = st.tensor(name);
    LT_CHECK(t.dim() == 1 && t.scalar_type() == dtype,
             path << ": tensor " << name << " must be 1-D " << (dtype == at::kLong ? "I64" : "F64")
                  << ", got " << t.sizes() << " " << safetensors_dtype_name(t.scalar_type()));
    return t.contiguous();
  };
  at::Tensor ids = get("pair_ids", at::kLong), c = get("chosen_logps", at::kDouble);
  at::Tensor r = get("rejected_logps", at::kDouble), nc = get("chosen_tokens", at::kLong);
  at::Tensor nr = get("rejected_tokens", at::kLong);
  const int64_t n = ids.size(0);
  for (const at::Tensor* t : {&c, &r, &nc, &nr})
    LT_CHECK(t->size(0) == n, path << ": the cache's tensors have different lengths (" << n << " pair_ids)");
  ReferenceCache cache;
  for (int64_t i = 0; i < n; i++)
    cache[ids[i].item<int64_t>()] = ReferenceEntry{c[i].item<double>(), r[i].item<double>(),
                                                   nc[i].item<int64_t>(), nr[i].item<int64_t>()};
  return cache;
}

// ============================================================================================
// The hook

PreferenceLoss::PreferenceLoss(std::shared_ptr<Model> policy, std::shared_ptr<Model> reference,
                               PreferenceOptions options)
    : PairLossHook("the preference loss (" + options.loss + ")"),
      policy_(std::move(policy)),
      reference_(std::move(reference)),
      options_(std::move(options)) {
  check_options(options_);
  LT_CHECK(policy_ != nullptr, "train.preference: model is nil");
  if (options_.loss == "orpo") {
    LT_CHECK(!reference_, "train.preference: ORPO uses no reference model; leave reference out");
    return;
  }
  if (reference_ == policy_) {
    if (policy_->adapter_parameters().empty())
      fail("train.preference: reference = \"adapters_off\" needs a model with adapters (lora.apply / qlora)",
           "for full fine-tuning pass a frozen copy: reference = models.load(base_model, ...)");
  } else if (reference_) {
    LT_CHECK(reference_->config.vocab_size == policy_->config.vocab_size,
             "train.preference: the reference's vocabulary (" << reference_->config.vocab_size
                                                              << ") differs from the model's ("
                                                              << policy_->config.vocab_size << ")");
    for (auto& [name, t] : reference_->named_parameters()) t->set_requires_grad(false);
    for (auto& [name, t] : reference_->adapter_parameters()) t->set_requires_grad(false);
    reference_->set_training(false);
  }
}

void PreferenceLoss::set_reference_cache(ReferenceCache cache, std::string source) {
  LT_CHECK(options_.loss != "orpo", "train.preference: ORPO uses no reference log-probs");
  cache_ = std::move(cache);
  cache_source_ = std::move(source);
  use_cache_ = true;
  reference_.reset();
}

std::pair<at::Tensor, at::Tensor> PreferenceLoss::reference_rows(const MicroBatch& mb) {
  const int64_t n = mb.ids.size(0);
  if (use_cache_) {
    at::Tensor sums = at::empty({n}, at::kDouble), counts = at::empty({n}, at::kLong);
    for (int64_t i = 0; i < n / 2; i++) {
      const int64_t id = mb.batch->pair_ids[mb.row_begin / 2 + i].item<int64_t>();
      auto it = cache_.find(id);
      LT_CHECK(it != cache_.end(), cache_source_
                                       << ": no reference log-probs for pair " << id
                                       << " of this batch (the cache was computed for other data, another "
                                          "tokenizer or max_length)");
      sums[2 * i] = it->second.chosen;
      sums[2 * i + 1] = it->second.rejected;
      counts[2 * i] = it->second.chosen_tokens;
      counts[2 * i + 1] = it->second.rejected_tokens;
    }
    return {sums.to(mb.ids.device()), counts.to(mb.ids.device())};
  }
  Batch rows;
  rows.ids = mb.ids;
  rows.positions = mb.positions;
  rows.segments = mb.segments;
  rows.targets = mb.batch->targets.narrow(0, mb.row_begin, n);
  const bool same = reference_ == policy_;
  if (same) policy_->set_adapters_enabled(false);
  std::pair<at::Tensor, at::Tensor> out;
  try {
    out = sequence_logprobs(*reference_, rows, options_.chunk);
  } catch (...) {
    if (same) policy_->set_adapters_enabled(true);
    throw;
  }
  if (same) policy_->set_adapters_enabled(true);
  return {out.first.to(mb.ids.device()), out.second.to(mb.ids.device())};
}

at::Tensor PreferenceLoss::micro_loss(const MicroBatch& mb, const at::Tensor& ce_sum) {
  LT_CHECK(mb.batch && mb.batch->pairs > 0 && mb.row_begin % 2 == 0 && mb.ids.size(0) % 2 == 0,
           "train: the preference loss needs whole pairs in each micro-batch");
  const int64_t n = mb.ids.size(0), T = mb.ids.size(1);
  at::Tensor lp = chunked_token_logprobs(mb.hidden, policy_->output_weight(), mb.targets, options_.chunk,
                                         policy_->config.final_logit_softcap);
  auto [sums, counts] = rows_from_tokens(lp, mb.keep, n, T);  // (n) float32, (n) int64
  at::Tensor pc = sums.slice(0, 0, n, 2), pr = sums.slice(0, 1, n, 2);
  at::Tensor nc = counts.slice(0, 0, n, 2), nr = counts.slice(0, 1, n, 2);
  at::Tensor rc, rr;
  if (options_.loss != "orpo") {
    auto [ref_sums, ref_counts] = reference_rows(mb);
    at::Tensor ref = ref_sums.to(at::kFloat);
    rc = ref.slice(0, 0, n, 2);
    rr = ref.slice(0, 1, n, 2);
  }
  std::vector<at::Tensor> out = preference_pair_loss(options_, pc, pr, rc, rr, nc, nr);
  at::Tensor loss = out[0].sum();
  // Statistics as sums over pairs, read (one sync) by stats().
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> s = {out[1].sum(), out[2].sum(), (out[1] - out[2]).sum(), out[1].gt(out[2]).sum(),
                               pc.sum(),     pr.sum(),     pc.gt(pr).sum()};
  if (options_.loss == "orpo") {
    s.push_back((-pc / nc.to(pc.scalar_type())).sum());
    s.push_back(at::log_sigmoid(out[3]).sum());
    s.push_back(out[3].sum());
  }
  stats_.add(s, n / 2);
  return loss;
}

std::vector<std::pair<std::string, double>> PreferenceLoss::stats(bool training) {
  std::vector<const char*> names = {"rewards_chosen",      "rewards_rejected", "reward_margin",
                                    "preference_accuracy", "logps_chosen",     "logps_rejected",
                                    "logps_accuracy"};
  if (options_.loss == "orpo") names.insert(names.end(), {"nll_loss", "log_odds_ratio", "log_odds_chosen"});
  return stats_.means(names);
}

// ============================================================================================
// PairStats and PairLossHook

void PairStats::clear() {
  sums_ = at::Tensor();
  pairs_ = 0;
}

void PairStats::add(const std::vector<at::Tensor>& sums, int64_t pairs) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> d;
  for (const at::Tensor& t : sums) d.push_back(t.to(at::kDouble));
  at::Tensor s = at::stack(d);
  LT_ASSERT(!sums_.defined() || sums_.sizes() == s.sizes(),
            "PairStats: a different number of statistics than before");
  sums_ = sums_.defined() ? sums_ + s : s;
  pairs_ += pairs;
}

std::vector<std::pair<std::string, double>> PairStats::means(const std::vector<const char*>& names) const {
  // One host sync and one all-reduce: the sums, then the pair count last. A rank without pairs
  // (data parallel) contributes zeros.
  std::vector<double> v(names.size() + 1, 0.0);
  if (sums_.defined()) {
    at::Tensor host = sums_.cpu();
    const int64_t k = std::min<int64_t>(host.numel(), static_cast<int64_t>(names.size()));
    std::copy(host.data_ptr<double>(), host.data_ptr<double>() + k, v.begin());
  }
  v.back() = static_cast<double>(pairs_);
  v = dist_sum(std::move(v));
  const double pairs = v.back();
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < names.size(); i++) out.emplace_back(names[i], pairs > 0 ? v[i] / pairs : 0.0);
  return out;
}

int64_t PairLossHook::loss_units(const Batch& batch) const {
  LT_CHECK(batch.pair_ids.defined(),
           "train: " << loss_name_ << " needs preference batches (data.preferences), got a batch of "
                     << batch.ids.size(0) << " rows without pairs");
  return batch.pairs;
}

}  // namespace luatune
