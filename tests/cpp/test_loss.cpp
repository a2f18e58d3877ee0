// The fused cross-entropy (host/train/loss.h) against the plain computation it replaces: full
// logits, log_softmax and nll_loss through ATen's autograd. Values and the gradients of hidden and
// weight, with and without Gemma 2's final softcap, ignored targets, chunks that do not divide
// the rows, vocabularies split into several float32 blocks, a frozen head, a batch with nothing to
// learn, scaled and repeated use of the loss, and bf16 / fp16 heads. The one-pass path (the CUDA
// kernel's arithmetic, here its CPU reference) against the same composition in float64, its per-row
// contract, and the float32-block path in low precision.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "host/data/batch.h"
#include "host/train/loss.h"

using namespace luatune;

namespace {

struct Head {
  at::Tensor h, w, t;  // (N, C), (V, C), (N)
};

// Random hidden rows, head and targets; every `ignore_every`-th target (0: none) is ignored, and the
// first and last vocabulary entries are targets so every block edge is exercised.
Head make_head(int64_t N, int64_t C, int64_t V, uint64_t seed, int64_t ignore_every = 0,
               at::ScalarType dtype = at::kFloat) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  Head p;
  auto f = at::TensorOptions(at::kFloat);
  p.h = at::randn({N, C}, gen, f).to(dtype).requires_grad_(true);
  p.w = (at::randn({V, C}, gen, f) * 0.5).to(dtype).requires_grad_(true);
  p.t = at::randint(V, {N}, gen, at::TensorOptions(at::kLong));
  if (N > 1) p.t[0] = 0, p.t[1] = V - 1;
  for (int64_t i = ignore_every - 1; ignore_every > 0 && i < N; i += ignore_every) p.t[i] = kIgnoreTarget;
  return p;
}

// The unfused reference in float32: full logits, softcap, log_softmax, nll_loss (sum, -100 ignored).
at::Tensor reference_loss(const at::Tensor& h, const at::Tensor& w, const at::Tensor& t, double softcap) {
  at::Tensor z = at::matmul(h.to(at::kFloat), w.to(at::kFloat).t());
  if (softcap > 0) z = at::tanh(z / softcap) * softcap;
  return at::nll_loss(at::log_softmax(z, -1), t, {}, at::Reduction::Sum, kIgnoreTarget);
}

struct Result {
  double loss;
  at::Tensor gh, gw;  // float32 copies; undefined when the tensor got no gradient
};

Result run(Head& p, bool fused, int64_t chunk, double softcap, double scale = 1.0) {
  p.h.mutable_grad() = at::Tensor();
  p.w.mutable_grad() = at::Tensor();
  at::Tensor loss =
      fused ? chunked_cross_entropy(p.h, p.w, p.t, chunk, softcap) : reference_loss(p.h, p.w, p.t, softcap);
  (loss * scale).backward();
  auto grab = [](const at::Tensor& x) { return x.grad().defined() ? x.grad().to(at::kFloat) : at::Tensor(); };
  return {loss.item<double>(), grab(p.h), grab(p.w)};
}

// |a - b| <= atol + rtol |b| elementwise, with the worst element in the failure message.
void expect_close(const at::Tensor& a, const at::Tensor& b, double rtol, double atol,
                  const std::string& what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what << ": a gradient is missing";
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  at::Tensor err = (a - b).abs() - (atol + rtol * b.abs());
  EXPECT_LE(err.max().item<double>(), 0.0)
      << what << ": largest |difference| " << (a - b).abs().max().item<double>() << " over " << atol << " + "
      << rtol << " |ref|";
}

}  // namespace

TEST(FusedCrossEntropy, MatchesFullLogitsValueAndGradients) {
  // Rows 13 in chunks of 4, 5, 13 and 64 (uneven, whole, larger); vocabulary 11 (one block) and
  // 9000 (blocks of 4096, 4096, 808); every third target ignored.
  for (int64_t V : {11, 9000})
    for (double softcap : {0.0, 5.0})
      for (int64_t chunk : {4, 5, 13, 64}) {
        Head p = make_head(13, 8, V, 1 + V, 3);
        const std::string what = "V " + std::to_string(V) + " softcap " + std::to_string(softcap) +
                                 " chunk " + std::to_string(chunk);
        Result mine = run(p, true, chunk, softcap), ref = run(p, false, chunk, softcap);
        EXPECT_NEAR(mine.loss, ref.loss, 1e-4 * std::abs(ref.loss)) << what;
        expect_close(mine.gh, ref.gh, 1e-4, 1e-6, what + ": grad hidden");
        expect_close(mine.gw, ref.gw, 1e-4, 1e-6, what + ": grad weight");
      }
}

TEST(FusedCrossEntropy, ScalesItsGradientsByTheIncomingOne) {
  Head p = make_head(9, 8, 17, 2);
  Result one = run(p, true, 4, 0.0), quarter = run(p, true, 4, 0.0, 0.25);
  expect_close(quarter.gh, one.gh * 0.25, 1e-6, 1e-8, "grad hidden * 0.25");
  expect_close(quarter.gw, one.gw * 0.25, 1e-6, 1e-8, "grad weight * 0.25");
  // Used twice in one graph: autograd sums the incoming gradients before the one backward call.
  p.h.mutable_grad() = at::Tensor();
  p.w.mutable_grad() = at::Tensor();
  at::Tensor loss = chunked_cross_entropy(p.h, p.w, p.t, 4, 0.0);
  (2 * loss + 3 * loss).backward();
  expect_close(p.h.grad(), one.gh * 5, 1e-6, 1e-8, "grad hidden, loss used twice");
}

TEST(FusedCrossEntropy, FrozenHeadGetsNoGradientAndHiddenStillDoes) {
  Head p = make_head(10, 8, 23, 3, 4);
  Result ref = run(p, false, 3, 5.0);
  p.w.requires_grad_(false);
  Result mine = run(p, true, 3, 5.0);
  EXPECT_FALSE(mine.gw.defined());
  expect_close(mine.gh, ref.gh, 1e-4, 1e-6, "grad hidden with a frozen head");
  // Only the head trains (hidden a constant): its gradient alone.
  p.w.requires_grad_(true);
  p.h = p.h.detach();
  Result head_only = run(p, true, 3, 5.0);
  EXPECT_FALSE(head_only.gh.defined());
  expect_close(head_only.gw, ref.gw, 1e-4, 1e-6, "grad weight with constant hidden");
}

TEST(FusedCrossEntropy, AllTargetsIgnoredIsZeroWithoutNaN) {
  Head p = make_head(6, 8, 4100, 4, 1);  // every target ignored; two vocabulary blocks
  Result mine = run(p, true, 4, 0.0);
  EXPECT_EQ(mine.loss, 0.0);
  EXPECT_EQ(mine.gh.abs().sum().item<double>(), 0.0);
  EXPECT_EQ(mine.gw.abs().sum().item<double>(), 0.0);
  // And no rows at all.
  Head none = make_head(0, 8, 11, 5);
  Result empty = run(none, true, 4, 0.0);
  EXPECT_EQ(empty.loss, 0.0);
  EXPECT_EQ(empty.gw.abs().sum().item<double>(), 0.0);
}

TEST(FusedCrossEntropy, WithoutAutogradOnlyTheLoss) {
  Head p = make_head(7, 8, 19, 6, 2);
  double ref = reference_loss(p.h, p.w, p.t, 0.0).item<double>();
  at::NoGradGuard no_grad;
  at::Tensor loss = chunked_cross_entropy(p.h, p.w, p.t, 3, 0.0);
  EXPECT_FALSE(loss.requires_grad());
  EXPECT_NEAR(loss.item<double>(), ref, 1e-4 * std::abs(ref));
}

TEST(FusedCrossEntropy, SecondBackwardFailsNamingTheLoss) {
  Head p = make_head(5, 8, 11, 7);
  at::Tensor loss = chunked_cross_entropy(p.h, p.w, p.t, 2, 0.0);
  loss.backward({}, /*retain_graph=*/true);
  try {
    loss.backward();
    FAIL() << "a second backward through the fused loss did not fail";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("chunked_cross_entropy: backward ran twice through the same loss"),
              std::string::npos)
        << e.what();
  }
}

TEST(FusedCrossEntropy, LowPrecisionHeadsKeepTheirDtype) {
  // bf16 accumulates the head's gradient in bf16 (as autograd does), fp16 in float32 then casts:
  // both near the float32 reference on the same rounded inputs.
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf})
    for (double softcap : {0.0, 5.0}) {
      Head p = make_head(21, 16, 5000, 8, 5, dtype);
      const std::string what = std::string(c10::toString(dtype)) + " softcap " + std::to_string(softcap);
      Result mine = run(p, true, 8, softcap);
      EXPECT_EQ(p.w.grad().scalar_type(), dtype) << what;
      EXPECT_EQ(p.h.grad().scalar_type(), dtype) << what;
      Result ref = run(p, false, 8, softcap);
      EXPECT_NEAR(mine.loss, ref.loss, 2e-3 * std::abs(ref.loss)) << what;
      expect_close(mine.gh, ref.gh, 3e-2, 2e-3, what + ": grad hidden");
      expect_close(mine.gw, ref.gw, 3e-2, 2e-3, what + ": grad weight");
    }
}

// ============================================================================================
// The one-pass path (cross_entropy_rows_: the CUDA kernel's arithmetic; on the CPU its reference)

namespace {

// The unfused composition in float64: full logits, softcap, log_softmax, nll_loss.
at::Tensor reference_loss64(const at::Tensor& h, const at::Tensor& w, const at::Tensor& t, double softcap) {
  at::Tensor z = at::matmul(h, w.t());
  if (softcap > 0) z = at::tanh(z / softcap) * softcap;
  return at::nll_loss(at::log_softmax(z, -1), t, {}, at::Reduction::Sum, kIgnoreTarget);
}

Result run_one_pass(Head& p, int64_t chunk, double softcap, CrossEntropyPath path) {
  p.h.mutable_grad() = at::Tensor();
  p.w.mutable_grad() = at::Tensor();
  at::Tensor loss = chunked_cross_entropy(p.h, p.w, p.t, chunk, softcap, path);
  loss.backward();
  auto grab = [](const at::Tensor& x) {
    return x.grad().defined() ? x.grad().to(at::kDouble) : at::Tensor();
  };
  return {loss.item<double>(), grab(p.h), grab(p.w)};
}

}  // namespace

TEST(CrossEntropyOnePass, MatchesAutogradInFloat64) {
  // The whole one-pass path in float64 (its gradient block in z's dtype), so only the float32 sum
  // of the loss is rounded: value, grad hidden and grad weight against log_softmax + nll_loss.
  for (int64_t V : {11, 9000})
    for (double softcap : {0.0, 5.0})
      for (int64_t chunk : {4, 13}) {
        Head p = make_head(13, 8, V, 11 + V, 3, at::kDouble);
        const std::string what = "V " + std::to_string(V) + " softcap " + std::to_string(softcap) +
                                 " chunk " + std::to_string(chunk);
        Result mine = run_one_pass(p, chunk, softcap, CrossEntropyPath::ce_path_one_pass);
        p.h.mutable_grad() = at::Tensor();
        p.w.mutable_grad() = at::Tensor();
        at::Tensor ref_loss = reference_loss64(p.h, p.w, p.t, softcap);
        ref_loss.backward();
        EXPECT_NEAR(mine.loss, ref_loss.item<double>(), 1e-6 * std::abs(ref_loss.item<double>())) << what;
        expect_close(mine.gh, p.h.grad(), 1e-10, 1e-12, what + ": grad hidden");
        expect_close(mine.gw, p.w.grad(), 1e-10, 1e-12, what + ": grad weight");
      }
}

TEST(CrossEntropyOnePass, RowsContract) {
  // Row 0 plain, row 1 ignored, row 2 a target outside the vocabulary, row 3 the last entry.
  at::Generator gen = at::detail::createCPUGenerator(21);
  const int64_t V = 37;
  for (double softcap : {0.0, 3.0}) {
    at::Tensor z0 = at::randn({4, V}, gen, at::TensorOptions(at::kDouble)) * 4;
    at::Tensor t = at::tensor(std::vector<int64_t>{5, kIgnoreTarget, V, V - 1});
    at::Tensor x = softcap > 0 ? at::tanh(z0 / softcap) * softcap : z0;
    at::Tensor logp = at::log_softmax(x, 1);

    at::Tensor z = z0.clone();
    at::Tensor only_loss = cross_entropy_rows_(z, t, softcap, false);
    EXPECT_TRUE(at::equal(z, z0)) << "without write_grad z is only read";
    at::Tensor loss = cross_entropy_rows_(z, t, softcap, true);
    EXPECT_TRUE(at::equal(loss.isnan(), only_loss.isnan()));
    EXPECT_EQ(loss.scalar_type(), at::kDouble);
    EXPECT_NEAR(loss[0].item<double>(), -logp[0][5].item<double>(), 1e-12);
    EXPECT_EQ(loss[1].item<double>(), 0.0);
    EXPECT_TRUE(std::isnan(loss[2].item<double>()));
    EXPECT_NEAR(loss[3].item<double>(), -logp[3][V - 1].item<double>(), 1e-12);

    at::Tensor dtanh = softcap > 0 ? 1 - at::tanh(z0 / softcap).pow(2) : at::ones_like(z0);
    at::Tensor expect = logp.exp();
    expect[0][5] -= 1;
    expect[3][V - 1] -= 1;
    expect = expect * dtanh;
    expect_close(z[0], expect[0], 1e-12, 1e-14, "row 0 gradient");
    EXPECT_EQ(z[1].abs().sum().item<double>(), 0.0) << "an ignored row's gradient is zero";
    expect_close(z[2], expect[2], 1e-12, 1e-14, "a bad target's row: the softmax, no onehot");
    expect_close(z[3], expect[3], 1e-12, 1e-14, "row 3 gradient");
  }
}

TEST(CrossEntropyOnePass, LowPrecisionAgreesWithTheBlocks) {
  // bf16 / fp16 heads: the one-pass path (gradient block rounded to the model dtype) against the
  // float32-block path on the same inputs; the fp16 head's gradient still summed in float32.
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf, at::kFloat})
    for (double softcap : {0.0, 5.0}) {
      Head p = make_head(21, 16, 5000, 9, 5, dtype);
      const std::string what = std::string(c10::toString(dtype)) + " softcap " + std::to_string(softcap);
      Result one = run_one_pass(p, 8, softcap, CrossEntropyPath::ce_path_one_pass);
      EXPECT_EQ(p.w.grad().scalar_type(), dtype) << what;
      EXPECT_EQ(p.h.grad().scalar_type(), dtype) << what;
      Result blocks = run_one_pass(p, 8, softcap, CrossEntropyPath::ce_path_blocks);
      const bool f32 = dtype == at::kFloat;
      EXPECT_NEAR(one.loss, blocks.loss, (f32 ? 1e-5 : 1e-3) * std::abs(blocks.loss)) << what;
      expect_close(one.gh, blocks.gh, f32 ? 1e-4 : 3e-2, f32 ? 1e-6 : 2e-3, what + ": grad hidden");
      expect_close(one.gw, blocks.gw, f32 ? 1e-4 : 3e-2, f32 ? 1e-6 : 2e-3, what + ": grad weight");
    }
}

TEST(CrossEntropyOnePass, FrozenHeadAndNoGradPaths) {
  Head p = make_head(10, 8, 23, 12, 4, at::kDouble);
  at::Tensor ref = reference_loss64(p.h, p.w, p.t, 5.0);
  ref.backward();
  at::Tensor ref_gh = p.h.grad().clone();
  p.w.requires_grad_(false);
  Result mine = run_one_pass(p, 3, 5.0, CrossEntropyPath::ce_path_one_pass);
  EXPECT_FALSE(mine.gw.defined());
  expect_close(mine.gh, ref_gh, 1e-10, 1e-12, "grad hidden with a frozen head");
  at::NoGradGuard no_grad;
  at::Tensor loss = chunked_cross_entropy(p.h, p.w, p.t, 3, 5.0, CrossEntropyPath::ce_path_one_pass);
  EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-6 * std::abs(ref.item<double>()));
}
