// Distillation: the divergences against hand-computed values and softmax definitions, the chunked
// logit loss (value and gradients) against plain autograd, and the Distiller inside a Trainer
// (alpha 0 is the LM step, a copy of the student as teacher gives zero, training approaches the
// teacher, bf16 teachers, hidden-state projections, micro-batches, and the one-line errors).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>

#include "host/distill/distill.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/train/trainer.h"
#include "tests/cpp/test_batch.h"
#include "tests/cpp/test_tiny.h"
#include "tests/cpp/test_util.h"

using namespace luatune;

namespace {

DistillOptions with_loss(const std::string& loss, double temperature = 1, double beta = 0.5) {
  DistillOptions o;
  o.loss = loss;
  o.temperature = temperature;
  o.beta = beta;
  return o;
}

double value(const at::Tensor& t, int64_t i) {
  return t[i].item<double>();
}

}  // namespace

// ============================================================================================
// Divergences

TEST(DistillDivergence, HandComputedTwoTokenVocabulary) {
  // p_s = (1/2, 1/2); p_t = (3/4, 1/4) (logits log 3, 0); M at beta 1/2 = (5/8, 3/8).
  at::Tensor s = at::zeros({1, 2});
  at::Tensor t = at::tensor({std::log(3.0), 0.0}, at::kFloat).unsqueeze(0);
  const double fkl = 0.75 * std::log(0.75 / 0.5) + 0.25 * std::log(0.25 / 0.5);
  const double rkl = 0.5 * std::log(0.5 / 0.75) + 0.5 * std::log(0.5 / 0.25);
  const double jsd = 0.5 * (0.75 * std::log(0.75 / 0.625) + 0.25 * std::log(0.25 / 0.375)) +
                     0.5 * (0.5 * std::log(0.5 / 0.625) + 0.5 * std::log(0.5 / 0.375));
  EXPECT_NEAR(value(distill_divergence(s, t, with_loss("forward_kl")), 0), fkl, 1e-6);
  EXPECT_NEAR(value(distill_divergence(s, t, with_loss("reverse_kl")), 0), rkl, 1e-6);
  EXPECT_NEAR(value(distill_divergence(s, t, with_loss("jsd", 1, 0.5)), 0), jsd, 1e-6);
  // beta 1/4: M = 1/4 p_t + 3/4 p_s = (9/16, 7/16)
  const double jsd_q = 0.25 * (0.75 * std::log(0.75 / 0.5625) + 0.25 * std::log(0.25 / 0.4375)) +
                       0.75 * (0.5 * std::log(0.5 / 0.5625) + 0.5 * std::log(0.5 / 0.4375));
  EXPECT_NEAR(value(distill_divergence(s, t, with_loss("jsd", 1, 0.25)), 0), jsd_q, 1e-6);
  // Temperature divides both sides: teacher logits (2 log 3, 0) at T = 2 are the p_t above.
  at::Tensor t2 = at::tensor({2 * std::log(3.0), 0.0}, at::kFloat).unsqueeze(0);
  EXPECT_NEAR(value(distill_divergence(s, t2, with_loss("forward_kl", 2)), 0), fkl, 1e-6);
  // Identical distributions: zero for every loss, whatever the logit offset.
  for (const char* loss : {"forward_kl", "reverse_kl", "jsd"})
    EXPECT_NEAR(value(distill_divergence(t, t + 5, with_loss(loss)), 0), 0, 1e-6) << loss;
}

TEST(DistillDivergence, ForwardAndReverseKLFromSoftmaxDefinitions) {
  at::Generator gen = at::detail::createCPUGenerator(3);
  at::Tensor s = at::randn({5, 3}, gen, at::TensorOptions(at::kFloat)) * 2;
  at::Tensor t = at::randn({5, 3}, gen, at::TensorOptions(at::kFloat)) * 2;
  at::Tensor f = distill_divergence(s, t, with_loss("forward_kl", 1.5));
  at::Tensor r = distill_divergence(s, t, with_loss("reverse_kl", 1.5));
  ASSERT_EQ(f.sizes(), at::IntArrayRef({5}));
  for (int64_t i = 0; i < 5; i++) {
    double ps[3], pt[3], zs = 0, zt = 0;
    for (int64_t v = 0; v < 3; v++) {
      ps[v] = std::exp(s[i][v].item<double>() / 1.5);
      pt[v] = std::exp(t[i][v].item<double>() / 1.5);
      zs += ps[v];
      zt += pt[v];
    }
    double fkl = 0, rkl = 0;
    for (int64_t v = 0; v < 3; v++) {
      ps[v] /= zs;
      pt[v] /= zt;
      fkl += pt[v] * std::log(pt[v] / ps[v]);
      rkl += ps[v] * std::log(ps[v] / pt[v]);
    }
    EXPECT_NEAR(value(f, i), fkl, 1e-5) << i;
    EXPECT_NEAR(value(r, i), rkl, 1e-5) << i;
  }
}

TEST(DistillDivergence, JsdEdgesAreTheKLsAndSwappingRolesFlipsBeta) {
  at::Generator gen = at::detail::createCPUGenerator(4);
  at::Tensor s = at::randn({6, 9}, gen, at::TensorOptions(at::kFloat));
  at::Tensor t = at::randn({6, 9}, gen, at::TensorOptions(at::kFloat));
  EXPECT_TRUE(at::equal(distill_divergence(s, t, with_loss("jsd", 1, 0)),
                        distill_divergence(s, t, with_loss("forward_kl"))));
  EXPECT_TRUE(at::equal(distill_divergence(s, t, with_loss("jsd", 1, 1)),
                        distill_divergence(s, t, with_loss("reverse_kl"))));
  // M = beta p_t + (1 - beta) p_s is the same mixture with the roles swapped and beta -> 1 - beta.
  at::Tensor a = distill_divergence(s, t, with_loss("jsd", 1, 0.3));
  at::Tensor b = distill_divergence(t, s, with_loss("jsd", 1, 0.7));
  EXPECT_TRUE(at::allclose(a, b, 1e-5, 1e-6));
  // Bounded by the entropy of the mixture weights (ln 2 at beta 1/2) and never negative.
  at::Tensor j = distill_divergence(s * 20, t * 20, with_loss("jsd", 1, 0.5));
  EXPECT_LE(j.max().item<double>(), std::log(2.0) + 1e-6);
  EXPECT_GE(j.min().item<double>(), -1e-6);
}

// ============================================================================================
// Chunked logit loss

TEST(DistillLogitLoss, ChunkedMatchesAutogradValueAndGradients) {
  at::Generator gen = at::detail::createCPUGenerator(5);
  const int64_t N = 7, Cs = 6, Ct = 5, V = 11;
  at::Tensor th = at::randn({N, Ct}, gen, at::TensorOptions(at::kFloat));
  at::Tensor tw = at::randn({V, Ct}, gen, at::TensorOptions(at::kFloat));
  at::Tensor sh0 = at::randn({N, Cs}, gen, at::TensorOptions(at::kFloat));
  at::Tensor sw0 = at::randn({V, Cs}, gen, at::TensorOptions(at::kFloat));
  struct Case {
    const char* loss;
    double temperature, beta, scap, tcap;
  };
  for (Case c :
       {Case{"forward_kl", 1, 0.5, 0, 0}, Case{"forward_kl", 2, 0.5, 5, 3}, Case{"reverse_kl", 1, 0.5, 0, 0},
        Case{"reverse_kl", 0.7, 0.5, 4, 0}, Case{"jsd", 1, 0.3, 0, 0}, Case{"jsd", 2, 0.5, 5, 3},
        Case{"jsd", 1, 0, 0, 2}, Case{"jsd", 1.5, 1, 3, 0}}) {
    DistillOptions o = with_loss(c.loss, c.temperature, c.beta);
    // The reference: whole logits, ordinary autograd through distill_divergence.
    at::Tensor sh = sh0.clone().requires_grad_(true), sw = sw0.clone().requires_grad_(true);
    at::Tensor zs = at::matmul(sh, sw.t()), zt = at::matmul(th, tw.t());
    if (c.scap > 0) zs = at::tanh(zs / c.scap) * c.scap;
    if (c.tcap > 0) zt = at::tanh(zt / c.tcap) * c.tcap;
    at::Tensor ref = distill_divergence(zs, zt, o).sum() * (c.temperature * c.temperature);
    (ref * 0.37).backward();
    for (int64_t chunk : {int64_t{1}, int64_t{3}, N}) {
      o.chunk = chunk;
      at::Tensor h = sh0.clone().requires_grad_(true), w = sw0.clone().requires_grad_(true);
      at::Tensor mine = distill_logit_loss(h, w, c.scap, th, tw, c.tcap, o);
      (mine * 0.37).backward();
      std::string what = std::string(c.loss) + " T " + std::to_string(c.temperature) + " beta " +
                         std::to_string(c.beta) + " softcap " + std::to_string(c.scap) + " chunk " +
                         std::to_string(chunk);
      EXPECT_NEAR(mine.item<double>(), ref.item<double>(), 1e-4 * (1 + std::abs(ref.item<double>()))) << what;
      EXPECT_TRUE(at::allclose(h.grad(), sh.grad(), 1e-4, 1e-5)) << what;
      EXPECT_TRUE(at::allclose(w.grad(), sw.grad(), 1e-4, 1e-5)) << what;
    }
  }
}

TEST(DistillLogitLoss, FrozenHeadAndBf16Teacher) {
  at::Generator gen = at::detail::createCPUGenerator(6);
  at::Tensor th = at::randn({4, 5}, gen, at::TensorOptions(at::kFloat));
  at::Tensor tw = at::randn({9, 5}, gen, at::TensorOptions(at::kFloat));
  at::Tensor sh = at::randn({4, 3}, gen, at::TensorOptions(at::kFloat)).requires_grad_(true);
  at::Tensor sw = at::randn({9, 3}, gen, at::TensorOptions(at::kFloat));  // frozen: no grad asked
  DistillOptions o;
  o.chunk = 3;
  at::Tensor a = distill_logit_loss(sh, sw, 0, th, tw, 0, o);
  a.backward();
  EXPECT_TRUE(sh.grad().defined());
  EXPECT_FALSE(sw.grad().defined());
  // A bf16 teacher: its logits are rounded, the loss is close to the float32 teacher's.
  at::Tensor b = distill_logit_loss(sh, sw, 0, th.to(at::kBFloat16), tw.to(at::kBFloat16), 0, o);
  EXPECT_EQ(b.scalar_type(), at::kFloat);
  EXPECT_NEAR(b.item<double>(), a.item<double>(), 0.05 * a.item<double>());
}

// ============================================================================================
// The Distiller in a Trainer

TEST(Distiller, AlphaZeroIsThePlainLMStep) {
  auto plain = tiny_model_sized(1), student = tiny_model_sized(1), teacher = tiny_model_sized(2);
  TrainOptions to = constant_lr(1e-2);
  DistillOptions o;
  o.alpha = 0;
  auto kd = std::make_shared<Distiller>(teacher, student, o);
  Trainer a(plain, to), b(student, to, {kd});
  for (uint64_t s = 0; s < 3; s++) {
    Batch batch = random_batch(61, 3, 9, 10 + s);
    StepStats sa = a.step(batch), sb = b.step(batch);
    EXPECT_EQ(sa.loss, sb.loss);
    EXPECT_EQ(step_stat(sb.extra, "lm_loss"), sb.loss);
    EXPECT_GT(step_stat(sb.extra, "kd_loss"), 0);
  }
  auto pa = plain->state(), pb = student->state();
  for (size_t i = 0; i < pa.size(); i++) EXPECT_TRUE(at::equal(pa[i].second, pb[i].second)) << pa[i].first;
}

TEST(Distiller, CopyOfTheStudentAsTeacherGivesZeroKD) {
  auto student = tiny_model_sized(3), teacher = tiny_model_sized(3);
  DistillOptions o;
  o.alpha = 1;
  o.loss = "jsd";
  auto kd = std::make_shared<Distiller>(teacher, student, o);
  TrainOptions to = constant_lr();
  Trainer t(student, to, {kd});
  Batch batch = random_batch(61, 2, 8, 4);
  StepStats s = t.step(batch);
  EXPECT_NEAR(step_stat(s.extra, "kd_loss"), 0, 1e-6);
  EXPECT_NEAR(s.loss, 0, 1e-6);  // alpha 1: the objective is the KD term alone
  EXPECT_GT(step_stat(s.extra, "lm_loss"), 1);
  for (auto& [name, p] : teacher->named_parameters()) EXPECT_FALSE(p->requires_grad()) << name;
}

TEST(Distiller, TrainingApproachesTheTeacherAndEvaluationKeepsTheLMLoss) {
  auto student = tiny_model_sized(4), teacher = tiny_model_sized(5, 48, 3);
  DistillOptions o;
  o.alpha = 1;
  o.temperature = 2;
  o.chunk = 5;
  auto kd = std::make_shared<Distiller>(teacher, student, o);
  TrainOptions to = constant_lr(1e-2);
  to.batch_size = 2;
  Trainer t(student, to, {kd});
  Batch batch = random_batch(61, 4, 9, 6);
  double first = step_stat(t.step(batch).extra, "kd_loss"), last = 0;
  for (int i = 0; i < 15; i++) last = step_stat(t.step(batch).extra, "kd_loss");
  EXPECT_LT(last, 0.5 * first) << first << " -> " << last;

  Trainer plain(student, to);
  EvalStats e = t.evaluate({batch}), p = plain.evaluate({batch});
  EXPECT_NEAR(e.loss, p.loss, 1e-6);
  EXPECT_NEAR(step_stat(e.extra, "lm_loss"), p.loss, 1e-6);
  EXPECT_NEAR(step_stat(e.extra, "kd_loss"), last, 0.3 * last);
}

TEST(Distiller, MicroBatchesEqualTheWholeBatch) {
  auto teacher = tiny_model_sized(7);
  DistillOptions o;
  o.alpha = 0.3;
  o.loss = "reverse_kl";
  o.hidden_layers = {{1, 0}};
  std::vector<std::vector<at::Tensor>> grads;
  std::vector<double> losses;
  for (int64_t micro : {0, 1}) {
    auto student = tiny_model_sized(8);
    auto kd = std::make_shared<Distiller>(teacher, student, o);
    TrainOptions to = constant_lr();
    to.batch_size = micro;
    Trainer t(student, to, {kd});
    Batch batch = random_batch(61, 3, 7, 9);
    auto [sum, n] = t.batch_loss(batch, true, batch.target_tokens);
    losses.push_back(sum / n);
    std::vector<at::Tensor> g;
    for (auto& [name, p] : t.parameters()) g.push_back(p->grad().clone());
    grads.push_back(g);
  }
  EXPECT_NEAR(losses[0], losses[1], 1e-5);
  for (size_t i = 0; i < grads[0].size(); i++)
    EXPECT_TRUE(at::allclose(grads[0][i], grads[1][i], 1e-4, 1e-6)) << i;
}

TEST(Distiller, Bf16TeacherWithFloat32Student) {
  auto student = tiny_model_sized(9), teacher = tiny_model_sized(10, 32, 2, 61, 30.0, at::kBFloat16);
  DistillOptions o;
  o.hidden_layers = {{0, 1}};
  o.hidden_loss = "mse";
  auto kd = std::make_shared<Distiller>(teacher, student, o);
  TrainOptions to = constant_lr();
  Trainer t(student, to, {kd});
  StepStats s = t.step(random_batch(61, 2, 8, 11));
  EXPECT_TRUE(std::isfinite(s.loss));
  EXPECT_GT(step_stat(s.extra, "kd_loss"), 0);
  EXPECT_GT(step_stat(s.extra, "hidden_loss"), 0);
  EXPECT_EQ(teacher->dtype(), at::kBFloat16);
}

TEST(Distiller, HiddenStateProjectionAcrossWidthsTrains) {
  auto student = tiny_model_sized(11), teacher = tiny_model_sized(12, 48, 3);
  DistillOptions o;
  o.alpha = 0.5;
  o.hidden_layers = {{0, 1}, {1, 2}};
  o.hidden_weight = 2;
  o.seed = 3;
  auto kd = std::make_shared<Distiller>(teacher, student, o);
  TrainOptions to = constant_lr(1e-2);
  to.gradient_checkpointing = true;  // layer outputs stay differentiable under recomputation
  Trainer t(student, to, {kd});
  const auto& params = t.parameters();
  ASSERT_EQ(params[params.size() - 2].first, "distill.proj.0.weight");
  ASSERT_EQ(params.back().first, "distill.proj.1.weight");
  at::Tensor proj = params.back().second->detach().clone();
  EXPECT_EQ(proj.sizes(), at::IntArrayRef({48, 32}));
  EXPECT_LE(proj.abs().max().item<double>(), 1 / std::sqrt(32.0));
  Batch batch = random_batch(61, 3, 8, 12);
  double first = step_stat(t.step(batch).extra, "hidden_loss"), last = 0;
  for (int i = 0; i < 12; i++) last = step_stat(t.step(batch).extra, "hidden_loss");
  EXPECT_LT(last, 0.8 * first) << first << " -> " << last;
  EXPECT_FALSE(at::equal(proj, *params.back().second));
  // Equal widths: identity projections.
  o.hidden_layers = {{0, 1}};
  auto same = std::make_shared<Distiller>(tiny_model_sized(13), tiny_model_sized(14), o);
  EXPECT_TRUE(at::equal(*same->parameter_groups()[0].params[0].second, at::eye(32)));
}

TEST(Distiller, ErrorsNameTheProblem) {
  auto s = tiny_model_sized(1), t = tiny_model_sized(2);
  auto make = [&](DistillOptions o) { return error_of([&] { Distiller d(t, s, o); }); };
  DistillOptions o;
  EXPECT_EQ(error_of([&] { Distiller d(tiny_model_sized(2, 32, 2, 64), tiny_model_sized(1, 32, 2, 80), o); }),
            "distill.new: teacher vocabulary 64 != student 80");
  EXPECT_EQ(error_of([&] { Distiller d(s, s, o); }),
            "distill.new: the teacher and the student are the same model object (load or copy the teacher "
            "separately)");
  o.loss = "kl";
  EXPECT_EQ(make(o), "distill.new: loss must be \"forward_kl\", \"reverse_kl\" or \"jsd\", got \"kl\"");
  o = {};
  o.temperature = 0;
  EXPECT_EQ(make(o), "distill.new: temperature must be positive, got 0");
  o = {};
  o.alpha = 1.5;
  EXPECT_EQ(make(o), "distill.new: alpha must be in [0, 1], got 1.5");
  o = {};
  o.beta = -0.1;
  EXPECT_EQ(make(o), "distill.new: beta must be in [0, 1], got -0.1");
  o = {};
  o.chunk = 0;
  EXPECT_EQ(make(o), "distill.new: chunk must be positive, got 0");
  o = {};
  o.hidden_loss = "l1";
  EXPECT_EQ(make(o), "distill.new: hidden_loss must be \"cosine\" or \"mse\", got \"l1\"");
  o = {};
  o.hidden_layers = {{0, 0}, {2, 1}};
  EXPECT_EQ(
      make(o),
      "distill.new: hidden_layers[2]: student layer 2 is out of range (the student has 2 layers, 0..1)");
  o.hidden_layers = {{0, -1}};
  EXPECT_EQ(
      make(o),
      "distill.new: hidden_layers[1]: teacher layer -1 is out of range (the teacher has 2 layers, 0..1)");
  EXPECT_EQ(
      error_of([] {
        distill_divergence(at::zeros({2, 3}), at::zeros({2, 4}), {});
      }),
      "distill.divergence: student and teacher logits must have one shape (..., V), got [2, 3] and [2, 4]");
}
