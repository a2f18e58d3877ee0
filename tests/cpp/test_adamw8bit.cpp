// Blockwise 8-bit AdamW (host/train/adamw8bit): the dynamic maps against their construction rule
// recomputed here in double, quantize/dequantize bounds and per-block absmax (tail block included),
// one step against a scalar loop written here (dequantize, float32 AdamW, nearest-code quantize),
// the float32 path for small tensors against plain AdamW, training a least-squares problem about as
// well as float32 AdamW, checkpoint round trips and their errors, and CUDA against CPU when present.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "host/quant/quant.h"
#include "host/train/adamw8bit.h"
#include "tests/cpp/test_util.h"

using namespace luatune;

namespace {

at::Tensor randn(int64_t n, uint64_t seed) {
  return at::randn({n}, at::detail::createCPUGenerator(seed));
}

std::vector<float> to_vec(const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU).to(at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

std::vector<uint8_t> to_codes(const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU).contiguous();
  return std::vector<uint8_t>(c.data_ptr<uint8_t>(), c.data_ptr<uint8_t>() + c.numel());
}

// create_dynamic_map's rule in double: for i = 0..6 the midpoints of k + 1 evenly spaced points
// from 0.1 to 1 (k = 2^i signed, 2^(i+1) unsigned), times 10^(i-6), both signs if signed; 0; 1.
std::vector<double> dynamic_map_rule(bool is_signed) {
  std::vector<double> out = {0.0, 1.0};
  for (int i = 0; i < 7; i++) {
    const int k = is_signed ? (1 << i) : (1 << (i + 1));
    for (int j = 0; j < k; j++) {
      const double lo = 0.1 + 0.9 * j / k, hi = 0.1 + 0.9 * (j + 1) / k;
      const double v = std::pow(10.0, i - 6) * (lo + hi) / 2;
      out.push_back(v);
      if (is_signed) out.push_back(-v);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The nearest map value's index by a linear scan (first of equals), then bitsandbytes' sign rule
// for the signed map: a code whose sign bit differs from x's moves one step towards x's sign.
int nearest_code(const std::vector<float>& map, float x, bool sign_rule) {
  int best = 0;
  for (int i = 1; i < 256; i++)
    if (std::fabs(x - map[i]) < std::fabs(x - map[best])) best = i;
  if (sign_rule && std::signbit(map[best]) != std::signbit(x)) best += x > 0 ? 1 : -1;
  return best;
}

// The scalar reference of one quantized step: plain loops over blocks. Inputs are the state
// before the step (codes, absmax) and float32 w, g; outputs the state after and w.
struct RefState {
  std::vector<uint8_t> c1, c2;
  std::vector<float> a1, a2, w;
};

RefState reference_step(const RefState& in, const std::vector<float>& g, int64_t block, double lr,
                        double beta1, double beta2, double eps, double wd, int64_t step) {
  const std::vector<float> smap = to_vec(adam8bit_signed_map()), umap = to_vec(adam8bit_unsigned_map());
  const int64_t n = static_cast<int64_t>(g.size()), blocks = (n + block - 1) / block;
  const float decay = static_cast<float>(1.0 - lr * wd);
  const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, step)));
  const float step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, step)));
  const float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
  const float om1 = static_cast<float>(1.0 - beta1), om2 = static_cast<float>(1.0 - beta2);
  RefState out = in;
  for (int64_t b = 0; b < blocks; b++) {
    const int64_t lo = b * block, hi = std::min(n, lo + block);
    std::vector<float> m(hi - lo), v(hi - lo);
    float max1 = 0, max2 = 0;
    for (int64_t i = lo; i < hi; i++) {
      float mi = smap[in.c1[i]] * in.a1[b], vi = umap[in.c2[i]] * in.a2[b];
      mi = mi * b1 + om1 * g[i];
      vi = vi * b2 + om2 * g[i] * g[i];
      out.w[i] = in.w[i] * decay;
      out.w[i] = out.w[i] - step_size * mi / (std::sqrt(vi) / bc2_sqrt + static_cast<float>(eps));
      m[i - lo] = mi;
      v[i - lo] = vi;
      max1 = std::max(max1, std::fabs(mi));
      max2 = std::max(max2, std::fabs(vi));
    }
    out.a1[b] = max1;
    out.a2[b] = max2;
    for (int64_t i = lo; i < hi; i++) {
      out.c1[i] = static_cast<uint8_t>(nearest_code(smap, max1 > 0 ? m[i - lo] / max1 : 0.0f, true));
      out.c2[i] = static_cast<uint8_t>(nearest_code(umap, max2 > 0 ? v[i - lo] / max2 : 0.0f, false));
    }
  }
  return out;
}

// Codes may differ from the reference only by one step, for values within float rounding of a
// midpoint: at most `max_diff` of them.
void expect_codes_close(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, int64_t max_diff,
                        const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int64_t diff = 0;
  for (size_t i = 0; i < got.size(); i++) {
    if (got[i] == want[i]) continue;
    diff++;
    EXPECT_EQ(std::abs(int(got[i]) - int(want[i])), 1) << what << " element " << i;
  }
  EXPECT_LE(diff, max_diff) << what;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rtol, double atol,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); i++)
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << what << " element " << i;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The maps

TEST(Adam8bit, MapsFollowTheConstructionRule) {
  for (bool is_signed : {true, false}) {
    const at::Tensor& t = is_signed ? adam8bit_signed_map() : adam8bit_unsigned_map();
    ASSERT_EQ(t.scalar_type(), at::kFloat);
    ASSERT_EQ(t.numel(), 256);
    const std::vector<float> v = to_vec(t);
    const std::vector<double> rule = dynamic_map_rule(is_signed);
    ASSERT_EQ(rule.size(), 256u);
    for (int i = 0; i < 256; i++) {
      if (i > 0) {
        EXPECT_LT(v[i - 1], v[i]) << "not strictly ascending at " << i;
      }
      // float32 linspace and midpoints: within a few float32 ulps of the exact values.
      EXPECT_NEAR(v[i], rule[i], 5e-7 * std::fabs(rule[i]))
          << (is_signed ? "signed" : "unsigned") << " " << i;
    }
    EXPECT_EQ(v[255], 1.0f);
  }
  const std::vector<float> s = to_vec(adam8bit_signed_map()), u = to_vec(adam8bit_unsigned_map());
  // Signed: 127 negatives, 0 at index 127, 127 positives and 1. The most negative value is the
  // last midpoint, -0.99296875 (bitsandbytes appends 1 but not -1).
  EXPECT_EQ(s[127], 0.0f);
  EXPECT_FLOAT_EQ(s[0], -0.99296875f);
  EXPECT_FLOAT_EQ(s[254], 0.99296875f);
  EXPECT_FLOAT_EQ(s[128], 5.5e-7f);  // 1e-6 * (0.1 + 1) / 2
  for (int i = 0; i < 127; i++) EXPECT_EQ(s[i], -s[254 - i]) << i;
  // Unsigned: twice the fractions per exponent, all in [0, 1].
  EXPECT_EQ(u[0], 0.0f);
  EXPECT_FLOAT_EQ(u[1], 3.25e-7f);        // 1e-6 * (0.1 + 0.55) / 2
  EXPECT_FLOAT_EQ(u[2], 7.75e-7f);        // 1e-6 * (0.55 + 1) / 2
  EXPECT_FLOAT_EQ(u[254], 0.996484375f);  // (1 - 0.9 / 128 + 1) / 2
  EXPECT_GE(*std::min_element(u.begin(), u.end()), 0.0f);
  // The signed map is the one QLoRA's double quantization already uses, value for value.
  EXPECT_TRUE(at::equal(adam8bit_signed_map(), dynamic_map_8bit()));
}

// ---------------------------------------------------------------------------------------------
// Quantize / dequantize

TEST(Adam8bit, QuantizeRoundTripIsBoundedPerBlock) {
  for (int64_t block : {kAdam8bitBlock, kAdam8bitBlockLegacy}) {
    const int64_t n = 5000, blocks = (n + block - 1) / block;  // a partial last block either way
    // Blocks of very different scales, so a shared scale would show.
    at::Tensor scale = at::pow(10.0, at::arange(blocks, at::kDouble).remainder(5) - 2).to(at::kFloat);
    at::Tensor x = randn(n, 7) * scale.repeat_interleave(block).narrow(0, 0, n);
    at::Tensor codes, absmax;
    adam8bit_quantize(x, adam8bit_signed_map(), codes, absmax, block);
    ASSERT_EQ(codes.scalar_type(), at::kByte);
    ASSERT_EQ(codes.numel(), n);
    ASSERT_EQ(absmax.numel(), blocks);
    at::Tensor back = adam8bit_dequantize(codes, absmax, adam8bit_signed_map(), n, block);
    const std::vector<float> xs = to_vec(x), am = to_vec(absmax), bs = to_vec(back),
                             map = to_vec(adam8bit_signed_map());
    double max_gap = 0;
    for (int i = 1; i < 256; i++) max_gap = std::max(max_gap, double(map[i]) - map[i - 1]);
    for (int64_t b = 0; b < blocks; b++) {
      const int64_t lo = b * block, hi = std::min(n, lo + block);
      float want = 0;
      for (int64_t i = lo; i < hi; i++) want = std::max(want, std::fabs(xs[i]));
      EXPECT_EQ(am[b], want) << "absmax of block " << b << " (block size " << block << ")";
      for (int64_t i = lo; i < hi; i++)
        ASSERT_LE(std::fabs(bs[i] - xs[i]), am[b] * (max_gap / 2 + 1e-6))
            << "element " << i << " block " << b;
    }
  }
}

TEST(Adam8bit, QuantizePicksTheNearestCodeAndKeepsTheSign) {
  const int64_t n = 300;  // one full 256-element block and a 44-element tail
  at::Tensor x = randn(n, 3);
  x[0] = 4.0f;                   // block 0's absmax
  x[1] = -1e-9f;                 // rounds to 0 by distance, kept negative by the sign rule
  x[2] = 1e-9f;                  // rounds to 0 and stays there
  x.narrow(0, 256, 44).zero_();  // an all-zero tail block
  at::Tensor codes, absmax;
  adam8bit_quantize(x, adam8bit_signed_map(), codes, absmax);
  const std::vector<uint8_t> c = to_codes(codes);
  const std::vector<float> xs = to_vec(x), am = to_vec(absmax), map = to_vec(adam8bit_signed_map());
  EXPECT_EQ(am[0], 4.0f);
  EXPECT_EQ(am[1], 0.0f);
  EXPECT_EQ(c[1], 126);  // the smallest negative code, not 127 (0)
  EXPECT_EQ(c[2], 127);
  for (int64_t i = 0; i < n; i++) {
    const float scaled = am[i / 256] > 0 ? xs[i] / am[i / 256] : 0.0f;
    EXPECT_EQ(c[i], nearest_code(map, scaled, true)) << "element " << i;
  }
  at::Tensor back = adam8bit_dequantize(codes, absmax, adam8bit_signed_map(), n);
  EXPECT_LT(back[1].item<float>(), 0.0f);
  EXPECT_TRUE(at::equal(back.narrow(0, 256, 44), at::zeros({44})));
  // The unsigned map has no sign rule: its zero code is 0.
  at::Tensor ucodes, uabsmax;
  adam8bit_quantize(x.abs(), adam8bit_unsigned_map(), ucodes, uabsmax);
  EXPECT_EQ(to_codes(ucodes)[300 - 1], 0);
}

// ---------------------------------------------------------------------------------------------
// The update

TEST(Adam8bit, StepsMatchTheScalarReference) {
  const double lr = 1e-2, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0.01;
  for (int64_t block : {kAdam8bitBlock, kAdam8bitBlockLegacy}) {
    const int64_t n = 5000;  // 20 blocks of 256 (tail 136) or 3 of 2048 (tail 904)
    Adam8bitState s = adam8bit_init(n, at::kCPU, block);
    ASSERT_TRUE(s.quantized);
    ASSERT_EQ(s.blocks(), (n + block - 1) / block);
    at::Tensor w = randn(n, 11);
    for (int64_t step = 1; step <= 3; step++) {
      at::Tensor g = randn(n, 100 + step) * (1.0 + step);
      RefState in{to_codes(s.exp_avg), to_codes(s.exp_avg_sq), to_vec(s.absmax1), to_vec(s.absmax2),
                  to_vec(w)};
      RefState want = reference_step(in, to_vec(g), block, lr, beta1, beta2, eps, wd, step);
      adam8bit_update(w, g, s, lr, beta1, beta2, eps, wd, step);
      SCOPED_TRACE("block " + std::to_string(block) + " step " + std::to_string(step));
      expect_close(to_vec(w), want.w, 1e-6, 1e-7, "w");
      expect_close(to_vec(s.absmax1), want.a1, 1e-6, 0, "absmax1");
      expect_close(to_vec(s.absmax2), want.a2, 1e-6, 0, "absmax2");
      expect_codes_close(to_codes(s.exp_avg), want.c1, n / 1000, "exp_avg");
      expect_codes_close(to_codes(s.exp_avg_sq), want.c2, n / 1000, "exp_avg_sq");
    }
  }
}

TEST(Adam8bit, SmallTensorsKeepFloat32StatesAndStepAsAdamW) {
  EXPECT_FALSE(adam8bit_init(kAdam8bitMinSize - 1, at::kCPU).quantized);
  EXPECT_TRUE(adam8bit_init(kAdam8bitMinSize, at::kCPU).quantized);
  const double lr = 3e-3, beta1 = 0.9, beta2 = 0.99, eps = 1e-6, wd = 0.1;
  const int64_t n = 100;
  Adam8bitState s = adam8bit_init(n, at::kCPU);
  ASSERT_FALSE(s.quantized);
  EXPECT_EQ(s.exp_avg.scalar_type(), at::kFloat);
  EXPECT_FALSE(s.absmax1.defined());
  at::Tensor w = randn(n, 5);
  // torch.optim.AdamW in double, element by element.
  const std::vector<float> w0 = to_vec(w);
  std::vector<double> rw(w0.begin(), w0.end()), rm(n, 0.0), rv(n, 0.0);
  for (int64_t step = 1; step <= 5; step++) {
    at::Tensor g = randn(n, 50 + step);
    const std::vector<float> gs = to_vec(g);
    adam8bit_update(w, g, s, lr, beta1, beta2, eps, wd, step);
    const double bc1 = 1 - std::pow(beta1, step), bc2 = 1 - std::pow(beta2, step);
    for (int64_t i = 0; i < n; i++) {
      rw[i] *= 1 - lr * wd;
      rm[i] = beta1 * rm[i] + (1 - beta1) * gs[i];
      rv[i] = beta2 * rv[i] + (1 - beta2) * gs[i] * gs[i];
      rw[i] -= lr / bc1 * rm[i] / (std::sqrt(rv[i]) / std::sqrt(bc2) + eps);
    }
  }
  const std::vector<float> ws = to_vec(w), ms = to_vec(s.exp_avg), vs = to_vec(s.exp_avg_sq);
  for (int64_t i = 0; i < n; i++) {
    EXPECT_NEAR(ws[i], rw[i], 1e-6 * (1 + std::fabs(rw[i]))) << i;
    EXPECT_NEAR(ms[i], rm[i], 1e-6 * (1 + std::fabs(rm[i]))) << i;
    EXPECT_NEAR(vs[i], rv[i], 1e-6 * (1 + std::fabs(rv[i]))) << i;
  }
}

TEST(Adam8bit, HalfPrecisionParametersRoundOnceFromFloat32) {
  const int64_t n = 6000;
  at::Tensor w32 = randn(n, 21).to(at::kBFloat16).to(at::kFloat), w16 = w32.to(at::kBFloat16);
  Adam8bitState s32 = adam8bit_init(n, at::kCPU), s16 = adam8bit_init(n, at::kCPU);
  at::Tensor g = randn(n, 22).to(at::kBFloat16);  // a bf16 gradient, as a bf16 model gives
  adam8bit_update(w32, g, s32, 1e-2, 0.9, 0.999, 1e-8, 0.0, 1);
  adam8bit_update(w16, g, s16, 1e-2, 0.9, 0.999, 1e-8, 0.0, 1);
  EXPECT_EQ(w16.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(w16, w32.to(at::kBFloat16)));
  EXPECT_TRUE(at::equal(s16.exp_avg, s32.exp_avg));
}

TEST(Adam8bit, TrainsLeastSquaresAsWellAsFloat32AdamW) {
  // min_W mean((X W - Y)^2), W (64, 128) = 8192 parameters (32 blocks), Y = X W* + noise of
  // variance 0.01, so the best training loss is about 0.01 * (1 - 64 / 256) = 0.0075.
  auto gen = at::detail::createCPUGenerator(31);
  at::Tensor X = at::randn({256, 64}, gen), W_true = at::randn({64, 128}, gen);
  at::Tensor Y = X.mm(W_true) + 0.1 * at::randn({256, 128}, gen);
  auto loss_and_grad = [&](const at::Tensor& w_flat, at::Tensor* grad) {
    at::Tensor r = X.mm(w_flat.view({64, 128})) - Y;
    *grad = (2.0 / r.numel()) * X.t().mm(r).reshape({-1});
    return r.pow(2).mean().item<double>();
  };
  // 500 steps at a constant rate bring both runs to the noise floor. On the way there the 8-bit
  // run trails (about 1.2 times the float32 loss at 300 steps here): a second moment whose
  // per-step change (1 - beta2 = 0.1%) is below its code spacing keeps its code relative to the
  // block's absmax. bitsandbytes' states behave the same; docs/adamw8bit.md.
  const double lr = 2e-2, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0.0;
  const int64_t n = 64 * 128, steps = 500;
  // 8-bit.
  at::Tensor w8 = at::zeros({n});
  Adam8bitState s = adam8bit_init(n, at::kCPU);
  ASSERT_TRUE(s.quantized);
  at::Tensor g;
  const double initial = loss_and_grad(w8, &g);
  for (int64_t t = 1; t <= steps; t++) {
    loss_and_grad(w8, &g);
    adam8bit_update(w8, g, s, lr, beta1, beta2, eps, wd, t);
  }
  const double loss8 = loss_and_grad(w8, &g);
  // Float32 AdamW written out here.
  at::Tensor w32 = at::zeros({n}), m = at::zeros({n}), v = at::zeros({n});
  for (int64_t t = 1; t <= steps; t++) {
    loss_and_grad(w32, &g);
    w32.mul_(1 - lr * wd);
    m.mul_(beta1).add_(g, 1 - beta1);
    v.mul_(beta2).addcmul_(g, g, 1 - beta2);
    at::Tensor denom = v.sqrt() / std::sqrt(1 - std::pow(beta2, t)) + eps;
    w32.addcdiv_(m, denom, -lr / (1 - std::pow(beta1, t)));
  }
  const double loss32 = loss_and_grad(w32, &g);
  EXPECT_LT(loss32, 0.01) << "the float32 baseline did not train: " << initial << " -> " << loss32;
  EXPECT_NEAR(loss8, loss32, 0.03 * loss32) << "initial " << initial;
}

// ---------------------------------------------------------------------------------------------
// Checkpoints

TEST(Adam8bit, StateRoundTripsThroughNamedTensors) {
  for (int64_t n : {int64_t{5000}, int64_t{100}}) {
    Adam8bitState s = adam8bit_init(n, at::kCPU);
    at::Tensor w = randn(n, 41);
    for (int64_t t = 1; t <= 2; t++) adam8bit_update(w, randn(n, 41 + t), s, 1e-2, 0.9, 0.999, 1e-8, 0.01, t);
    auto named = s.tensors("opt.layer");
    std::vector<std::string> names;
    for (const auto& p : named) names.push_back(p.first);
    if (s.quantized) {
      EXPECT_EQ(names, (std::vector<std::string>{"opt.layer.exp_avg", "opt.layer.exp_avg_sq",
                                                 "opt.layer.absmax1", "opt.layer.absmax2"}));
      EXPECT_EQ(s.bytes(), 2 * n + 8 * s.blocks());
    } else {
      EXPECT_EQ(names, (std::vector<std::string>{"opt.layer.exp_avg", "opt.layer.exp_avg_sq"}));
      EXPECT_EQ(s.bytes(), 8 * n);
    }
    Adam8bitState r = adam8bit_init(n, at::kCPU);
    r.load(named, "opt.layer");
    EXPECT_TRUE(at::equal(r.exp_avg, s.exp_avg));
    EXPECT_TRUE(at::equal(r.exp_avg_sq, s.exp_avg_sq));
    if (s.quantized) {
      EXPECT_TRUE(at::equal(r.absmax1, s.absmax1));
      EXPECT_TRUE(at::equal(r.absmax2, s.absmax2));
    }
    // The saved tensors are copies: stepping the state leaves them as they were.
    at::Tensor saved = named[0].second.clone();
    at::Tensor w2 = w.clone(), g = randn(n, 99);
    adam8bit_update(w, g, s, 1e-2, 0.9, 0.999, 1e-8, 0.01, 3);
    adam8bit_update(w2, g, r, 1e-2, 0.9, 0.999, 1e-8, 0.01, 3);
    EXPECT_TRUE(at::equal(named[0].second, saved));
    EXPECT_TRUE(at::equal(w, w2));
  }
}

TEST(Adam8bit, LoadNamesTheMissingOrMisShapedTensor) {
  Adam8bitState s = adam8bit_init(5000, at::kCPU);
  auto named = s.tensors("p");
  named.pop_back();
  EXPECT_EQ(error_of([&] { s.load(named, "p"); }),
            "adamw8bit: tensor p.absmax2 is missing from the checkpoint");
  // A state saved with bitsandbytes' old 2048-element blocks does not load into 256-element ones.
  auto legacy = adam8bit_init(5000, at::kCPU, kAdam8bitBlockLegacy).tensors("p");
  EXPECT_EQ(error_of([&] { s.load(legacy, "p"); }),
            "adamw8bit: tensor p.absmax1 is Tensor(float32, [3], cpu), expected float32 [20] (8-bit state, "
            "256-element blocks)");
  auto small = adam8bit_init(100, at::kCPU).tensors("p");
  Adam8bitState s100 = adam8bit_init(100, at::kCPU);
  small[1].second = small[1].second.to(at::kByte);
  EXPECT_EQ(
      error_of([&] { s100.load(small, "p"); }),
      "adamw8bit: tensor p.exp_avg_sq is Tensor(uint8, [100], cpu), expected float32 [100] (float32 state)");
  at::Tensor w = at::zeros({10});
  EXPECT_EQ(error_of([&] { adam8bit_update(w, w, s100, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1); }),
            "adamw8bit: the parameter must be a flat floating tensor of 100 elements, got Tensor(float32, "
            "[10], cpu)");
  at::Tensor w100 = at::zeros({100});
  EXPECT_EQ(error_of([&] { adam8bit_update(w100, w100, s100, 1e-3, 0.9, 0.999, 1e-8, 0.0, 0); }),
            "adamw8bit: step counts from 1, got 0");
}

// ---------------------------------------------------------------------------------------------
// CUDA

TEST(Adam8bit, CudaMatchesCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 3 * kAdam8bitBlock * 1000 + 77;
  Adam8bitState sc = adam8bit_init(n, at::kCPU), sg = adam8bit_init(n, at::Device(at::kCUDA, 0));
  at::Tensor wc = randn(n, 61), wg = wc.to(at::kCUDA);
  for (int64_t t = 1; t <= 3; t++) {
    at::Tensor g = randn(n, 61 + t);
    adam8bit_update(wc, g, sc, 1e-2, 0.9, 0.999, 1e-8, 0.01, t);
    at::Tensor gg = g.to(at::kCUDA);
    adam8bit_update(wg, gg, sg, 1e-2, 0.9, 0.999, 1e-8, 0.01, t);
  }
  EXPECT_TRUE(at::allclose(wg.cpu(), wc, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(sg.absmax1.cpu(), sc.absmax1, 1e-5, 0));
  EXPECT_TRUE(at::allclose(sg.absmax2.cpu(), sc.absmax2, 1e-5, 0));
  const double same1 = sg.exp_avg.cpu().eq(sc.exp_avg).to(at::kDouble).mean().item<double>();
  const double same2 = sg.exp_avg_sq.cpu().eq(sc.exp_avg_sq).to(at::kDouble).mean().item<double>();
  EXPECT_GT(same1, 0.999);
  EXPECT_GT(same2, 0.999);
}
