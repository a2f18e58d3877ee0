// The trainer's promises, each checked against a straightforward computation: chunked cross-entropy
// equals ATen's, micro-batches equal the large batch, recomputed layers give the same gradients,
// padding and packing leave a document's loss alone, and a resumed run equals a straight one bit
// for bit on CPU.
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "host/adapt/lora.h"
#include "host/core/error.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/train/loss.h"
#include "host/train/trainer.h"
#include "tests/cpp/test_batch.h"
#include "tests/cpp/test_tiny.h"

using namespace luatune;
namespace fs = std::filesystem;

namespace {

// Rows of random documents over this file's 61-token vocabulary, every next token a target.
Batch random_batch(int64_t rows, int64_t len, uint64_t seed) {
  return luatune::random_batch(61, rows, len, seed);
}

std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("luatune_test_train_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

std::vector<at::Tensor> grads(Trainer& t) {
  std::vector<at::Tensor> out;
  for (auto& [name, p] : t.parameters())
    out.push_back(p->grad().defined() ? p->grad().clone() : at::Tensor());
  return out;
}

void zero_grads(Trainer& t) {
  for (auto& [name, p] : t.parameters()) p->mutable_grad() = at::Tensor();
}

}  // namespace

TEST(ChunkedCE, MatchesATenValueAndGradients) {
  at::Generator gen = at::detail::createCPUGenerator(0);
  for (double softcap : {0.0, 5.0}) {
    TinyHead p = tiny_head(gen);
    p.t[3] = kIgnoreTarget;
    p.t[9] = kIgnoreTarget;
    at::Tensor mine = chunked_cross_entropy(p.h, p.w, p.t, 4, softcap);
    mine.backward();
    auto [gh, gw] = p.take_grads();
    at::Tensor ref = at::cross_entropy_loss(p.logits(softcap), p.t, {}, at::Reduction::Sum, kIgnoreTarget);
    ref.backward();
    EXPECT_NEAR(mine.item<double>(), ref.item<double>(), 1e-4);
    EXPECT_TRUE(at::allclose(gh, p.h.grad(), 1e-5, 1e-6));
    EXPECT_TRUE(at::allclose(gw, p.w.grad(), 1e-5, 1e-6));
  }
}

TEST(Trainer, MicroBatchesEqualTheLargeBatch) {
  auto m = tiny_model61();
  TrainOptions o;
  o.schedule = "constant";
  Trainer whole(m, o);
  Batch b = random_batch(8, 9, 3);
  // Make the rows carry different numbers of targets, so per-micro-batch averaging would differ.
  b.targets[0].narrow(0, 0, 6).fill_(kIgnoreTarget);
  b.target_tokens = b.targets.ne(kIgnoreTarget).sum().item<int64_t>();
  auto [l1, n1] = whole.batch_loss(b, true, b.target_tokens);
  auto g1 = grads(whole);
  zero_grads(whole);
  TrainOptions o4 = o;
  o4.batch_size = 2;
  Trainer micro(m, o4);
  auto [l4, n4] = micro.batch_loss(b, true, b.target_tokens);
  auto g4 = grads(micro);
  EXPECT_EQ(n1, n4);
  EXPECT_NEAR(l1, l4, 1e-4);
  for (size_t i = 0; i < g1.size(); i++) EXPECT_TRUE(at::allclose(g1[i], g4[i], 1e-4, 1e-6)) << i;
}

TEST(Trainer, RecomputedLayersGiveTheSameGradients) {
  for (const char* arch : {"llama", "gemma2"}) {
    auto m = tiny_model61(1, arch);
    TrainOptions o;
    o.schedule = "constant";
    Trainer plain(m, o);
    Batch b = random_batch(2, 10, 4);
    plain.batch_loss(b, true, b.target_tokens);
    auto g1 = grads(plain);
    zero_grads(plain);
    o.gradient_checkpointing = true;
    Trainer ckpt(m, o);
    ckpt.batch_loss(b, true, b.target_tokens);
    auto g2 = grads(ckpt);
    for (size_t i = 0; i < g1.size(); i++)
      EXPECT_TRUE(at::allclose(g1[i], g2[i], 1e-5, 1e-7)) << arch << " " << i;
  }
}

TEST(Trainer, PaddingAndPackingLeaveADocumentsLossAlone) {
  auto m = tiny_model61();
  TrainOptions o;
  o.schedule = "constant";
  Trainer t(m, o);
  at::NoGradGuard g;
  Batch a = random_batch(1, 6, 5), b = random_batch(1, 4, 6);
  double la = t.batch_loss(a, false, 1).first, lb = t.batch_loss(b, false, 1).first;
  // a padded to 9 columns: padding is its own segment with no targets.
  Batch pad = a;
  pad.ids = at::cat({a.ids, at::zeros({1, 3}, at::kLong)}, 1);
  pad.targets = at::cat({a.targets, at::full({1, 3}, kIgnoreTarget, at::kLong)}, 1);
  pad.positions = at::cat({a.positions, at::arange(3, at::kLong).unsqueeze(0)}, 1);
  pad.segments = at::cat({a.segments, at::ones({1, 3}, at::kLong)}, 1);
  EXPECT_NEAR(t.batch_loss(pad, false, 1).first, la, 1e-5);
  // a and b packed into one row: positions restart, segments differ.
  Batch packed;
  packed.ids = at::cat({a.ids, b.ids}, 1);
  packed.targets = at::cat({a.targets, b.targets}, 1);
  packed.positions = at::cat({a.positions, b.positions}, 1);
  packed.segments = at::cat({a.segments, at::ones({1, 4}, at::kLong)}, 1);
  EXPECT_NEAR(t.batch_loss(packed, false, 1).first, la + lb, 1e-4);
}

TEST(Trainer, SchedulesWarmUpThenDecay) {
  auto m = tiny_model61();
  TrainOptions o;
  o.learning_rate = 1.0, o.warmup_steps = 10, o.max_steps = 110, o.schedule = "cosine", o.min_lr_ratio = 0.1;
  Trainer t(m, o);
  EXPECT_DOUBLE_EQ(t.lr_at(5), 0.5);
  EXPECT_DOUBLE_EQ(t.lr_at(10), 1.0);
  EXPECT_NEAR(t.lr_at(60), 0.55, 1e-12);  // halfway down the cosine, between 1 and 0.1
  EXPECT_NEAR(t.lr_at(110), 0.1, 1e-12);
  o.schedule = "linear";
  Trainer lin(m, o);
  EXPECT_NEAR(lin.lr_at(35), 1.0 - 0.9 * 0.25, 1e-12);
}

TEST(Trainer, TrainingLowersTheLoss) {
  auto m = tiny_model61();
  TrainOptions o;
  o.learning_rate = 1e-2, o.schedule = "constant";
  Trainer t(m, o);
  Batch b = random_batch(4, 12, 7);
  double first = t.step(b).loss, last = first;
  for (int i = 0; i < 30; i++) last = t.step(b).loss;
  EXPECT_LT(last, first * 0.5);  // memorising one batch
  EXPECT_EQ(t.step_count(), 31);
}

TEST(Trainer, ClippingScalesGradientsToTheMaxNormAsTorchDoes) {
  // SGD with lr 1 and no momentum: the update is the clipped gradient itself.
  for (double max_norm : {0.05, 1e6}) {  // clipped, and left alone
    SCOPED_TRACE("max_grad_norm " + std::to_string(max_norm));
    TrainOptions o;
    o.optimizer = "sgd", o.learning_rate = 1, o.schedule = "constant", o.max_grad_norm = max_norm;
    Batch b = random_batch(4, 9, 11);
    Trainer ref(tiny_model61(), o);
    ref.batch_loss(b, true, b.target_tokens);
    std::vector<at::Tensor> g = grads(ref);
    double sq = 0;
    for (const at::Tensor& x : g) sq += x.to(at::kDouble).pow(2).sum().item<double>();
    const double norm = std::sqrt(sq), coef = norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
    Trainer t(tiny_model61(), o);
    std::vector<at::Tensor> before;
    for (auto& [name, p] : t.parameters()) before.push_back(p->detach().clone());
    StepStats s = t.step(b);
    EXPECT_NEAR(s.grad_norm, norm, 1e-5 * norm);
    for (size_t i = 0; i < before.size(); i++)
      EXPECT_TRUE(at::allclose(*t.parameters()[i].second, before[i] - g[i] * coef, 1e-5, 1e-7))
          << t.parameters()[i].first;
  }
}

TEST(Trainer, ResumeEqualsAStraightRunBitForBit) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 + fp32 master" : "fp32");
    TrainOptions o;
    o.learning_rate = 3e-3, o.warmup_steps = 2, o.max_steps = 6, o.weight_decay = 0.01, o.batch_size = 2;
    std::vector<Batch> data;
    for (int i = 0; i < 6; i++) data.push_back(random_batch(4, 8, 100 + i));
    auto straight = tiny_model61();
    if (bf16) straight->to(at::kCPU, at::kBFloat16);
    Trainer a(straight, o);
    for (const Batch& b : data) a.step(b);

    o.output_dir = temp_dir(bf16 ? "bf16" : "f32");
    o.keep_last = 1;
    auto first = tiny_model61();
    if (bf16) first->to(at::kCPU, at::kBFloat16);
    Trainer b1(first, o);
    for (int i = 0; i < 3; i++) b1.step(data[i]);
    b1.save();
    auto second = tiny_model61(/*seed=*/99);  // different weights: resume must overwrite them
    if (bf16) second->to(at::kCPU, at::kBFloat16);
    Trainer b2(second, o);
    EXPECT_EQ(b2.resume(), 3);
    for (int i = 3; i < 6; i++) b2.step(data[i]);
    expect_same_state(*straight, *second);
    fs::remove_all(o.output_dir);
  }
}

TEST(Trainer, KeepsTheLastCheckpointsAndIgnoresIncompleteOnes) {
  auto m = tiny_model61();
  TrainOptions o;
  o.schedule = "constant", o.output_dir = temp_dir("keep"), o.save_steps = 1, o.keep_last = 2;
  Trainer t(m, o);
  for (int i = 0; i < 4; i++) t.step(random_batch(2, 6, i));
  auto names = [&] {
    std::vector<std::string> n;
    for (const auto& e : fs::directory_iterator(o.output_dir + "/checkpoints"))
      n.push_back(e.path().filename());
    std::sort(n.begin(), n.end());
    return n;
  };
  // Step 4's checkpoint waits for its safe point (the recipe logs the step first); each earlier
  // one was written when the next step began.
  EXPECT_EQ(names(), (std::vector<std::string>{"step-0000002", "step-0000003"}));
  t.reach_safe_point();  // what the batches iterator's next call does
  EXPECT_EQ(names(), (std::vector<std::string>{"step-0000003", "step-0000004"}));
  fs::create_directories(o.output_dir + "/checkpoints/step-0000009");  // a crash mid-save: no trainer.json
  Trainer again(tiny_model61(), o);
  EXPECT_EQ(again.resume(), 4);
  fs::remove_all(o.output_dir);
}

TEST(Trainer, NanLossStopsWithTheStepAndAHint) {
  auto m = tiny_model61();
  TrainOptions o;
  o.schedule = "constant";
  Trainer t(m, o);
  t.step(random_batch(2, 6, 1));
  {
    at::NoGradGuard g;
    m->norm.fill_(std::numeric_limits<float>::quiet_NaN());
  }
  try {
    t.step(random_batch(2, 6, 2));
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("train: loss is nan at step 2; stopping before the weights are updated", 0), 0u)
        << msg;
    EXPECT_NE(msg.find("HINT: lower the learning rate"), std::string::npos);
  }
}

namespace {
// After each backward, puts `value` into one element of the first parameter's gradient (armed only).
struct PoisonGradient : TrainerHook {
  Trainer* trainer = nullptr;
  float value = 0;
  bool armed = false;
  void after_backward() override {
    if (!armed) return;
    at::NoGradGuard g;
    trainer->parameters()[0].second->mutable_grad().view({-1})[0].fill_(value);
  }
};
}  // namespace

// A NaN or inf gradient with a finite loss: the step is skipped (weights and AdamW's moments as they
// were), the run stops at that step with the norm named, and the step count stays; disarmed, the
// same trainer steps on exactly as a run that never met it. Before, the clip factor carried the NaN into
// every weight (or, for inf, a factor 0 still moved the moments and decayed the weights).
TEST(Trainer, NonFiniteGradientWithAFiniteLossSkipsTheUpdateAndStops) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    SCOPED_TRACE(std::isnan(bad) ? "nan" : "inf");
    auto m = tiny_model61();
    auto poison = std::make_shared<PoisonGradient>();
    TrainOptions o;
    o.schedule = "constant", o.learning_rate = 1e-2, o.weight_decay = 0.1;
    Trainer t(m, o, {poison});
    poison->trainer = &t;
    poison->value = bad;
    t.step(random_batch(2, 6, 1));
    std::vector<at::Tensor> before;
    for (auto& [name, p] : t.parameters()) before.push_back(p->detach().clone());
    poison->armed = true;
    try {
      t.step(random_batch(2, 6, 2));
      FAIL() << "no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(std::string("train: the gradient norm is ") + (std::isnan(bad) ? "nan" : "inf") +
                              " at step 2 (the loss, ",
                          0),
                0u)
          << msg;
      EXPECT_NE(msg.find("is finite); stopping before the weights are updated"), std::string::npos) << msg;
    }
    EXPECT_EQ(t.step_count(), 1);
    for (size_t i = 0; i < before.size(); i++)
      EXPECT_TRUE(at::equal(*t.parameters()[i].second, before[i])) << t.parameters()[i].first;
    // Disarmed, the same step again: bit for bit what a run that never met the bad gradient does,
    // so AdamW's moments and step were untouched too.
    poison->armed = false;
    StepStats s = t.step(random_batch(2, 6, 2));
    EXPECT_TRUE(std::isfinite(s.grad_norm));
    EXPECT_EQ(t.step_count(), 2);
    Trainer straight(tiny_model61(), o);
    straight.step(random_batch(2, 6, 1));
    straight.step(random_batch(2, 6, 2));
    for (size_t i = 0; i < before.size(); i++)
      EXPECT_TRUE(at::equal(*t.parameters()[i].second, *straight.parameters()[i].second))
          << t.parameters()[i].first;
  }
}

// transformers' decay groups (Trainer.get_decay_parameter_names): biases and norm weights take none.
TEST(Trainer, WeightDecayNamesFollowTransformersGroups) {
  for (const char* n : {"model.embed_tokens.weight", "lm_head.weight", "model.layers.0.mlp.down_proj.weight",
                        "model.layers.0.self_attn.q_proj.lora_A.weight", "model.normalizer.weight",
                        "model.layers.0.self_attn.q_proj.lora_magnitude_vector"})
    EXPECT_TRUE(train_decays(n)) << n;
  for (const char* n :
       {"model.norm.weight", "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight", "model.layers.0.self_attn.q_proj.bias",
        "model.layers.0.self_attn.q_norm.weight", "model.layers.1.pre_feedforward_layernorm.weight",
        "norm.weight", "model.final_RMSNorm.weight", "x.k_norm"})
    EXPECT_FALSE(train_decays(n)) << n;
}

// One AdamW step with weight_decay 0.1 and every gradient zero: PyTorch's AdamW multiplies a decayed
// weight by 1 - lr * wd and leaves the rest as it was (the Adam term is 0 / (0 + eps) = 0); with
// transformers' groups, Qwen2's q/k/v biases and every norm weight are those left alone.
TEST(Trainer, WeightDecaySkipsBiasesAndNormWeights) {
  auto m = tiny_model61(1, "qwen2", R"(, "attention_bias": true)");
  struct ZeroGradients : TrainerHook {
    Trainer* trainer = nullptr;
    void after_backward() override {
      for (auto& [name, p] : trainer->parameters()) p->mutable_grad().zero_();
    }
  };
  auto zero = std::make_shared<ZeroGradients>();
  TrainOptions o;
  o.schedule = "constant", o.learning_rate = 0.5, o.weight_decay = 0.1;
  Trainer t(m, o, {zero});
  zero->trainer = &t;
  std::vector<at::Tensor> before;
  for (auto& [name, p] : t.parameters()) before.push_back(p->detach().clone());
  t.step(random_batch(2, 6, 1));
  int decayed = 0, kept = 0;
  for (size_t i = 0; i < before.size(); i++) {
    const std::string& name = t.parameters()[i].first;
    const bool decays = name.find("bias") == std::string::npos && name.find("norm") == std::string::npos;
    at::Tensor want = decays ? before[i] * (1 - 0.5 * 0.1) : before[i];
    EXPECT_TRUE(at::allclose(*t.parameters()[i].second, want, 1e-6, 1e-7)) << name;
    (decays ? decayed : kept)++;
  }
  EXPECT_GT(decayed, 0);
  EXPECT_EQ(kept, 2 * (3 + 2) + 1);  // per layer q/k/v biases and two norms, then the final norm
}

TEST(Trainer, LoraResumeEqualsAStraightRunBitForBit) {
  // Dropout on: the resumed run must also replay the random state.
  LoraConfig lc;
  lc.r = 4, lc.alpha = 8, lc.dropout = 0.1, lc.targets = {"q_proj", "v_proj", "down_proj"};
  TrainOptions o;
  o.learning_rate = 1e-2, o.warmup_steps = 1, o.max_steps = 6, o.gradient_checkpointing = true;
  std::vector<Batch> data;
  for (int i = 0; i < 6; i++) data.push_back(random_batch(2, 8, 200 + i));
  at::manual_seed(5);
  auto straight = tiny_model61();
  lora_apply(*straight, lc, 1);
  Trainer a(straight, o);
  for (const Batch& b : data) a.step(b);
  EXPECT_EQ(a.parameters().size(), 2u * 3u * 2u);  // A and B of 3 targets in 2 layers: base frozen

  at::manual_seed(5);
  o.output_dir = temp_dir("lora");
  auto first = tiny_model61();
  lora_apply(*first, lc, 1);
  Trainer b1(first, o);
  for (int i = 0; i < 3; i++) b1.step(data[i]);
  b1.save();
  at::manual_seed(77);  // the process that resumes starts from another random state
  auto second = tiny_model61();
  lora_apply(*second, lc, 2);  // and other adapter weights
  Trainer b2(second, o);
  EXPECT_EQ(b2.resume(), 3);
  for (int i = 3; i < 6; i++) b2.step(data[i]);
  auto pa = straight->adapter_parameters(), pb = second->adapter_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); i++) EXPECT_TRUE(at::equal(*pa[i].second, *pb[i].second)) << pa[i].first;
  fs::remove_all(o.output_dir);
}
