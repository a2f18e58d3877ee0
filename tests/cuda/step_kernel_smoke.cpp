// The GPU harness's first check (scripts/gpu_validate.py, step `smoke`; issue 41): every kernel of the
// training step, forward and backward in bf16 at the shapes the benchmarks run, against its ATen path
// on the same GPU (what LUATUNE_STEP_KERNELS=0 selects; StepKernelsScope switches it in-process).
//   shapes: Llama 3.2 1B (hidden 2048, 32/8 heads, head_dim 64, intermediate 8192) and Llama 3.1 8B
//   (hidden 4096, head_dim 128, intermediate 14336), vocabulary 128256, batch 4 x 2048 tokens.
//   kernels: RMSNorm, RoPE (q and k), SwiGLU, the one-pass cross-entropy through the LM head, the
//   multi-tensor AdamW with float32 masters (one decoder layer's tensors and the embedding).
// Each output and gradient must be finite and within a relative L2 error of the ATen result (bf16:
// 2e-2; AdamW's float32 update and moments: 1e-4 of the update's own size). The first failing kernel
// stops the run: "FAIL <kernel> <shape>: ..." and exit 1, which stops the harness. Prints each
// kernel's time beside ATen's. Skips (77) without a CUDA device or in a build without the kernels.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "host/core/device.h"
#include "host/model/config.h"
#include "host/model/fused.h"
#include "host/model/rope.h"
#include "host/train/fused_adamw.h"
#include "host/train/loss.h"

namespace {

using namespace luatune;

struct Shape {
  const char* name;
  int64_t hidden, heads, kv_heads, head_dim, intermediate, vocab;
};
constexpr Shape kShapes[] = {{"llama-3.2-1b", 2048, 32, 8, 64, 8192, 128256},
                             {"llama-3.1-8b", 4096, 32, 8, 128, 14336, 128256}};
constexpr int64_t kBatch = 4, kSeq = 2048, kRows = kBatch * kSeq;

int g_checks = 0;

at::TensorOptions cuda(at::ScalarType t) {
  return at::TensorOptions(at::kCUDA).dtype(t);
}

// Waits for the device: a small copy to the host syncs the current stream (no CUDA headers needed).
void sync() {
  at::zeros({1}, cuda(at::kFloat)).cpu();
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Runs f with the step kernels on and then off (ATen), each once to warm up and once timed.
struct Both {
  std::vector<at::Tensor> kernel, aten;
  double kernel_ms = 0, aten_ms = 0;
};
Both run_both(const std::function<std::vector<at::Tensor>()>& f) {
  Both b;
  for (bool on : {true, false}) {
    StepKernelsScope scope(on);
    f();
    sync();
    const double t0 = now_ms();
    std::vector<at::Tensor> out = f();
    sync();
    (on ? b.kernel_ms : b.aten_ms) = now_ms() - t0;
    (on ? b.kernel : b.aten) = std::move(out);
  }
  return b;
}

[[noreturn]] void stop(const std::string& kernel, const Shape& s, const std::string& why) {
  std::printf("FAIL %s %s: %s\n", kernel.c_str(), s.name, why.c_str());
  std::printf("SMOKE FAILED at %s (%s), after %d checks\n", kernel.c_str(), s.name, g_checks);
  std::fflush(stdout);
  std::exit(1);
}

// Each named result of the kernel against ATen's: finite, relative L2 error within tol.
void compare(const std::string& kernel, const Shape& s, const Both& b, const std::vector<std::string>& names,
             double tol) {
  double worst = 0;
  for (size_t i = 0; i < names.size(); i++) {
    at::Tensor got = b.kernel.at(i).to(at::kDouble), want = b.aten.at(i).to(at::kDouble);
    if (got.sizes() != want.sizes()) stop(kernel, s, names[i] + ": shapes differ");
    if (!got.isfinite().all().item<bool>()) stop(kernel, s, names[i] + ": not finite");
    const double err = (got - want).norm().item<double>() / std::max(want.norm().item<double>(), 1e-30);
    if (!(err <= tol)) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%s: relative L2 error %.3g > %.3g against the ATen path",
                    names[i].c_str(), err, tol);
      stop(kernel, s, buf);
    }
    worst = std::max(worst, err);
    g_checks++;
  }
  std::printf("ok   %-14s %-13s rel err %.2e  kernel %7.2f ms  ATen %7.2f ms\n", kernel.c_str(), s.name,
              worst, b.kernel_ms, b.aten_ms);
  std::fflush(stdout);
}

at::Tensor grad_of(const at::Tensor& t) {
  return t.grad().defined() ? t.grad() : at::zeros_like(t);
}

void rms_norm(const Shape& s) {
  at::manual_seed(1);
  at::Tensor x = at::randn({kRows, s.hidden}, cuda(at::kFloat)).to(at::kBFloat16);
  at::Tensor w = (1 + 0.1 * at::randn({s.hidden}, cuda(at::kFloat))).to(at::kBFloat16);
  at::Tensor g = at::randn({kRows, s.hidden}, cuda(at::kFloat)).to(at::kBFloat16);
  Both b = run_both([&] {
    at::Tensor xr = x.clone().requires_grad_(true), wr = w.clone().requires_grad_(true);
    at::Tensor y = rms_norm_fused(xr, wr, 1e-5, false);
    y.backward(g);
    return std::vector<at::Tensor>{y.detach(), grad_of(xr), grad_of(wr)};
  });
  compare("rms_norm", s, b, {"output", "d input", "d weight"}, 2e-2);
}

void rope(const Shape& s) {
  at::manual_seed(2);
  const int64_t d = s.head_dim;
  at::Tensor inv_freq = 1.0 / at::pow(500000.0, at::arange(0, d, 2, cuda(at::kFloat)) / double(d));
  at::Tensor pos = at::arange(kSeq, cuda(at::kLong)).unsqueeze(0).expand({kBatch, kSeq}).contiguous();
  auto [cos, sin] = rope_cos_sin(inv_freq, pos, 1.0, at::kBFloat16);
  for (int64_t heads : {s.heads, s.kv_heads}) {
    at::Tensor q = at::randn({kBatch, kSeq, heads, d}, cuda(at::kFloat)).to(at::kBFloat16);
    at::Tensor g = at::randn({kBatch, kSeq, heads, d}, cuda(at::kFloat)).to(at::kBFloat16);
    Both b = run_both([&] {
      at::Tensor qr = q.clone().requires_grad_(true);
      at::Tensor y = rope_fused(qr, cos, sin);
      y.backward(g);
      return std::vector<at::Tensor>{y.detach(), grad_of(qr)};
    });
    compare(heads == s.heads ? "rope q" : "rope k", s, b, {"output", "d input"}, 2e-2);
  }
}

void swiglu(const Shape& s) {
  at::manual_seed(3);
  at::Tensor gate = at::randn({kRows, s.intermediate}, cuda(at::kFloat)).to(at::kBFloat16);
  at::Tensor up = at::randn({kRows, s.intermediate}, cuda(at::kFloat)).to(at::kBFloat16);
  at::Tensor g = at::randn({kRows, s.intermediate}, cuda(at::kFloat)).to(at::kBFloat16);
  Both b = run_both([&] {
    at::Tensor gr = gate.clone().requires_grad_(true), ur = up.clone().requires_grad_(true);
    at::Tensor y = glu_fused(gr, ur, Activation::act_silu);
    y.backward(g);
    return std::vector<at::Tensor>{y.detach(), grad_of(gr), grad_of(ur)};
  });
  compare("swiglu", s, b, {"output", "d gate", "d up"}, 2e-2);
}

void cross_entropy(const Shape& s) {
  at::manual_seed(4);
  at::Tensor h = at::randn({kRows, s.hidden}, cuda(at::kFloat)).to(at::kBFloat16);
  at::Tensor w = (0.02 * at::randn({s.vocab, s.hidden}, cuda(at::kFloat))).to(at::kBFloat16);
  at::Tensor t = at::randint(s.vocab, {kRows}, cuda(at::kLong));
  t.slice(0, 0, kRows, 7).fill_(-100);  // every 7th row ignored, as prompt tokens are
  Both b = run_both([&] {
    at::Tensor hr = h.clone().requires_grad_(true), wr = w.clone().requires_grad_(true);
    at::Tensor loss = chunked_cross_entropy(hr, wr, t, 4096, 0.0);  // the trainer's loss_chunk
    (loss / double(kRows)).backward();
    return std::vector<at::Tensor>{loss.detach().reshape({1}), grad_of(hr), grad_of(wr)};
  });
  compare("cross_entropy", s, b, {"loss", "d hidden", "d lm_head"}, 2e-2);
}

void adamw(const Shape& s) {
  at::manual_seed(5);
  const int64_t h = s.hidden, q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim, i = s.intermediate;
  const std::vector<std::vector<int64_t>> shapes = {{s.vocab, h}, {q, h}, {kv, h}, {kv, h}, {h, q},
                                                    {i, h},       {i, h}, {h, i},  {h},     {h}};
  std::vector<at::Tensor> masters, grads, m1, m2;
  for (const auto& shape : shapes) {
    masters.push_back(0.02 * at::randn(shape, cuda(at::kFloat)));
    grads.push_back((1e-3 * at::randn(shape, cuda(at::kFloat))).to(at::kBFloat16));
    m1.push_back(1e-3 * at::randn(shape, cuda(at::kFloat)));
    m2.push_back(1e-6 * at::rand(shape, cuda(at::kFloat)));
  }
  Both b = run_both([&] {
    std::vector<at::Tensor> w, ms, a, sq, out;
    for (size_t k = 0; k < masters.size(); k++) {
      ms.push_back(masters[k].clone());
      w.push_back(masters[k].to(at::kBFloat16));
      a.push_back(m1[k].clone());
      sq.push_back(m2[k].clone());
    }
    adamw_master_step(w, ms, grads, a, sq, 2e-4, 0.9, 0.999, 1e-8, 0.01, 3, at::Tensor(), at::Tensor());
    // The update itself (the master's change), not the weight: a step is 1e-4 of a weight, so an
    // error in it would hide under the weight's own size.
    for (size_t k = 0; k < masters.size(); k++) {
      out.push_back(at::cat({(ms[k] - masters[k]).flatten(), a[k].flatten(), sq[k].flatten()}));
      out.push_back(w[k].to(at::kFloat) - masters[k].to(at::kBFloat16).to(at::kFloat));
    }
    return out;
  });
  // Masters, moments: float32 arithmetic in another order. Weights: the same masters rounded to bf16,
  // so at most a rounding unit where a master sits on a tie.
  std::vector<std::string> names;
  Both masters_only, weights_only;
  masters_only.kernel_ms = weights_only.kernel_ms = b.kernel_ms;
  masters_only.aten_ms = weights_only.aten_ms = b.aten_ms;
  for (size_t k = 0; k < b.kernel.size(); k += 2) {
    masters_only.kernel.push_back(b.kernel[k]), masters_only.aten.push_back(b.aten[k]);
    weights_only.kernel.push_back(b.kernel[k + 1]), weights_only.aten.push_back(b.aten[k + 1]);
    names.push_back("tensor " + std::to_string(k / 2));
  }
  compare("adamw", s, masters_only, names, 1e-4);
  compare("adamw bf16", s, weights_only, names, 2e-2);
}

}  // namespace

int main() {
#ifndef LUATUNE_HAS_KERNELS
  std::printf("skip: this build has no step kernels (lt_kernels)\n");
  return 77;
#else
  if (!at::hasCUDA()) {
    std::printf("skip: no CUDA device\n");
    return 77;
  }
  const double t0 = now_ms();
  for (const Shape& s : kShapes) {
    rms_norm(s);
    rope(s);
    swiglu(s);
    cross_entropy(s);
    adamw(s);
  }
  std::printf("SMOKE PASSED: %d checks, every kernel at both shapes, in %.1f s\n", g_checks,
              (now_ms() - t0) / 1000.0);
  return 0;
#endif
}
