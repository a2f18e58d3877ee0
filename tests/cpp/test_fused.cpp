// The fused RMSNorm, RoPE and gated activation (host/model/fused.h) against the plain autograd
// compositions written out here: float64 forward and hand-written gradients to 1e-12, non-contiguous
// inputs, only the gradients asked for, and bf16 forwards equal bit for bit to the expressions the
// transformer used before (HF's). Then the pieces around them: grouped-query SDPA equals repeated KV
// heads, RoPE's inverse frequencies are cached per device, and whole-model gradients in float64
// agree with central differences. The CUDA kernels: tests/cuda/test_fused_kernels.cpp.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <string>
#include <vector>

#include "host/model/attention.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/model/fused.h"
#include "host/model/rope.h"
#include "host/model/transformer.h"

using namespace luatune;

namespace {

at::TensorOptions f64() {
  return at::TensorOptions(at::kDouble);
}

// d(sum(out * g)) / d inputs, undefined where an input is unused.
std::vector<at::Tensor> grads_of(const at::Tensor& out, const at::Tensor& g,
                                 const std::vector<at::Tensor>& inputs) {
  return torch::autograd::grad({out}, inputs, {g}, /*retain_graph=*/false, /*create_graph=*/false,
                               /*allow_unused=*/true);
}

void expect_close(const at::Tensor& got, const at::Tensor& want, double tol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  double err = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  EXPECT_LE(err, tol) << what;
}

// got against want, both functions of `inputs`: their values to forward_tol, then the gradients of
// sum(out * g) for each input (named in `names`) to 1e-12.
void expect_same_function(const at::Tensor& got, const at::Tensor& want, const at::Tensor& g,
                          const std::vector<at::Tensor>& inputs, const std::vector<std::string>& names,
                          double forward_tol, const std::string& what) {
  expect_close(got, want, forward_tol, what + " forward");
  auto gg = grads_of(got, g, inputs), gw = grads_of(want, g, inputs);
  for (size_t i = 0; i < inputs.size(); i++) expect_close(gg[i], gw[i], 1e-12, what + " " + names[i]);
}

// HF's RMSNorm modules as written (Llama: w * n cast to the input dtype; Gemma 2: n * (1 + w)).
at::Tensor rms_norm_reference(const at::Tensor& x, const at::Tensor& w, double eps, bool gemma) {
  at::ScalarType ct = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor xf = x.to(ct);
  at::Tensor n = xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps);
  if (gemma) return (n * (1.0 + w.to(ct))).to(x.scalar_type());
  return w * n.to(x.scalar_type());
}

at::Tensor act_reference(const at::Tensor& x, Activation a) {
  if (a == Activation::act_silu) return x * at::sigmoid(x);
  if (a == Activation::act_gelu_tanh)
    return 0.5 * x * (1 + at::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x.pow(3))));
  return 0.5 * x * (1 + at::erf(x / std::sqrt(2.0)));
}

// cos, sin (B, T, D) for positions (B, T) with a llama-style head_dim D.
std::pair<at::Tensor, at::Tensor> cos_sin(int64_t B, int64_t T, int64_t D, at::ScalarType dtype) {
  ModelConfig c;
  c.head_dim = D;
  at::Tensor pos = at::arange(3, 3 + T, at::kLong).unsqueeze(0).repeat({B, 1});
  pos[B - 1] = at::arange(T, at::kLong);  // a packed row restarting its positions
  return rope_cos_sin(rope_inv_freq(c), pos, 1.0, dtype);
}

}  // namespace

TEST(FusedRmsNorm, MatchesCompositionInFloat64) {
  at::manual_seed(1);
  for (bool gemma : {false, true}) {
    for (bool contiguous : {true, false}) {
      // Non-contiguous: a transposed view with every other element of the last dim.
      at::Tensor base = at::randn({5, 3, 2 * 24}, f64());
      at::Tensor x = contiguous ? base.narrow(-1, 0, 24).transpose(0, 1).contiguous()
                                : base.slice(-1, 0, 48, 2).transpose(0, 1);
      x.requires_grad_(true);
      at::Tensor w = (1.0 + 0.3 * at::randn({24}, f64())).requires_grad_(true);
      at::Tensor g = at::randn({3, 5, 24}, f64());
      std::string what = std::string(gemma ? "gemma" : "llama") + (contiguous ? "" : " strided");
      at::Tensor want = rms_norm_reference(x, w, 1e-6, gemma), got = rms_norm_fused(x, w, 1e-6, gemma);
      expect_same_function(got, want, g, {x, w}, {"dx", "dw"}, 1e-13, what);
    }
  }
}

TEST(FusedRmsNorm, OnlyTheGradientsAskedFor) {
  at::manual_seed(2);
  at::Tensor x = at::randn({4, 16}, f64()), w = at::randn({16}, f64()).requires_grad_(true);
  at::Tensor g = at::randn({4, 16}, f64());
  auto got = grads_of(rms_norm_fused(x, w, 1e-5, false), g, {w});  // frozen input (first layer)
  auto want = grads_of(rms_norm_reference(x, w, 1e-5, false), g, {w});
  expect_close(got[0], want[0], 1e-12, "dw");
  // Frozen weight (LoRA): only dx.
  at::Tensor x2 = x.clone().requires_grad_(true), w2 = w.detach();
  expect_close(grads_of(rms_norm_fused(x2, w2, 1e-5, true), g, {x2})[0],
               grads_of(rms_norm_reference(x2, w2, 1e-5, true), g, {x2})[0], 1e-12, "dx");
  // No grad anywhere: a plain tensor, no graph.
  at::Tensor y = rms_norm_fused(x, w.detach(), 1e-5, false);
  EXPECT_FALSE(y.requires_grad());
}

TEST(FusedRmsNorm, Bf16EqualsTheHfExpression) {
  at::manual_seed(3);
  for (bool gemma : {false, true}) {
    at::Tensor x = (4 * at::randn({2, 7, 40})).to(at::kBFloat16).requires_grad_(true);
    at::Tensor w = (1 + 0.2 * at::randn({40})).to(at::kBFloat16).requires_grad_(true);
    at::Tensor want = rms_norm_reference(x, w, 1e-6, gemma), got = rms_norm_fused(x, w, 1e-6, gemma);
    EXPECT_EQ(got.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(at::equal(got, want)) << (gemma ? "gemma" : "llama");
    // Gradients rounded once from float32: within bf16's precision of the float64 ones.
    at::Tensor g = at::randn({2, 7, 40}).to(at::kBFloat16);
    auto gg = grads_of(got, g, {x, w});
    at::Tensor x64 = x.detach().to(at::kDouble).requires_grad_(true),
               w64 = w.detach().to(at::kDouble).requires_grad_(true);
    auto g64 = grads_of(rms_norm_reference(x64, w64, 1e-6, gemma), g.to(at::kDouble), {x64, w64});
    EXPECT_EQ(gg[0].scalar_type(), at::kBFloat16);
    EXPECT_TRUE(at::allclose(gg[0].to(at::kDouble), g64[0], 1e-2, 1e-2));
    EXPECT_TRUE(at::allclose(gg[1].to(at::kDouble), g64[1], 1e-2, 1e-1));  // a sum of 14 rows
  }
}

TEST(FusedRope, MatchesCompositionInFloat64) {
  at::manual_seed(4);
  const int64_t B = 2, T = 5, H = 3, D = 8;
  auto [cos, sin] = cos_sin(B, T, D, at::kDouble);
  for (bool contiguous : {true, false}) {
    // Non-contiguous: (B, H, T, D) memory seen as (B, T, H, D).
    at::Tensor x =
        contiguous ? at::randn({B, T, H, D}, f64()) : at::randn({B, H, T, D}, f64()).transpose(1, 2);
    x.requires_grad_(true);
    at::Tensor g = at::randn({B, T, H, D}, f64());
    at::Tensor want = rope_apply(x, cos.unsqueeze(2), sin.unsqueeze(2)), got = rope_fused(x, cos, sin);
    expect_close(got, want, 1e-14, "forward");
    expect_close(grads_of(got, g, {x})[0], grads_of(want, g, {x})[0], 1e-14, "dx");
  }
}

TEST(FusedRope, Bf16EqualsTheOldLayout) {
  // Before: rope_apply on the (B, H, T, D) transposed view with cos (B, 1, T, D); now on (B, T, H, D).
  at::manual_seed(5);
  const int64_t B = 2, T = 6, H = 4, D = 16;
  auto [cos, sin] = cos_sin(B, T, D, at::kBFloat16);
  at::Tensor x = (3 * at::randn({B, T, H, D})).to(at::kBFloat16);
  at::Tensor before = rope_apply(x.transpose(1, 2), cos.unsqueeze(1), sin.unsqueeze(1));
  EXPECT_TRUE(at::equal(rope_fused(x, cos, sin).transpose(1, 2), before));
}

TEST(FusedRope, InverseFrequenciesCachedPerDevice) {
  ModelConfig c;
  c.head_dim = 16;
  c.rope.theta = 500000.0;
  at::Tensor a = rope_inv_freq_on(c, at::kCPU), b = rope_inv_freq_on(c, at::kCPU);
  EXPECT_TRUE(a.is_same(b));
  EXPECT_TRUE(at::equal(a, rope_inv_freq(c)));
  c.rope.theta = 10000.0;  // another config, another entry
  at::Tensor other = rope_inv_freq_on(c, at::kCPU);
  EXPECT_FALSE(other.is_same(a));
  EXPECT_TRUE(at::equal(other, rope_inv_freq(c)));
}

TEST(FusedGlu, MatchesCompositionInFloat64) {
  at::manual_seed(6);
  for (Activation act : {Activation::act_silu, Activation::act_gelu_tanh, Activation::act_gelu}) {
    at::Tensor gate = (2 * at::randn({3, 4, 10}, f64())).requires_grad_(true);
    at::Tensor up = at::randn({3, 10, 4}, f64()).transpose(1, 2).requires_grad_(true);  // strided
    at::Tensor g = at::randn({3, 4, 10}, f64());
    at::Tensor want = act_reference(gate, act) * up, got = glu_fused(gate, up, act);
    std::string what = "act " + std::to_string(static_cast<int>(act));
    expect_same_function(got, want, g, {gate, up}, {"dgate", "dup"}, 1e-13, what);
  }
}

TEST(FusedGlu, Bf16EqualsTheHfExpression) {
  at::manual_seed(7);
  at::Tensor gate = (3 * at::randn({2, 5, 24})).to(at::kBFloat16),
             up = at::randn({2, 5, 24}).to(at::kBFloat16);
  EXPECT_TRUE(at::equal(glu_fused(gate, up, Activation::act_silu), at::silu(gate) * up));
  EXPECT_TRUE(at::equal(glu_fused(gate, up, Activation::act_gelu_tanh), at::gelu(gate, "tanh") * up));
  // With autograd: the same forward through the Function.
  at::Tensor gr = gate.clone().requires_grad_(true);
  EXPECT_TRUE(at::equal(glu_fused(gr, up, Activation::act_silu), at::silu(gate) * up));
}

TEST(FusedAttention, GroupedHeadsEqualRepeatedKv) {
  // attention_forward takes k, v with KV heads (enable_gqa where a fused backend takes them,
  // repeat_kv elsewhere); both must equal SDPA on explicitly repeated heads, and SDPA's own
  // enable_gqa must group heads as repeat_kv does (consecutive query heads per KV head).
  at::manual_seed(8);
  const int64_t B = 2, H = 6, KV = 2, T = 5, S = 7, D = 8;
  for (bool masked : {false, true}) {
    int64_t s = masked ? S : T;
    at::Tensor q = at::randn({B, H, T, D}, f64()).requires_grad_(true);
    at::Tensor k = at::randn({B, KV, s, D}, f64()).requires_grad_(true);
    at::Tensor v = at::randn({B, KV, s, D}, f64()).requires_grad_(true);
    at::Tensor allowed;
    if (masked)
      allowed = (at::arange(S).unsqueeze(0) <= at::arange(2, 2 + T).unsqueeze(1)).view({1, 1, T, S});
    std::optional<at::Tensor> mask = masked ? std::optional<at::Tensor>(allowed) : std::nullopt;
    at::Tensor want = at::scaled_dot_product_attention(q, repeat_kv(k, H / KV), repeat_kv(v, H / KV), mask,
                                                       0.0, !masked, 0.3);
    at::Tensor gqa = at::scaled_dot_product_attention(q, k, v, mask, 0.0, !masked, 0.3, true);
    at::Tensor got = attention_forward(q, k, v, allowed, 0.3, 0);
    std::string what = masked ? "masked" : "causal";
    expect_close(gqa, want, 1e-12, what + " enable_gqa");
    at::Tensor g = at::randn({B, H, T, D}, f64());
    expect_same_function(got, want, g, {q, k, v}, {"dq", "dk", "dv"}, 1e-12, what + " attention_forward");
  }
  // The softcapped (explicit) path repeats too.
  at::Tensor q = at::randn({B, H, T, D}, f64()), k = at::randn({B, KV, T, D}, f64()),
             v = at::randn({B, KV, T, D}, f64());
  expect_close(attention_forward(q, k, v, at::Tensor(), 0.3, 20.0),
               attention_explicit(q, repeat_kv(k, H / KV), repeat_kv(v, H / KV), at::Tensor(), 0.3, 20.0),
               1e-12, "softcap");
}

TEST(FusedModel, GradientsMatchCentralDifferences) {
  // Every family's layer (Qwen3's q/k norms, Gemma 2's (1 + w) norms and GeGLU) through the fused
  // backwards, in float64: autograd's gradient of a fixed projection of the logits equals central
  // differences on a few weights of each kind.
  for (std::string arch : {"llama", "qwen3", "gemma2"}) {
    std::string fields = R"({"vocab_size": 31, "hidden_size": 16, "intermediate_size": 24,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2)";
    if (arch == "qwen3") fields += R"(, "head_dim": 8)";
    // Gemma 2 without its attention softcap: the explicit attention path takes its softmax in
    // float32, which would drown central differences in rounding noise.
    if (arch == "gemma2")
      fields +=
          R"(, "head_dim": 8, "sliding_window": 3, "query_pre_attn_scalar": 8, "attn_logit_softcapping": null)";
    auto m = model_init(model_config_with(arch, fields + "}", "test"), 3, at::kDouble, at::kCPU);
    at::Tensor ids = at::randint(31, {2, 6}, at::TensorOptions(at::kLong));
    at::Tensor proj = at::randn({2, 6, 31}, f64());
    // Norm weights start at 1 (0 for Gemma): move them so their gradients see a non-trivial w.
    {
      at::NoGradGuard no_grad;
      for (auto& [name, t] : m->named_parameters())
        if (name.find("norm") != std::string::npos) t->add_(0.1 * at::randn(t->sizes(), f64()));
    }
    auto loss = [&]() { return (m->forward(ids) * proj).sum(); };
    std::vector<std::string> names = {"model.layers.0.input_layernorm.weight",
                                      "model.layers.1.mlp.gate_proj.weight",
                                      "model.layers.0.self_attn.q_proj.weight", "model.norm.weight"};
    if (arch == "qwen3") names.push_back("model.layers.1.self_attn.k_norm.weight");
    if (arch == "gemma2") names.push_back("model.layers.0.post_feedforward_layernorm.weight");
    for (const std::string& name : names) {
      at::Tensor* w = nullptr;
      for (auto& [n, t] : m->named_parameters())
        if (n == name) w = t;
      ASSERT_NE(w, nullptr) << name;
      w->requires_grad_(true);
      at::Tensor grad = torch::autograd::grad({loss()}, {*w})[0];
      w->requires_grad_(false);
      at::NoGradGuard no_grad;
      at::Tensor flat = w->view(-1);
      for (int64_t i : {int64_t(0), flat.numel() / 2, flat.numel() - 1}) {
        const double h = 1e-6, orig = flat[i].item<double>();
        flat[i] = orig + h;
        double up = loss().item<double>();
        flat[i] = orig - h;
        double down = loss().item<double>();
        flat[i] = orig;
        double numeric = (up - down) / (2 * h), analytic = grad.view(-1)[i].item<double>();
        EXPECT_NEAR(analytic, numeric, 1e-6 * (1 + std::abs(numeric)))
            << arch << " " << name << "[" << i << "]";
      }
    }
  }
}
