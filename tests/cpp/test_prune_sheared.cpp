// The Sheared-LLaMA pruner (host/prune/sheared.h) against hand-computed values: hard-concrete
// samples, the expected sparsity and the Lagrangian with its gradients, deterministic masks with
// exact counts (the GQA rule included), the masked model equal to the finalised pruned one, mask
// training that moves towards the target, and an exact resume from a trainer checkpoint.
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>

#include "host/adapt/lora.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/prune/sheared.h"
#include "host/train/loss.h"
#include "tests/cpp/test_batch.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
namespace fs = std::filesystem;

namespace {

// A tiny model: `heads` query heads in `kv` groups of head_dim 8, `layers` layers.
std::shared_ptr<Model> tiny(const std::string& arch, int64_t heads, int64_t kv, int64_t layers = 4,
                            uint64_t seed = 1) {
  std::string fields = R"({"vocab_size": 61, "hidden_size": 32, "intermediate_size": 40, "head_dim": 8)";
  fields += ", \"num_hidden_layers\": " + std::to_string(layers) +
            ", \"num_attention_heads\": " + std::to_string(heads) +
            ", \"num_key_value_heads\": " + std::to_string(kv);
  if (arch == "gemma2") fields += R"(, "sliding_window": 4)";
  return model_init(model_config_with(arch, fields + "}", "test"), seed, at::kFloat, at::kCPU);
}

ShearedOptions opts(double layers, double heads, double hidden, double intermediate) {
  ShearedOptions o;
  o.target.layers = layers;
  o.target.heads = heads;
  o.target.hidden = hidden;
  o.target.intermediate = intermediate;
  return o;
}

at::Tensor& tensor(ShearedPruner& p, const std::string& name) {
  for (auto& [n, t] : p.named_tensors())
    if (n == name) return *t;
  ADD_FAILURE() << "no tensor " << name;
  static at::Tensor none;
  return none;
}

// Overwrites every log_alpha with values drawn from N(0, 2), clamped to the reference's range.
void randomize(ShearedPruner& p, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  at::NoGradGuard no_grad;
  for (auto& [name, t] : p.named_tensors())
    if (name.find("log_alpha") != std::string::npos)
      t->copy_(at::normal(0.0, 2.0, t->sizes(), gen, at::TensorOptions(at::kFloat)).clamp(-4.6, 4.6));
}

std::string temp_dir(const std::string& name) {
  return test_temp_dir("sheared_" + name);
}

// P(z = 0) by hand: sigmoid(ln(0.1 / 1.1) * 2/3 - log_alpha).
double q0(double log_alpha) {
  double x = std::log(0.1 / 1.1) * (2.0 / 3.0) - log_alpha;
  return 1.0 / (1.0 + std::exp(-x));
}

}  // namespace

TEST(Sheared, ShapesAndNames) {
  ShearedPruner p(tiny("llama", 8, 2), opts(0.5, 0.5, 0.25, 0.5));
  EXPECT_EQ(p.kinds(), (std::vector<std::string>{"layers", "heads", "intermediate", "hidden"}));
  EXPECT_FALSE(p.target().whole_groups);
  EXPECT_EQ(tensor(p, "l0.layers.log_alpha").sizes(), at::IntArrayRef({4}));
  EXPECT_EQ(tensor(p, "l0.heads.log_alpha").sizes(), at::IntArrayRef({4, 8}));  // per query head
  EXPECT_EQ(tensor(p, "l0.intermediate.log_alpha").sizes(), at::IntArrayRef({4, 40}));
  EXPECT_EQ(tensor(p, "l0.hidden.log_alpha").sizes(), at::IntArrayRef({32}));
  auto groups = p.parameter_groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].params.size(), 4u);
  EXPECT_EQ(groups[0].lr, 1.0);
  EXPECT_EQ(groups[1].lr, -1.0);
  EXPECT_EQ(groups[1].params.size(), 8u);  // 4 x (lambda1, lambda2)
  EXPECT_FALSE(groups[0].follow_schedule || groups[0].clip || groups[1].follow_schedule || groups[1].clip);
  // log_alpha ~ N(5, 0.01) clamped to ln 100: every mask starts on.
  EXPECT_TRUE(at::allclose(tensor(p, "l0.layers.log_alpha"), at::full({4}, std::log(100.0))));
  // Whole KV groups: 4 heads in 2 groups, per_group = round(2 * 0.2) = 0.
  ShearedPruner g(tiny("llama", 4, 2), opts(0, 0.8, 0, 0));
  EXPECT_TRUE(g.target().whole_groups);
  EXPECT_EQ(g.kinds(), std::vector<std::string>{"heads"});
  EXPECT_EQ(tensor(g, "l0.heads.log_alpha").sizes(), at::IntArrayRef({4, 2}));  // per KV group
  EXPECT_EQ(g.sample_masks().head.sizes(), at::IntArrayRef({4, 4}));            // expanded per query head
}

TEST(Sheared, ConstructorErrors) {
  auto m = tiny("llama", 4, 2);
  EXPECT_EQ(error_of([&] { ShearedPruner(m, opts(0, 0, 0, 0)); }),
            "prune.sheared: the targets keep every layer, head and channel (target " +
                shape_string(model_shape(m->config)) + "); nothing to prune");
  EXPECT_EQ(error_of([&] { ShearedPruner(m, opts(1.5, 0, 0, 0)); }),
            "prune: target layer sparsity 1.5 outside [0, 1)");
  ShearedOptions o = opts(0.5, 0, 0, 0);
  o.mask_lr = 0;
  EXPECT_EQ(error_of([&] { ShearedPruner(m, o); }), "prune.sheared: mask_lr must be positive, got 0");
  LoraConfig c;
  c.r = 2;
  c.dora = true;
  lora_apply(*m, c, 1);
  EXPECT_EQ(error_of([&] { ShearedPruner(m, opts(0.5, 0, 0, 0)); }),
            "prune: model.layers.0.self_attn.q_proj.weight has a DoRA adapter, whose magnitude normalisation "
            "slicing "
            "would change; merge it first (lora.merge)");
}

TEST(Sheared, HardConcreteSamples) {
  at::manual_seed(3);
  ShearedPruner p(tiny("llama", 4, 2), opts(0, 0, 0, 0.5));
  at::Tensor& la = tensor(p, "l0.intermediate.log_alpha");  // (4, 40): 160 entries a sample
  auto fractions = [&](double value) {
    {
      at::NoGradGuard no_grad;
      la.fill_(value);
    }
    double ones = 0, zeros = 0, n = 0;
    for (int i = 0; i < 20; i++) {
      at::Tensor z = p.sample_masks().intermediate.detach();
      EXPECT_GE(z.min().item<double>(), 0.0);
      EXPECT_LE(z.max().item<double>(), 1.0);
      ones += z.eq(1).sum().item<double>();
      zeros += z.eq(0).sum().item<double>();
      n += static_cast<double>(z.numel());
    }
    return std::make_pair(ones / n, zeros / n);
  };
  // log_alpha = ln 100: z = 1 when s >= 11/12, P(z = 1) = 1 - sigmoid((2/3) logit(11/12) - ln 100) ~ 0.953.
  auto [on_hi, off_hi] = fractions(std::log(100.0));
  EXPECT_GT(on_hi, 0.9);
  EXPECT_LT(off_hi, 0.02);
  auto [on_lo, off_lo] = fractions(std::log(0.01));
  EXPECT_GT(off_lo, 0.9);
  EXPECT_LT(on_lo, 0.02);
  // log_alpha = 0: P(z = 0) = Q0(0) both by sampling and by the formula.
  auto [on_mid, off_mid] = fractions(0.0);
  EXPECT_NEAR(off_mid, q0(0.0), 0.03);
  EXPECT_NEAR(on_mid, q0(0.0), 0.03);  // symmetric stretch: P(z = 1) = P(z = 0) at log_alpha 0
  // Training samples carry a gradient to log_alpha.
  at::Tensor z = p.sample_masks().intermediate;
  EXPECT_TRUE(z.requires_grad());
}

TEST(Sheared, ExpectedSparsityByHand) {
  ShearedPruner p(tiny("llama", 4, 2), opts(0.5, 0, 0, 0.5));
  const std::vector<float> v = {-2.0f, 0.0f, 1.0f, 3.5f};
  {
    at::NoGradGuard no_grad;
    tensor(p, "l0.layers.log_alpha").copy_(at::tensor(v));
  }
  double want = 0;
  for (float x : v) want += q0(x) / 4;
  EXPECT_NEAR(p.expected_sparsity("layers"), want, 1e-6);
  // 2-D masks: the mean over layers of each layer's expected sparsity.
  at::Tensor& li = tensor(p, "l0.intermediate.log_alpha");
  {
    at::NoGradGuard no_grad;
    li.fill_(1.0);
    li[2].fill_(-1.0);
  }
  EXPECT_NEAR(p.expected_sparsity("intermediate"), (3 * q0(1.0) + q0(-1.0)) / 4, 1e-6);
  EXPECT_EQ(p.expected_sparsity("hidden"), 0.0);  // no mask
  EXPECT_EQ(error_of([&] { p.expected_sparsity("neurons"); }),
            "prune.sheared: unknown mask kind \"neurons\"; expected layers, heads, intermediate or hidden");
}

TEST(Sheared, LagrangianValueAndGradients) {
  ShearedOptions o = opts(0.5, 0, 0, 0.5);
  o.warmup_steps = 4;
  ShearedPruner p(tiny("llama", 4, 2), o);
  EXPECT_DOUBLE_EQ(p.target_sparsity("layers", 0), 0.0);
  EXPECT_DOUBLE_EQ(p.target_sparsity("layers", 1), 0.125);
  EXPECT_DOUBLE_EQ(p.target_sparsity("layers", 9), 0.5);
  EXPECT_DOUBLE_EQ(p.target_sparsity("intermediate", 2), 0.25);  // 20 of 40 kept
  at::Tensor& la = tensor(p, "l0.layers.log_alpha");
  at::Tensor& l1 = tensor(p, "l0.layers.lambda1");
  at::Tensor& l2 = tensor(p, "l0.layers.lambda2");
  {
    at::NoGradGuard no_grad;
    la.copy_(at::tensor(std::vector<float>{-1.0f, 0.5f, 2.0f, 4.0f}));
    l1.fill_(0.7);
    l2.fill_(-0.3);
  }
  const double s = (q0(-1.0) + q0(0.5) + q0(2.0) + q0(4.0)) / 4, t = 0.25;  // step 2: half of 0.5
  const double s_int = q0(std::log(100.0)), t_int = 0.25;                   // lambdas 0: no term value
  at::Tensor lag = p.lagrangian(2);
  EXPECT_NEAR(lag.item<double>(), 0.7 * (s - t) - 0.3 * (s - t) * (s - t), 1e-6);
  lag.backward();
  EXPECT_NEAR(l1.grad().item<double>(), s - t, 1e-6);
  EXPECT_NEAR(l2.grad().item<double>(), (s - t) * (s - t), 1e-6);
  EXPECT_NEAR(tensor(p, "l0.intermediate.lambda1").grad().item<double>(), s_int - t_int, 1e-6);
  // d lag / d log_alpha_j = (0.7 - 0.6 (s - t)) * dQ0_j / 4, dQ0/dla = -Q0 (1 - Q0).
  const double x = 2.0;
  EXPECT_NEAR(la.grad()[2].item<double>(), (0.7 - 0.6 * (s - t)) * -q0(x) * (1 - q0(x)) / 4, 1e-6);
}

TEST(Sheared, MultipliersAscendAndMasksFollow) {
  // One step with s < t: the multiplier gradient s - t < 0 and lr -lambda_lr moves lambda1 down,
  // which makes lambda1 (s - t) positive (the penalty grows); the masks then descend lambda1 (s - t)
  // and their expected sparsity rises. The hard-concrete noise comes from the default generator:
  // seeded here, so the test does not depend on what ran before it in the process (over 100 seeds
  // the layer sparsity after 16 steps ranged 0.17-0.5 from 0.002; the bound below is under all).
  at::manual_seed(17);
  auto m = tiny("llama", 4, 2);
  ShearedOptions o = opts(0.5, 0, 0, 0.5);
  o.mask_lr = 0.5;
  o.lambda_lr = 0.5;
  auto p = std::make_shared<ShearedPruner>(m, o);
  TrainOptions to;
  to.schedule = "constant";
  to.learning_rate = 1e-3;
  Trainer tr(m, to, {p});
  Batch b = random_batch(61, 2, 8, 5);
  const double before = p->expected_sparsity("layers");
  auto s1 = tr.step(b);
  double l1 = tensor(*p, "l0.layers.lambda1").item<double>();
  EXPECT_LT(l1, 0.0);
  EXPECT_NEAR(l1, -0.5, 1e-3);  // Adam's first step: lr * sign(grad)
  for (int i = 0; i < 15; i++) tr.step(b);
  const double after = p->expected_sparsity("layers");
  EXPECT_GT(after, before + 0.1) << before << " -> " << after;
  EXPECT_GT(p->expected_sparsity("intermediate"), 0.2);
  EXPECT_EQ(p->steps(), 16);
  // The report carries the pruner's numbers.
  std::vector<std::string> keys;
  for (auto& [k, v] : s1.extra) keys.push_back(k);
  EXPECT_EQ(keys,
            (std::vector<std::string>{"expected_sparsity_layers", "target_sparsity_layers", "lambda1_layers",
                                      "expected_sparsity_intermediate", "target_sparsity_intermediate",
                                      "lambda1_intermediate", "lagrangian"}));
  // Evaluation uses the deterministic masks: exactly 2 of 4 layers.
  EvalStats e = tr.evaluate(std::vector<Batch>{b});
  EXPECT_TRUE(std::isfinite(e.loss));
  EXPECT_EQ(p->deterministic_masks().layer.ne(0).sum().item<int64_t>(), 2);
}

TEST(Sheared, RecomputeAndMicroBatchesGiveTheSameMaskGradients) {
  // The leaves make the mask gradients independent of how the trainer runs the forward.
  auto run = [](bool checkpoint, int64_t micro) {
    auto m = tiny("llama", 4, 2);
    auto p = std::make_shared<ShearedPruner>(m, opts(0.5, 0.5, 0.25, 0.5));
    randomize(*p, 9);
    TrainOptions to;
    to.schedule = "constant";
    to.gradient_checkpointing = checkpoint;
    to.batch_size = micro;
    Trainer tr(m, to, {p});
    Batch b = random_batch(61, 4, 8, 6);
    at::manual_seed(11);
    p->begin(true);
    tr.batch_loss(b, true, b.target_tokens);
    p->after_backward();
    std::vector<at::Tensor> g;
    for (auto& [name, t] : p->named_tensors())
      if (name.find("log_alpha") != std::string::npos) g.push_back(t->grad().clone());
    return g;
  };
  auto plain = run(false, 0), other = run(true, 2);
  ASSERT_EQ(plain.size(), 4u);
  for (size_t i = 0; i < plain.size(); i++) {
    EXPECT_GT(plain[i].abs().sum().item<double>(), 0.0) << i;
    EXPECT_TRUE(at::allclose(plain[i], other[i], 1e-4, 1e-6)) << i;
  }
}

TEST(Sheared, DeterministicMasksKeepExactCounts) {
  // GQA, per_group mode: 8 heads in 2 groups, heads 0.5 -> 2 per group.
  ShearedPruner p(tiny("llama", 8, 2), opts(0.5, 0.5, 0.25, 0.5));
  randomize(p, 4);
  StructureMasks d = p.deterministic_masks();
  EXPECT_EQ(d.layer.ne(0).sum().item<int64_t>(), 2);
  EXPECT_EQ(d.hidden.ne(0).sum().item<int64_t>(), 24);
  for (int64_t l = 0; l < 4; l++) {
    EXPECT_EQ(d.intermediate[l].ne(0).sum().item<int64_t>(), 20);
    for (int64_t g = 0; g < 2; g++) EXPECT_EQ(d.head[l].narrow(0, 4 * g, 4).ne(0).sum().item<int64_t>(), 2);
  }
  // Kept entries: the top scores, with their soft value sigmoid(log_alpha / beta * 0.8).
  at::Tensor la = tensor(p, "l0.layers.log_alpha").detach();
  at::Tensor soft = at::sigmoid(la / (2.0 / 3.0) * 0.8);
  auto top = std::get<1>(la.topk(2));
  for (int64_t i = 0; i < 2; i++) {
    int64_t j = top[i].item<int64_t>();
    EXPECT_NEAR(d.layer[j].item<double>(), soft[j].item<double>(), 1e-7);
  }
  at::Tensor lh = tensor(p, "l0.heads.log_alpha").detach();
  at::Tensor group0 = lh[1].narrow(0, 0, 4);
  at::Tensor lowest = std::get<1>(group0.topk(2, 0, false));
  for (int64_t i = 0; i < 2; i++) EXPECT_EQ(d.head[1][lowest[i].item<int64_t>()].item<double>(), 0.0);

  // Whole groups: 4 heads in 2 groups, 1 group kept per layer, its two heads share the value.
  ShearedPruner w(tiny("llama", 4, 2), opts(0, 0.8, 0, 0));
  randomize(w, 5);
  at::Tensor dh = w.deterministic_masks().head;
  at::Tensor lg = tensor(w, "l0.heads.log_alpha").detach();
  for (int64_t l = 0; l < 4; l++) {
    int64_t best = lg[l][0].item<float>() >= lg[l][1].item<float>() ? 0 : 1;
    EXPECT_EQ(dh[l].ne(0).sum().item<int64_t>(), 2);
    EXPECT_NE(dh[l][2 * best].item<double>(), 0.0);
    EXPECT_EQ(dh[l][2 * best].item<double>(), dh[l][2 * best + 1].item<double>());
  }
  // MHA: groups of one head; heads 0.5 -> 2 of 4 per layer.
  ShearedPruner mha(tiny("llama", 4, 4), opts(0, 0.5, 0, 0));
  EXPECT_TRUE(mha.target().whole_groups);
  randomize(mha, 6);
  at::Tensor dm = mha.deterministic_masks().head;
  for (int64_t l = 0; l < 4; l++) EXPECT_EQ(dm[l].ne(0).sum().item<int64_t>(), 2);
}

TEST(Sheared, FinalSpecListsTheKeptEntries) {
  ShearedPruner p(tiny("llama", 8, 2), opts(0.5, 0.5, 0.25, 0.5));
  randomize(p, 7);
  StructureMasks d = p.deterministic_masks();
  PruneSpec s = p.final_spec();
  ASSERT_EQ(s.layers.size(), 2u);
  ASSERT_EQ(s.heads.size(), 4u);
  ASSERT_EQ(s.intermediate.size(), 4u);
  EXPECT_EQ(s.hidden.size(), 24u);
  for (int64_t l = 0; l < 4; l++) {
    EXPECT_EQ(s.heads[l].size(), 4u);
    EXPECT_EQ(s.intermediate[l].size(), 20u);
    for (int64_t h : s.heads[l]) EXPECT_NE(d.head[l][h].item<double>(), 0.0);
  }
  EXPECT_TRUE(at::equal(s.head_scale, d.head));
  EXPECT_TRUE(at::equal(s.layer_scale, d.layer));
}

// Needs prune_apply (host/prune/surgery.cpp).
TEST(Sheared, MaskedModelEqualsFinalisedModel) {
  struct Case {
    const char* arch;
    int64_t heads, kv;
    ShearedOptions o;
    bool lora;
  };
  const Case cases[] = {
      {"llama", 8, 2, opts(0.25, 0.5, 0.25, 0.5), false},  // GQA, per group
      {"llama", 4, 2, opts(0.25, 0.8, 0.25, 0.5), false},  // GQA, whole groups
      {"llama", 4, 4, opts(0.5, 0.5, 0.25, 0.5), false},   // MHA
      {"gemma2", 4, 2, opts(0.25, 0.5, 0.25, 0.5), false},
      {"llama", 8, 2, opts(0.25, 0.5, 0.25, 0.5), true},  // LoRA-wrapped
  };
  at::Tensor ids = random_batch(61, 2, 9, 8).ids;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.arch) + " " + std::to_string(c.heads) + "/" + std::to_string(c.kv) +
                 (c.lora ? " lora" : ""));
    auto m = tiny(c.arch, c.heads, c.kv);
    if (c.lora) {
      LoraConfig lc;
      lc.r = 2;
      lc.targets = {"all-linear"};
      lora_apply(*m, lc, 2);
      at::NoGradGuard no_grad;
      for (auto& [name, t] : m->adapter_parameters()) t->normal_(0.0, 0.1);
    }
    ShearedPruner p(m, c.o);
    randomize(p, 12);
    StructureMasks d = p.deterministic_masks();
    ForwardOptions fo;
    fo.masks = &d;
    at::Tensor masked, plain;
    {
      at::NoGradGuard no_grad;
      masked = m->forward(ids, fo);
      plain = m->forward(ids);
    }
    EXPECT_GT((masked - plain).abs().max().item<double>(), 1e-3);  // the masks matter
    ModelShape shape = p.finalize();
    const ModelShape& want = p.target().shape;
    EXPECT_EQ(shape.layers, want.layers);
    EXPECT_EQ(shape.heads, want.heads);
    EXPECT_EQ(shape.kv_heads, want.kv_heads);
    EXPECT_EQ(shape.hidden, want.hidden);
    EXPECT_EQ(shape.intermediate, want.intermediate);
    EXPECT_EQ(shape.head_dim, 8);
    at::Tensor pruned;
    {
      at::NoGradGuard no_grad;
      pruned = m->forward(ids);
    }
    EXPECT_LT((masked - pruned).abs().max().item<double>(), 1e-5);
    EXPECT_EQ(error_of([&] { p.finalize(); }), "prune: this Sheared pruner was finalised; make a new one");
    EXPECT_EQ(error_of([&] { p.deterministic_masks(); }),
              "prune: this Sheared pruner was finalised; make a new one");
  }
}

TEST(Sheared, ResumeRestoresMasksAndMultipliers) {
  ShearedOptions o = opts(0.5, 0.5, 0, 0.5);
  o.warmup_steps = 3;
  TrainOptions to;
  to.schedule = "constant";
  to.learning_rate = 1e-3;
  auto batch = [](int s) { return random_batch(61, 2, 8, 100 + s); };
  // Straight: 5 steps.
  auto m1 = tiny("llama", 4, 2);
  auto p1 = std::make_shared<ShearedPruner>(m1, o);
  at::manual_seed(1);
  Trainer t1(m1, to, {p1});
  for (int s = 1; s <= 5; s++) t1.step(batch(s));
  // Interrupted: 3 steps, save, a fresh model and pruner (another seed), resume, 2 more.
  std::string dir = temp_dir("resume");
  to.output_dir = dir;
  auto m2 = tiny("llama", 4, 2);
  auto p2 = std::make_shared<ShearedPruner>(m2, o);
  at::manual_seed(1);
  Trainer t2(m2, to, {p2});
  for (int s = 1; s <= 3; s++) t2.step(batch(s));
  t2.save();
  auto m3 = tiny("llama", 4, 2, 4, 7);
  ShearedOptions o3 = o;
  o3.seed = 5;
  auto p3 = std::make_shared<ShearedPruner>(m3, o3);
  Trainer t3(m3, to, {p3});
  at::manual_seed(99);  // the checkpoint's generator state replaces this
  EXPECT_EQ(t3.resume(), 3);
  EXPECT_EQ(p3->steps(), 3);
  auto n2 = p2->named_tensors(), n3 = p3->named_tensors();
  ASSERT_EQ(n2.size(), n3.size());
  for (size_t i = 0; i < n2.size(); i++) EXPECT_TRUE(at::equal(*n2[i].second, *n3[i].second)) << n2[i].first;
  for (int s = 4; s <= 5; s++) t3.step(batch(s));
  auto n1 = p1->named_tensors();
  n3 = p3->named_tensors();
  for (size_t i = 0; i < n1.size(); i++) EXPECT_TRUE(at::equal(*n1[i].second, *n3[i].second)) << n1[i].first;
  fs::remove_all(dir);
}
