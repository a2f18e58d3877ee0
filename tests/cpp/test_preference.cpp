// Preference losses: the pair losses against hand-computed values (DPO sigmoid with and without
// label smoothing, IPO, hinge, ORPO), chunked per-token log-probs against ATen, the trainer's DPO
// step against a plain autograd computation of the same loss, the policy with adapters off against
// a separate frozen copy, cached reference log-probs against recomputed ones, and resume.
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>

#include "host/adapt/lora.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/train/loss.h"
#include "host/train/preference.h"
#include "host/train/trainer.h"
#include "tests/cpp/test_batch.h"
#include "tests/cpp/test_tiny.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kVocab = 61;

// `pairs` pairs of random sequences of length `len`: a shared 4-token prompt per pair, the
// responses differ; targets only on the response (the last len - 4 positions' next tokens), the
// rejected row shorter by `shorter` tokens of padding.
Batch pair_batch(int64_t pairs, int64_t len, uint64_t seed, int64_t shorter = 2) {
  Batch b = random_batch(kVocab, 2 * pairs, len, seed);
  for (int64_t p = 0; p < pairs; p++) {
    b.ids[2 * p + 1].narrow(0, 0, 4).copy_(b.ids[2 * p].narrow(0, 0, 4));
    b.targets[2 * p + 1].narrow(0, 0, len - 1).copy_(b.ids[2 * p + 1].narrow(0, 1, len - 1));
    for (int64_t r : {2 * p, 2 * p + 1}) b.targets[r].narrow(0, 0, 3).fill_(kIgnoreTarget);
    b.targets[2 * p + 1].narrow(0, len - 1 - shorter, shorter).fill_(kIgnoreTarget);
    b.ids[2 * p + 1].narrow(0, len - shorter, shorter).fill_(0);
  }
  b.segments = at::Tensor();
  b.target_tokens = b.targets.ne(kIgnoreTarget).sum().item<int64_t>();
  b.pairs = pairs;
  b.pair_ids = at::arange(1, pairs + 1, at::kLong) + static_cast<int64_t>(seed) * 100;
  return b;
}

std::vector<at::Tensor> grads(Trainer& t) {
  std::vector<at::Tensor> out;
  for (auto& [name, p] : t.parameters())
    out.push_back(p->grad().defined() ? p->grad().clone() : at::Tensor());
  return out;
}

// DPO's loss per pair by plain autograd over full logits: the reference for the trainer's path.
at::Tensor plain_dpo(const Model& policy, const Model& reference, const Batch& b, double beta) {
  auto seq = [&](const Model& m) {
    at::Tensor logp = at::log_softmax(m.forward(b.ids).to(at::kFloat), -1);  // (2P, T, V)
    at::Tensor valid = b.targets.ne(kIgnoreTarget);
    at::Tensor picked = logp.gather(2, b.targets.clamp_min(0).unsqueeze(2)).squeeze(2) * valid;
    return picked.sum(1);  // (2P)
  };
  at::Tensor pol = seq(policy), ref;
  {
    at::NoGradGuard ng;
    ref = seq(reference);
  }
  at::Tensor z = (pol.slice(0, 0, pol.size(0), 2) - pol.slice(0, 1, pol.size(0), 2)) -
                 (ref.slice(0, 0, ref.size(0), 2) - ref.slice(0, 1, ref.size(0), 2));
  return -at::log_sigmoid(beta * z);
}

std::string temp_dir(const std::string& name) {
  return test_temp_dir("pref_" + name);
}

at::Tensor scalar(double v) {
  return at::full({1}, v, at::kDouble);
}

}  // namespace

TEST(PreferenceLoss, PairLossesMatchHandComputedValues) {
  // Policy log-probs -10 / -12 and reference -11 / -11: z = 2; beta 0.1.
  at::Tensor pc = scalar(-10).requires_grad_(true), pr = scalar(-12), rc = scalar(-11), rr = scalar(-11);
  at::Tensor nc = at::full({1}, 4, at::kLong), nr = at::full({1}, 5, at::kLong);
  PreferenceOptions o;
  auto out = preference_pair_loss(o, pc, pr, rc, rr, nc, nr);
  EXPECT_NEAR(out[0].item<double>(), 0.5981388693815918, 1e-12);  // softplus(-0.2)
  EXPECT_NEAR(out[1].item<double>(), 0.1, 1e-12);                 // beta (pc - rc)
  EXPECT_NEAR(out[2].item<double>(), -0.1, 1e-12);
  out[0].sum().backward();
  EXPECT_NEAR(pc.grad().item<double>(), -0.04501660026875222, 1e-12);  // -beta sigmoid(-beta z)
  o.label_smoothing = 0.1;
  EXPECT_NEAR(preference_pair_loss(o, pc, pr, rc, rr, nc, nr)[0].item<double>(), 0.6181388693815918, 1e-12);
  o.label_smoothing = 0;
  o.loss = "ipo";  // ((pc-rc)/4 - (pr-rr)/5 - 1/(2 beta))^2 = (0.25 + 0.2 - 5)^2
  EXPECT_NEAR(preference_pair_loss(o, pc, pr, rc, rr, nc, nr)[0].item<double>(), 20.7025, 1e-10);
  o.loss = "hinge";  // relu(1 - beta z)
  EXPECT_NEAR(preference_pair_loss(o, pc, pr, rc, rr, nc, nr)[0].item<double>(), 0.8, 1e-12);
  o.loss = "orpo";  // mean log-probs -0.5 and -1: NLL 0.5 - beta log sigmoid(log odds ratio)
  auto orpo = preference_pair_loss(o, scalar(-2), scalar(-5), {}, {}, nc, nr);
  EXPECT_NEAR(orpo[0].item<double>(), 0.5320299785237537, 1e-12);
  EXPECT_NEAR(orpo[3].item<double>(), 0.9740769841801067, 1e-12);
}

TEST(PreferenceLoss, TokenLogprobsMatchATenValueAndGradients) {
  at::Generator gen = at::detail::createCPUGenerator(3);
  for (double softcap : {0.0, 5.0}) {
    TinyHead p = tiny_head(gen);
    p.t[2] = kIgnoreTarget;
    at::Tensor g = at::randn({13}, gen, at::TensorOptions(at::kFloat));  // a different gradient per row
    at::Tensor mine = chunked_token_logprobs(p.h, p.w, p.t, 4, softcap);
    (mine * g).sum().backward();
    auto [gh, gw] = p.take_grads();
    at::Tensor ref =
        at::log_softmax(p.logits(softcap), -1).gather(1, p.t.clamp_min(0).unsqueeze(1)).squeeze(1) *
        p.t.ne(kIgnoreTarget);
    (ref * g).sum().backward();
    EXPECT_TRUE(at::allclose(mine, ref, 1e-5, 1e-5));
    EXPECT_EQ(mine[2].item<float>(), 0.0f);
    EXPECT_TRUE(at::allclose(gh, p.h.grad(), 1e-5, 1e-6));
    EXPECT_TRUE(at::allclose(gw, p.w.grad(), 1e-5, 1e-6));
  }
}

TEST(PreferenceLoss, TrainerStepEqualsPlainAutogradDpo) {
  auto policy = tiny_model61(1), reference = tiny_model61(2);  // different weights: the loss is not log 2
  Batch b = pair_batch(3, 10, 5);
  at::Tensor plain = plain_dpo(*policy, *reference, b, 0.1).mean();
  plain.backward();
  std::vector<at::Tensor> want;
  for (auto& [name, p] : policy->trainable_parameters()) {
    want.push_back(p->grad().clone());
    p->mutable_grad() = at::Tensor();
  }
  for (int64_t micro : {0, 2}) {
    SCOPED_TRACE("micro_batch_size " + std::to_string(micro));
    auto pol = tiny_model61(1);
    TrainOptions o;
    o.learning_rate = 1e-3, o.schedule = "constant", o.batch_size = micro, o.max_grad_norm = 0;
    auto hook = std::make_shared<PreferenceLoss>(pol, tiny_model61(2), PreferenceOptions{});
    Trainer t(pol, o, {hook});
    // The gradient as the trainer forms it, before its update: evaluate the same loss with backward.
    auto [sum, count] = t.batch_loss(b, /*backward=*/true, /*normaliser=*/3);
    EXPECT_NEAR(sum / 3, plain.item<double>(), 1e-5);
    auto got = grads(t);
    for (size_t i = 0; i < want.size(); i++) EXPECT_TRUE(at::allclose(got[i], want[i], 1e-4, 1e-6)) << i;
  }
  // At the first step a policy equal to its reference has z = 0: the loss is log 2 for every pair.
  auto same = tiny_model61(7);
  TrainOptions o;
  o.learning_rate = 1e-3, o.schedule = "constant";
  Trainer t(same, o, {std::make_shared<PreferenceLoss>(same, tiny_model61(7), PreferenceOptions{})});
  StepStats s = t.step(b);
  EXPECT_NEAR(s.loss, std::log(2.0), 1e-6);
  bool saw_accuracy = false;
  for (auto& [k, v] : s.extra) saw_accuracy |= k == "preference_accuracy";
  EXPECT_TRUE(saw_accuracy);
  // A second step has moved the policy toward the chosen responses.
  EXPECT_LT(t.step(b).loss, std::log(2.0));
}

TEST(PreferenceLoss, AdaptersOffEqualsASeparateFrozenCopy) {
  LoraConfig lc;
  lc.r = 4, lc.alpha = 8, lc.dropout = 0;
  lc.targets = {"all-linear"};
  auto with_lora = [&](uint64_t seed) {
    auto m = tiny_model61(seed);
    lora_apply(*m, lc, 3);
    at::NoGradGuard ng;
    at::Generator gen = at::detail::createCPUGenerator(11);
    for (auto& [name, t] : m->adapter_parameters())  // B != 0: adapters change the output
      if (name.find("lora_B") != std::string::npos) t->copy_(at::randn(t->sizes(), gen) * 0.1);
    return m;
  };
  TrainOptions o;
  o.learning_rate = 1e-2, o.schedule = "constant", o.batch_size = 2;
  auto a = with_lora(1), b = with_lora(1);
  Trainer ta(a, o,
             {std::make_shared<PreferenceLoss>(a, tiny_model61(1),
                                               PreferenceOptions{})});  // base weights, no adapters
  Trainer tb(b, o, {std::make_shared<PreferenceLoss>(b, b, PreferenceOptions{})});  // adapters off
  for (int i = 0; i < 3; i++) {
    Batch batch = pair_batch(2, 9, 20 + i);
    StepStats sa = ta.step(batch), sb = tb.step(batch);
    EXPECT_EQ(sa.loss, sb.loss) << "step " << i + 1;
    EXPECT_NE(sa.loss, std::log(2.0));  // the adapters made the policy differ from its reference
  }
  auto pa = a->adapter_parameters(), pb = b->adapter_parameters();
  for (size_t i = 0; i < pa.size(); i++) EXPECT_TRUE(at::equal(*pa[i].second, *pb[i].second)) << pa[i].first;
}

TEST(PreferenceLoss, CachedReferenceEqualsRecomputedAndSurvivesAFile) {
  std::vector<Batch> data;
  for (int i = 0; i < 3; i++) data.push_back(pair_batch(2, 9, 40 + i));
  auto reference = tiny_model61(2);
  ReferenceCache cache;
  for (const Batch& b : data) {
    auto [sums, counts] = sequence_logprobs(*reference, b, 5);
    for (int64_t p = 0; p < b.pairs; p++)
      cache[b.pair_ids[p].item<int64_t>()] =
          ReferenceEntry{sums[2 * p].item<double>(), sums[2 * p + 1].item<double>(),
                         counts[2 * p].item<int64_t>(), counts[2 * p + 1].item<int64_t>()};
  }
  std::string dir = temp_dir("cache");
  fs::create_directories(dir);
  reference_cache_save(cache, dir + "/ref.safetensors");
  ReferenceCache back = reference_cache_load(dir + "/ref.safetensors");
  ASSERT_EQ(back.size(), cache.size());
  for (auto& [id, e] : cache) {
    EXPECT_EQ(back.at(id).chosen, e.chosen);
    EXPECT_EQ(back.at(id).rejected_tokens, e.rejected_tokens);
  }
  TrainOptions o;
  o.learning_rate = 1e-2, o.schedule = "constant";
  auto a = tiny_model61(1), b = tiny_model61(1);
  Trainer ta(a, o, {std::make_shared<PreferenceLoss>(a, reference, PreferenceOptions{})});
  auto cached = std::make_shared<PreferenceLoss>(b, nullptr, PreferenceOptions{});
  cached->set_reference_cache(back, dir + "/ref.safetensors");
  Trainer tb(b, o, {cached});
  for (const Batch& batch : data) EXPECT_NEAR(ta.step(batch).loss, tb.step(batch).loss, 1e-6);
  // A pair the cache does not know is named.
  Batch other = pair_batch(1, 9, 77);
  EXPECT_NE(error_of([&] { tb.step(other); }).find("no reference log-probs for pair 7701"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(PreferenceLoss, ResumeEqualsAStraightRunBitForBit) {
  for (const char* loss : {"sigmoid", "orpo"}) {
    SCOPED_TRACE(loss);
    PreferenceOptions po;
    po.loss = loss;
    auto ref = [&]() -> std::shared_ptr<Model> { return po.loss == "orpo" ? nullptr : tiny_model61(2); };
    TrainOptions o;
    o.learning_rate = 3e-3, o.warmup_steps = 1, o.max_steps = 4, o.batch_size = 2;
    std::vector<Batch> data;
    for (int i = 0; i < 4; i++) data.push_back(pair_batch(2, 8, 60 + i));
    auto straight = tiny_model61(1);
    Trainer a(straight, o, {std::make_shared<PreferenceLoss>(straight, ref(), po)});
    for (const Batch& b : data) a.step(b);
    o.output_dir = temp_dir(std::string("resume_") + loss);
    auto first = tiny_model61(1);
    Trainer b1(first, o, {std::make_shared<PreferenceLoss>(first, ref(), po)});
    for (int i = 0; i < 2; i++) b1.step(data[i]);
    b1.save();
    auto second = tiny_model61(9);
    Trainer b2(second, o, {std::make_shared<PreferenceLoss>(second, ref(), po)});
    EXPECT_EQ(b2.resume(), 2);
    for (int i = 2; i < 4; i++) b2.step(data[i]);
    expect_same_state(*straight, *second);
    fs::remove_all(o.output_dir);
  }
}

TEST(PreferenceLoss, ClearErrors) {
  auto m = tiny_model61(1);
  PreferenceOptions o;
  o.loss = "kto";
  EXPECT_EQ(error_of([&] { PreferenceLoss(m, tiny_model61(2), o); }),
            "train.preference: loss must be \"sigmoid\", \"ipo\", \"hinge\" or \"orpo\", got \"kto\"");
  EXPECT_NE(error_of([&] { PreferenceLoss(m, m, PreferenceOptions{}); }).find("needs a model with adapters"),
            std::string::npos);
  TrainOptions to;
  to.learning_rate = 1e-3, to.schedule = "constant", to.batch_size = 3;
  Trainer t(m, to, {std::make_shared<PreferenceLoss>(m, tiny_model61(2), PreferenceOptions{})});
  EXPECT_NE(error_of([&] { t.step(pair_batch(2, 8, 1)); }).find("would split a preference pair"),
            std::string::npos);
  EXPECT_NE(error_of([&] { t.step(random_batch(kVocab, 2, 8, 1)); }).find("needs preference batches"),
            std::string::npos);
}
