// The training step's CUDA kernels (host/train/kernels) against their CPU paths, through the host
// functions that call them: cross_entropy_rows_ (loss.h) per row and per logit, the whole fused
// cross-entropy on CUDA (kernel) against its float32-block path on CUDA and the float64 composition
// on the CPU, and adamw_master_step (fused_adamw.h) on a few hundred tensors of every dtype pairing
// against the CPU path. Tolerances, not bits: exp, tanh and the order of float32 roundings differ.
// Skips (77) without a CUDA device.
#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "host/data/batch.h"
#include "host/train/fused_adamw.h"
#include "host/train/loss.h"

namespace {

using namespace luatune;

int g_failures = 0;

// |a - b| <= atol + rtol |b| elementwise (NaN where both are NaN counts as equal); prints a line.
void check_close(const at::Tensor& a_in, const at::Tensor& b_in, double rtol, double atol,
                 const std::string& what) {
  at::Tensor a = a_in.to(at::kCPU, at::kDouble), b = b_in.to(at::kCPU, at::kDouble);
  bool ok = a.sizes() == b.sizes();
  double worst = 0;
  if (ok) {
    at::Tensor both_nan = a.isnan().logical_and(b.isnan());
    at::Tensor diff = (a - b).abs().masked_fill(both_nan, 0.0);
    at::Tensor excess = diff - (atol + rtol * b.abs().masked_fill(both_nan, 0.0));
    worst = a.numel() ? diff.max().item<double>() : 0.0;
    ok = a.numel() == 0 || (excess.max().item<double>() <= 0 && !excess.isnan().any().item<bool>());
  }
  std::printf("%s %s (largest |difference| %.3g)\n", ok ? "PASS" : "FAIL", what.c_str(), worst);
  if (!ok) g_failures++;
}

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok) g_failures++;
}

const char* name(at::ScalarType t) {
  return t == at::kBFloat16 ? "bf16" : t == at::kHalf ? "f16" : "f32";
}

// ---------------------------------------------------------------------------------------------
// The rows: the kernel and the CPU reference on the same values, every dtype, with and without a
// softcap, vocabularies that take the 16-byte path (V a multiple of 8) and ones that do not.

void test_rows() {
  at::Generator gen = at::detail::createCPUGenerator(7);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf})
    for (int64_t V : {11, 4104, 32003, 128256})
      for (double softcap : {0.0, 30.0}) {
        const int64_t n = 37;
        const std::string what = std::string("rows ") + name(dtype) + " V " + std::to_string(V) +
                                 " softcap " + std::to_string(softcap);
        at::Tensor z = (at::randn({n, V}, gen, at::TensorOptions(at::kFloat)) * 4).to(dtype);
        at::Tensor t = at::randint(V, {n}, gen, at::TensorOptions(at::kLong));
        t[0] = 0, t[1] = V - 1, t[2] = kIgnoreTarget, t[9] = kIgnoreTarget, t[5] = V;  // t[5]: out of range
        at::Tensor zc = z.clone(), zg = z.to(at::kCUDA);
        at::Tensor tg = t.to(at::kCUDA);

        at::Tensor only = cross_entropy_rows_(zg, tg, softcap, false);
        check(at::equal(zg.cpu(), z), what + ": without write_grad z is unchanged");
        at::Tensor ref = cross_entropy_rows_(zc, t, softcap, true);
        at::Tensor got = cross_entropy_rows_(zg, tg, softcap, true);
        check(got.scalar_type() == at::kFloat && got.is_cuda(), what + ": loss float32 on the device");
        check_close(got, ref, 1e-5, 1e-5, what + ": loss");
        check_close(only, ref, 1e-5, 1e-5, what + ": loss without write_grad");
        check(got.cpu()[2].item<float>() == 0.0f && std::isnan(got.cpu()[5].item<float>()),
              what + ": ignored row 0, bad target NaN");
        // The gradient rounded to the dtype on both sides: one unit in the last place apart at most.
        const double rtol = dtype == at::kFloat ? 1e-4 : dtype == at::kBFloat16 ? 1.6e-2 : 2e-3;
        check_close(zg, zc, rtol, 1e-7, what + ": gradient");
        check(zg.cpu()[2].abs().sum().item<double>() == 0.0, what + ": an ignored row's gradient is zero");
      }
  // A NaN logit makes the row's loss NaN as ATen's does, wherever it sits: first in a thread's
  // stride (read while the thread has seen only -inf), in a 16-byte piece, or after finite values.
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16})
    for (int64_t V : {11, 4104}) {
      const std::string what = std::string("NaN rows ") + name(dtype) + " V " + std::to_string(V);
      at::Tensor z = at::randn({5, V}, gen, at::TensorOptions(at::kFloat));
      const float nan = std::numeric_limits<float>::quiet_NaN();
      z[0][0] = nan;          // thread 0's first value
      z[1][V - 1] = nan;      // the last value
      z[2].fill_(-INFINITY);  // -inf everywhere, then a NaN
      z[2][3] = nan;
      z[3][7] = nan, z[3][1] = 5.0;  // after a larger finite value in the same piece
      at::Tensor t = at::zeros({5}, at::TensorOptions(at::kLong));
      z = z.to(dtype);
      at::Tensor ref = cross_entropy_rows_(z.clone(), t, 0.0, true);
      at::Tensor got = cross_entropy_rows_(z.to(at::kCUDA), t.to(at::kCUDA), 0.0, true).cpu();
      bool same = true;
      for (int64_t r = 0; r < 5; r++)
        same = same && std::isnan(got[r].item<float>()) == std::isnan(ref[r].item<float>());
      check(same && std::isnan(got[0].item<float>()) && std::isnan(got[2].item<float>()) &&
                !std::isnan(got[4].item<float>()),
            what + ": NaN logits give a NaN loss, as on the CPU");
    }
}

// ---------------------------------------------------------------------------------------------
// The fused cross-entropy end to end on CUDA: kernel path against the float32-block path on the
// device, and both against the float64 composition on the CPU.

struct Grads {
  double loss;
  at::Tensor gh, gw;
};

Grads run_ce(const at::Tensor& h0, const at::Tensor& w0, const at::Tensor& t, double softcap,
             CrossEntropyPath path) {
  at::Tensor h = h0.detach().clone().requires_grad_(true), w = w0.detach().clone().requires_grad_(true);
  at::Tensor loss = chunked_cross_entropy(h, w, t, 64, softcap, path);
  (loss / 100.0).backward();
  return {loss.item<double>(), h.grad().to(at::kCPU, at::kDouble), w.grad().to(at::kCPU, at::kDouble)};
}

void test_fused_ce() {
  at::Generator gen = at::detail::createCPUGenerator(8);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf})
    for (double softcap : {0.0, 30.0}) {
      const int64_t N = 150, C = 64, V = 5000;
      const std::string what = std::string("fused ") + name(dtype) + " softcap " + std::to_string(softcap);
      at::Tensor h = at::randn({N, C}, gen, at::TensorOptions(at::kFloat)).to(dtype);
      at::Tensor w = (at::randn({V, C}, gen, at::TensorOptions(at::kFloat)) * 0.3).to(dtype);
      at::Tensor t = at::randint(V, {N}, gen, at::TensorOptions(at::kLong));
      for (int64_t i = 3; i < N; i += 7) t[i] = kIgnoreTarget;
      at::Tensor hg = h.to(at::kCUDA), wg = w.to(at::kCUDA), tg = t.to(at::kCUDA);
      Grads kern = run_ce(hg, wg, tg, softcap, CrossEntropyPath::ce_path_auto);
      Grads blocks = run_ce(hg, wg, tg, softcap, CrossEntropyPath::ce_path_blocks);
      Grads ref;
      {
        at::Tensor h64 = h.to(at::kDouble).requires_grad_(true), w64 = w.to(at::kDouble).requires_grad_(true);
        at::Tensor z = at::matmul(h64, w64.t());
        if (softcap > 0) z = at::tanh(z / softcap) * softcap;
        at::Tensor loss = at::nll_loss(at::log_softmax(z, -1), t, {}, at::Reduction::Sum, kIgnoreTarget);
        (loss / 100.0).backward();
        ref = {loss.item<double>(), h64.grad(), w64.grad()};
      }
      const bool f32 = dtype == at::kFloat;
      const double rtol = f32 ? 1e-3 : 5e-2, atol = f32 ? 1e-6 : 2e-4;
      check(std::abs(kern.loss - blocks.loss) <= 1e-4 * std::abs(blocks.loss),
            what + ": loss, kernel vs blocks");
      check(std::abs(kern.loss - ref.loss) <= (f32 ? 1e-4 : 2e-3) * std::abs(ref.loss),
            what + ": loss, kernel vs float64");
      check_close(kern.gh, blocks.gh, rtol, atol, what + ": grad hidden, kernel vs blocks");
      check_close(kern.gw, blocks.gw, rtol, atol, what + ": grad weight, kernel vs blocks");
      check_close(kern.gh, ref.gh, rtol, atol, what + ": grad hidden, kernel vs float64");
      check_close(kern.gw, ref.gw, rtol, atol, what + ": grad weight, kernel vs float64");
    }
}

// ---------------------------------------------------------------------------------------------
// AdamW: 300 tensors (empty ones, ones spanning many chunks, every weight / grad dtype pairing,
// with and without masters) on CUDA and the CPU, three steps with decay and an lr scale, then a
// skipped step.

struct Group {
  std::vector<at::Tensor> weights, masters, grads, exp_avg, exp_avg_sq;
  Group to(c10::Device d) const {
    auto move = [&](const std::vector<at::Tensor>& v) {
      std::vector<at::Tensor> out;
      for (const at::Tensor& x : v)
        out.push_back(x.defined() ? x.to(x.options().device(d), /*non_blocking=*/false, /*copy=*/true) : x);
      return out;
    };
    return {move(weights), move(masters), move(grads), move(exp_avg), move(exp_avg_sq)};
  }
};

void test_adamw() {
  at::Generator gen = at::detail::createCPUGenerator(9);
  const at::ScalarType dtypes[] = {at::kFloat, at::kBFloat16, at::kHalf};
  Group cpu;
  for (int i = 0; i < 300; i++) {
    const int64_t numel = i % 50 == 7 ? 0 : i % 37 == 0 ? 16384 * 3 + 17 : 1 + (i * 7919) % 5000;
    const at::ScalarType wd = dtypes[i % 3];  // the gradient's dtype: dtypes[(i / 3) % 3], below
    at::Tensor w = at::randn({numel}, gen, at::TensorOptions(at::kFloat));
    cpu.weights.push_back(w.to(wd));
    cpu.masters.push_back(wd != at::kFloat && i % 2 == 0 ? cpu.weights.back().to(at::kFloat) : at::Tensor());
    cpu.grads.push_back(at::Tensor());
    cpu.exp_avg.push_back(at::zeros({numel}, at::TensorOptions(at::kFloat)));
    cpu.exp_avg_sq.push_back(at::zeros({numel}, at::TensorOptions(at::kFloat)));
  }
  Group gpu = cpu.to(at::kCUDA);
  const at::Tensor scale_cpu = at::full({}, 0.75f), scale_gpu = scale_cpu.to(at::kCUDA);
  for (int64_t step = 1; step <= 3; step++) {
    for (size_t i = 0; i < cpu.weights.size(); i++) {
      const at::ScalarType gd = dtypes[(i / 3) % 3];
      cpu.grads[i] = at::randn(cpu.weights[i].sizes(), gen, at::TensorOptions(at::kFloat)).to(gd);
      gpu.grads[i] = cpu.grads[i].to(at::kCUDA);
    }
    adamw_master_step(cpu.weights, cpu.masters, cpu.grads, cpu.exp_avg, cpu.exp_avg_sq, 1e-2, 0.9, 0.999,
                      1e-8, 0.1, step, scale_cpu, at::Tensor());
    adamw_master_step(gpu.weights, gpu.masters, gpu.grads, gpu.exp_avg, gpu.exp_avg_sq, 1e-2, 0.9, 0.999,
                      1e-8, 0.1, step, scale_gpu, at::zeros({}, at::TensorOptions(at::kCUDA)));
  }
  double worst = 0;
  bool ok_m = true, ok_w = true, ok_master_round = true;
  for (size_t i = 0; i < cpu.weights.size(); i++) {
    auto far = [&](const at::Tensor& a, const at::Tensor& b, double rtol, double atol) {
      if (a.numel() == 0) return false;
      at::Tensor x = a.to(at::kCPU, at::kDouble), y = b.to(at::kCPU, at::kDouble);
      worst = std::max(worst, (x - y).abs().max().item<double>());
      return ((x - y).abs() - (atol + rtol * y.abs())).max().item<double>() > 0;
    };
    // float32 state after three steps: a few float32 roundings apart at most.
    if (far(gpu.exp_avg[i], cpu.exp_avg[i], 1e-5, 1e-7) ||
        far(gpu.exp_avg_sq[i], cpu.exp_avg_sq[i], 1e-5, 1e-9))
      ok_m = false;
    if (gpu.masters[i].defined()) {
      if (far(gpu.masters[i], cpu.masters[i], 1e-5, 1e-7)) ok_m = false;
      if (!at::equal(gpu.weights[i].cpu(), gpu.masters[i].to(gpu.weights[i].scalar_type()).cpu()))
        ok_master_round = false;
    }
    // Low-precision weights: the same master can round either way near a tie, so one unit apart.
    const at::ScalarType wt = cpu.weights[i].scalar_type();
    const double rtol = wt == at::kFloat ? 1e-5 : wt == at::kBFloat16 ? 1.6e-2 : 2e-3;
    if (far(gpu.weights[i], cpu.weights[i], rtol, 1e-6)) ok_w = false;
  }
  std::printf("adamw: largest |difference| %.3g\n", worst);
  check(ok_m, "adamw: masters and moments, CUDA vs CPU");
  check(ok_w, "adamw: weights, CUDA vs CPU");
  check(ok_master_round, "adamw: each CUDA weight is its master rounded");

  // A skipped step on the device changes nothing (the flag read by the kernel, no host sync).
  Group before = gpu.to(at::kCUDA);
  for (auto& g : gpu.grads) g = g.mul(3);
  adamw_master_step(gpu.weights, gpu.masters, gpu.grads, gpu.exp_avg, gpu.exp_avg_sq, 1e-2, 0.9, 0.999, 1e-8,
                    0.1, 4, scale_gpu, at::ones({}, at::TensorOptions(at::kCUDA).dtype(at::kBool)));
  bool same = true;
  for (size_t i = 0; i < gpu.weights.size(); i++) {
    same = same && at::equal(gpu.weights[i], before.weights[i]) &&
           at::equal(gpu.exp_avg[i], before.exp_avg[i]) && at::equal(gpu.exp_avg_sq[i], before.exp_avg_sq[i]);
    if (gpu.masters[i].defined()) same = same && at::equal(gpu.masters[i], before.masters[i]);
  }
  check(same, "adamw: a nonzero skip flag leaves every tensor unchanged");
}

}  // namespace

int main() {
  if (!at::hasCUDA()) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  test_rows();
  test_fused_ce();
  test_adamw();
  std::printf("%s: %d failure(s)\n", g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}
