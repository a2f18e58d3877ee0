// The fused RMSNorm, RoPE and gated-activation CUDA kernels (host/model/kernels/fused_cuda.cu)
// against the CPU path of host/model/fused.cpp, in f32, bf16 and f16: first each kernel called
// directly (so a wiring mistake cannot hide a kernel behind ATen's own CUDA ops), then forward and
// backward through the autograd Functions, with non-contiguous inputs, frozen weights, rows longer
// than a block and shorter than a warp. RoPE must match bit for bit (the same roundings, no
// reductions); the rest within a few float32 ulps or one unit of bf16/f16 rounding, since sums run
// in another order and expf/erff/tanhf are CUDA's. Also grouped-query attention on CUDA against
// repeated KV heads. Skips (77) without a CUDA device or kernels.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "host/model/attention.h"
#include "host/model/config.h"
#include "host/model/fused.h"
#include "host/model/rope.h"

#ifdef LUATUNE_HAS_KERNELS
#include "host/model/kernels/fused_cuda.h"
#endif

namespace {

using namespace luatune;

int g_failures = 0;

void check(bool ok, const std::string& what, double err = 0) {
  if (!ok) g_failures++;
  std::printf("%s %s (max err %.3g)\n", ok ? "ok  " : "FAIL", what.c_str(), err);
}

const char* dtype_name(at::ScalarType t) {
  return t == at::kFloat ? "f32" : t == at::kBFloat16 ? "bf16" : "f16";
}

// Relative tolerance: float32 a few ulps over short sums; bf16 / f16 one rounding unit (and a bit).
double tol_of(at::ScalarType t) {
  return t == at::kFloat ? 2e-5 : t == at::kBFloat16 ? 1.6e-2 : 2e-3;
}

// Compares a CUDA result with the CPU one: |a - b| <= tol * (1 + |b|) everywhere.
void compare(const at::Tensor& cuda_result, const at::Tensor& cpu_result, double tol,
             const std::string& what) {
  if (!cuda_result.defined() || !cpu_result.defined() || cuda_result.sizes() != cpu_result.sizes()) {
    check(false, what + ": missing or misshaped");
    return;
  }
  at::Tensor a = cuda_result.to(at::kCPU, at::kDouble), b = cpu_result.to(at::kDouble);
  at::Tensor excess = (a - b).abs() - tol * (1 + b.abs());
  double err = (a - b).abs().max().item<double>();
  check(excess.max().item<double>() <= 0 && !a.isnan().any().item<bool>(), what, err);
}

void compare_exact(const at::Tensor& cuda_result, const at::Tensor& cpu_result, const std::string& what) {
  at::Tensor a = cuda_result.cpu();
  bool same = a.sizes() == cpu_result.sizes() && at::equal(a, cpu_result);
  check(same, what + " (bit for bit)",
        same ? 0 : (a.to(at::kDouble) - cpu_result.to(at::kDouble)).abs().max().item<double>());
}

std::vector<at::Tensor> grads_of(const at::Tensor& out, const at::Tensor& g,
                                 const std::vector<at::Tensor>& inputs) {
  return torch::autograd::grad({out}, inputs, {g}, false, false, true);
}

#ifdef LUATUNE_HAS_KERNELS
cuda::Dtype kdt(at::ScalarType t) {
  return t == at::kFloat ? cuda::Dtype::f32 : t == at::kBFloat16 ? cuda::Dtype::bf16 : cuda::Dtype::f16;
}

void rc_ok(int rc, const std::string& what) {
  if (rc != 0) check(false, what + ": " + cuda::error_string(rc));
}

// ---------------------------------------------------------------------------------------------
// The kernels called directly, forward only, against the CPU Functions' outputs.

void direct_kernels(at::ScalarType dt) {
  const std::string d = dtype_name(dt);
  at::Tensor x = (3 * at::randn({37, 300})).to(dt), w = (1 + 0.2 * at::randn({300})).to(dt);
  for (bool gemma : {false, true}) {
    at::Tensor xc = x.cuda(), wc = w.cuda(), y = at::empty_like(xc);
    at::Tensor rstd = at::empty({37}, xc.options().dtype(at::kFloat));
    rc_ok(cuda::rms_norm_forward(xc.data_ptr(), wc.data_ptr(), y.data_ptr(), rstd.data_ptr<float>(), 37, 300,
                                 1e-6f, gemma, kdt(dt), nullptr),
          "rms_norm_forward");
    compare(y, rms_norm_fused(x, w, 1e-6, gemma), tol_of(dt),
            "kernel rms_norm_forward " + d + (gemma ? " gemma" : ""));
    at::Tensor want_rstd = at::rsqrt(x.to(at::kFloat).pow(2).mean(-1) + 1e-6);
    compare(rstd, want_rstd, 2e-6, "kernel rms_norm rstd " + d);
  }
  at::Tensor q = (2 * at::randn({2, 5, 3, 16})).to(dt);
  ModelConfig c;
  c.head_dim = 16;
  auto [cos, sin] = rope_cos_sin(rope_inv_freq(c), at::arange(5).unsqueeze(0).repeat({2, 1}), 1.0, dt);
  {
    at::Tensor qc = q.cuda(), cc = cos.cuda(), sc = sin.cuda(), y = at::empty_like(qc);
    rc_ok(cuda::rope_forward(qc.data_ptr(), cc.data_ptr(), sc.data_ptr(), y.data_ptr(), 10, 3, 16, kdt(dt),
                             nullptr),
          "rope_forward");
    compare_exact(y, rope_fused(q, cos, sin), "kernel rope_forward " + d);
  }
  at::Tensor gate = (3 * at::randn({1001})).to(dt), up = at::randn({1001}).to(dt);
  for (Activation act : {Activation::act_silu, Activation::act_gelu_tanh, Activation::act_gelu}) {
    at::Tensor gc = gate.cuda(), uc = up.cuda(), y = at::empty_like(gc);
    rc_ok(cuda::glu_forward(gc.data_ptr(), uc.data_ptr(), y.data_ptr(), 1001, static_cast<cuda::GluAct>(act),
                            kdt(dt), nullptr),
          "glu_forward");
    compare(y, glu_fused(gate, up, act), tol_of(dt),
            "kernel glu_forward " + d + " act " + std::to_string(int(act)));
  }
  // A bad argument is a return code, not a launch.
  check(cuda::rope_forward(nullptr, nullptr, nullptr, nullptr, 1, 1, 3, kdt(dt), nullptr) != 0,
        "rope odd dim refused");
}
#endif

// ---------------------------------------------------------------------------------------------
// Forward and backward through the Functions, CUDA vs CPU.

void rms_norm_case(at::ScalarType dt, std::vector<int64_t> shape, bool gemma, bool strided, bool x_grad,
                   bool w_grad) {
  const int64_t C = shape.back();
  std::string what = std::string("rms_norm ") + dtype_name(dt) + (gemma ? " gemma" : "") +
                     " C=" + std::to_string(C) + (strided ? " strided" : "") + (x_grad ? "" : " frozen-x") +
                     (w_grad ? "" : " frozen-w");
  std::vector<int64_t> base_shape = shape;
  if (strided) std::swap(base_shape[0], base_shape[base_shape.size() - 2]);
  at::Tensor base = (3 * at::randn(base_shape)).to(dt);
  at::Tensor x = base;
  at::Tensor w = (1 + 0.3 * at::randn({C})).to(dt), g = at::randn(shape).to(dt);
  auto run = [&](const at::Device& dev) {
    // The same strides on both devices: transpose after the copy.
    at::Tensor xd = (strided ? base.to(dev).transpose(0, static_cast<int64_t>(shape.size()) - 2) : x.to(dev))
                        .detach()
                        .requires_grad_(x_grad);
    at::Tensor wd = w.to(dev).detach().requires_grad_(w_grad);
    at::Tensor y = rms_norm_fused(xd, wd, 1e-6, gemma);
    std::vector<at::Tensor> in;
    if (x_grad) in.push_back(xd);
    if (w_grad) in.push_back(wd);
    std::vector<at::Tensor> out = {y};
    for (at::Tensor& t : grads_of(y, g.to(dev), in)) out.push_back(t);
    return out;
  };
  auto cpu = run(at::kCPU), gpu = run(at::Device(at::kCUDA, 0));
  const double tol = tol_of(dt);
  compare(gpu[0], cpu[0], tol, what + " forward");
  size_t i = 1;
  if (x_grad) compare(gpu[i], cpu[i], 2 * tol, what + " dx"), i++;
  // dw sums every row; float32 sums in another order, so scale the tolerance by the rows summed.
  if (w_grad) compare(gpu[i], cpu[i], tol * (dt == at::kFloat ? 10 : 2), what + " dw");
}

void rope_case(at::ScalarType dt, int64_t B, int64_t T, int64_t H, int64_t D) {
  std::string what =
      std::string("rope ") + dtype_name(dt) + " H=" + std::to_string(H) + " D=" + std::to_string(D);
  ModelConfig c;
  c.head_dim = D;
  at::Tensor pos = at::arange(T).unsqueeze(0).repeat({B, 1}) + 7;
  auto [cos, sin] = rope_cos_sin(rope_inv_freq(c), pos, 1.0, dt);
  at::Tensor x = (2 * at::randn({B, T, H, D})).to(dt), g = at::randn({B, H, T, D}).to(dt);
  auto run = [&](const at::Device& dev) {
    at::Tensor xd = x.to(dev).detach().requires_grad_(true);
    // As the transformer uses it: transposed afterwards, so the incoming gradient is strided.
    at::Tensor y = rope_fused(xd, cos.to(dev), sin.to(dev)).transpose(1, 2);
    return std::vector<at::Tensor>{y.contiguous(), grads_of(y, g.to(dev), {xd})[0]};
  };
  auto cpu = run(at::kCPU), gpu = run(at::Device(at::kCUDA, 0));
  compare_exact(gpu[0], cpu[0], what + " forward");
  compare_exact(gpu[1], cpu[1], what + " dx");
}

void glu_case(at::ScalarType dt, Activation act, bool frozen_up) {
  std::string what = std::string("glu ") + dtype_name(dt) + " act " + std::to_string(int(act)) +
                     (frozen_up ? " frozen-up" : "");
  at::Tensor gate = (3 * at::randn({4, 9, 333})).to(dt), up_base = at::randn({4, 333, 9}).to(dt);
  at::Tensor g = at::randn({4, 9, 333}).to(dt);
  auto run = [&](const at::Device& dev) {
    at::Tensor gd = gate.to(dev).detach().requires_grad_(true);
    at::Tensor ud = up_base.to(dev).transpose(1, 2).detach().requires_grad_(!frozen_up);  // strided
    at::Tensor y = glu_fused(gd, ud, act);
    std::vector<at::Tensor> in = {gd};
    if (!frozen_up) in.push_back(ud);
    std::vector<at::Tensor> out = {y};
    for (at::Tensor& t : grads_of(y, g.to(dev), in)) out.push_back(t);
    return out;
  };
  auto cpu = run(at::kCPU), gpu = run(at::Device(at::kCUDA, 0));
  // Activations from different exp/erf/tanh: a float32 ulp or two, which can move a bf16 rounding.
  const double tol = tol_of(dt) * (dt == at::kFloat ? 5 : 1);
  compare(gpu[0], cpu[0], tol, what + " forward");
  compare(gpu[1], cpu[1], 2 * tol, what + " dgate");
  if (!frozen_up) compare(gpu[2], cpu[2], tol, what + " dup");
}

// Grouped KV heads on CUDA: attention_forward hands them to SDPA with enable_gqa where a fused
// backend takes them (flash, no mask) and repeats them otherwise; both equal repeat_kv's result.
void attention_case(at::ScalarType dt, bool masked) {
  const int64_t B = 2, H = 8, KV = 2, T = 64, D = 64;
  auto opts = at::TensorOptions(at::kCUDA).dtype(dt);
  at::Tensor q = at::randn({B, T, H, D}, opts).transpose(1, 2);  // the transformer's layout
  at::Tensor k = at::randn({B, T, KV, D}, opts).transpose(1, 2),
             v = at::randn({B, T, KV, D}, opts).transpose(1, 2);
  at::Tensor allowed;
  if (masked) allowed = at::ones({T, T}, opts.dtype(at::kBool)).tril().view({1, 1, T, T});
  std::optional<at::Tensor> mask = masked ? std::optional<at::Tensor>(allowed) : std::nullopt;
  int64_t backend = at::_fused_sdp_choice(q, k, v, mask, 0.0, !masked, 0.125, true);
  at::Tensor want = at::scaled_dot_product_attention(q, repeat_kv(k, H / KV), repeat_kv(v, H / KV), mask, 0.0,
                                                     !masked, 0.125);
  compare(attention_forward(q, k, v, allowed, 0.125, 0), want.cpu(), tol_of(dt) * 2,
          std::string("attention GQA ") + dtype_name(dt) + (masked ? " masked" : " causal") +
              " (SDPA backend for grouped heads: " + std::to_string(backend) + ")");
}

}  // namespace

int main() {
#ifndef LUATUNE_HAS_KERNELS
  std::printf("skip: built without the CUDA kernels (LUATUNE_HAS_KERNELS)\n");
  return 77;
#else
  if (!at::hasCUDA()) {
    std::printf("skip: no CUDA device\n");
    return 77;
  }
  at::manual_seed(1);
  for (at::ScalarType dt : {at::kFloat, at::kBFloat16, at::kHalf}) {
    direct_kernels(dt);
    for (bool gemma : {false, true}) {
      rms_norm_case(dt, {3, 7, 40}, gemma, false, true, true);
      rms_norm_case(dt, {2, 5, 4, 8}, gemma, false, true, true);  // a q/k norm: rows of 8
      rms_norm_case(dt, {600, 1030}, gemma, false, true, true);   // rows longer than a block, many parts
      rms_norm_case(dt, {6, 5, 64}, gemma, true, true, true);
    }
    rms_norm_case(dt, {3, 7, 40}, false, false, true, false);  // LoRA: frozen norm weight
    rms_norm_case(dt, {3, 7, 40}, false, false, false, true);  // the first layer: frozen input
    rope_case(dt, 2, 5, 3, 16);
    rope_case(dt, 3, 17, 8, 128);
    for (Activation act : {Activation::act_silu, Activation::act_gelu_tanh, Activation::act_gelu})
      glu_case(dt, act, false);
    glu_case(dt, Activation::act_silu, true);
    for (bool masked : {false, true}) attention_case(dt, masked);
  }
  std::printf("%s: %d failure(s)\n", g_failures == 0 ? "PASS" : "FAIL", g_failures);
  return g_failures == 0 ? 0 : 1;
#endif
}
