// AdamW for a group of tensors (fused_adamw.h): the checks, the CUDA path (one launch over a table
// of the tensors' pointers, copied to the device from pinned memory) and the CPU path, which is
// optim_update's ATen sequence with the master and the lr scale and skip flag folded in.
#include "host/train/fused_adamw.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>

#include <cmath>
#include <cstring>

#include "host/core/device.h"
#include "host/core/error.h"

#ifdef LUATUNE_HAS_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "host/train/kernels/adamw_cuda.h"
#endif

namespace luatune {

namespace {

void check_group(const std::vector<at::Tensor>& weights, const std::vector<at::Tensor>& masters,
                 const std::vector<at::Tensor>& grads, const std::vector<at::Tensor>& exp_avg,
                 const std::vector<at::Tensor>& exp_avg_sq, int64_t step) {
  const size_t n = weights.size();
  LT_CHECK(grads.size() == n && exp_avg.size() == n && exp_avg_sq.size() == n &&
               (masters.empty() || masters.size() == n),
           "adamw_master_step: expected one grad, exp_avg and exp_avg_sq per weight (and no masters or one "
           "per weight), got "
               << n << " weights, " << masters.size() << " masters, " << grads.size() << " grads, "
               << exp_avg.size() << " exp_avg, " << exp_avg_sq.size() << " exp_avg_sq");
  LT_CHECK(step >= 1, "adamw_master_step: step is 1-based, got " << step);
  if (n == 0) return;
  const c10::Device dev = weights[0].device();
  for (size_t i = 0; i < n; i++) {
    const at::Tensor& w = weights[i];
    const at::Tensor* m = masters.empty() || !masters[i].defined() ? nullptr : &masters[i];
    LT_CHECK(w.defined() && grads[i].defined() && exp_avg[i].defined() && exp_avg_sq[i].defined(),
             "adamw_master_step: tensor " << i << " has an undefined weight, grad or moment");
    LT_CHECK(at::isFloatingType(w.scalar_type()) && at::isFloatingType(grads[i].scalar_type()),
             "adamw_master_step: tensor " << i << ": weight and grad must be floating, got "
                                          << w.scalar_type() << " and " << grads[i].scalar_type());
    for (const at::Tensor* t : {&grads[i], &exp_avg[i], &exp_avg_sq[i], m}) {
      if (!t) continue;
      LT_CHECK(t->sizes() == w.sizes() && t->device() == dev,
               "adamw_master_step: tensor " << i << ": expected shape " << w.sizes() << " on " << dev
                                            << ", got " << t->sizes() << " on " << t->device());
    }
    for (const at::Tensor* t : {&exp_avg[i], &exp_avg_sq[i], m})
      LT_CHECK(!t || t->scalar_type() == at::kFloat, "adamw_master_step: tensor "
                                                         << i << ": masters and moments must be float32, got "
                                                         << t->scalar_type());
  }
}

// A scalar flag or factor as float32 on `dev` (undefined stays undefined).
at::Tensor scalar_on(const at::Tensor& t, c10::Device dev, const char* what) {
  if (!t.defined()) return t;
  LT_CHECK(t.numel() == 1, "adamw_master_step: " << what << " must be a scalar, got shape " << t.sizes());
  return t.reshape({}).to(dev, at::kFloat);
}

// ============================================================================================
// CPU (and the fallback for device tensors the kernel does not take): optim_update's sequence.

void step_aten(const std::vector<at::Tensor>& weights, const std::vector<at::Tensor>& masters,
               const std::vector<at::Tensor>& grads, const std::vector<at::Tensor>& exp_avg,
               const std::vector<at::Tensor>& exp_avg_sq, double lr, double beta1, double beta2, double eps,
               double weight_decay, int64_t step) {
  const double t = static_cast<double>(step);
  const double bc1 = 1.0 - std::pow(beta1, t), bc2 = 1.0 - std::pow(beta2, t);
  for (size_t i = 0; i < weights.size(); i++) {
    at::Tensor weight = weights[i];
    const bool has_master = !masters.empty() && masters[i].defined();
    at::Tensor w = has_master                           ? masters[i]
                   : weight.scalar_type() == at::kFloat ? weight
                                                        : weight.to(at::kFloat);
    const at::Tensor g = grads[i].to(at::kFloat);
    at::Tensor m = exp_avg[i], v = exp_avg_sq[i];
    if (weight_decay > 0) w.mul_(1.0 - lr * weight_decay);
    m.mul_(beta1).add_(g, 1.0 - beta1);
    v.mul_(beta2).addcmul_(g, g, 1.0 - beta2);
    at::Tensor denom = v.sqrt();
    denom.div_(std::sqrt(bc2)).add_(eps);
    w.addcdiv_(m, denom, -lr / bc1);
    if (!w.is_same(weight)) weight.copy_(w);  // rounds to nearest even into bf16 / f16
  }
}

// ============================================================================================
// CUDA: one launch over a device table of the tensors.

#ifdef LUATUNE_HAS_KERNELS
bool kernel_dtype(at::ScalarType t, cuda::Dtype* out) {
  if (t == at::kFloat) return *out = cuda::Dtype::f32, true;
  if (t == at::kBFloat16) return *out = cuda::Dtype::bf16, true;
  if (t == at::kHalf) return *out = cuda::Dtype::f16, true;
  return false;
}

// False (nothing done) when a tensor is not one the kernel takes: a weight of another dtype, or a
// weight, master or moment that is not contiguous (the kernel would have to write through a copy).
bool step_cuda(const std::vector<at::Tensor>& weights, const std::vector<at::Tensor>& masters,
               const std::vector<at::Tensor>& grads, const std::vector<at::Tensor>& exp_avg,
               const std::vector<at::Tensor>& exp_avg_sq, double lr, double beta1, double beta2, double eps,
               double weight_decay, int64_t step, const at::Tensor& lr_scale, const at::Tensor& skip) {
  const c10::Device dev = weights[0].device();
  std::vector<cuda::AdamWTensor> table;
  std::vector<at::Tensor> keep;  // gradients converted or made contiguous, alive until the launch
  int64_t chunks = 0;
  for (size_t i = 0; i < weights.size(); i++) {
    const at::Tensor& w = weights[i];
    const bool has_master = !masters.empty() && masters[i].defined();
    cuda::AdamWTensor e;
    cuda::Dtype wd, gd;
    if (!kernel_dtype(w.scalar_type(), &wd) || !w.is_contiguous() || !exp_avg[i].is_contiguous() ||
        !exp_avg_sq[i].is_contiguous() || (has_master && !masters[i].is_contiguous()))
      return false;
    if (w.numel() == 0) continue;  // no chunks: left out of the table its binary search runs on
    at::Tensor g = grads[i];
    if (!kernel_dtype(g.scalar_type(), &gd)) g = g.to(at::kFloat), gd = cuda::Dtype::f32;
    if (!g.is_contiguous()) g = g.contiguous();
    keep.push_back(g);
    e.weight = w.data_ptr();
    e.master = has_master ? masters[i].data_ptr<float>() : nullptr;
    e.grad = g.data_ptr();
    e.exp_avg = exp_avg[i].data_ptr<float>();
    e.exp_avg_sq = exp_avg_sq[i].data_ptr<float>();
    e.numel = w.numel();
    e.first_chunk = chunks;
    e.weight_dtype = static_cast<int32_t>(wd);
    e.grad_dtype = static_cast<int32_t>(gd);
    chunks += (e.numel + cuda::kAdamWChunk - 1) / cuda::kAdamWChunk;
    table.push_back(e);
  }
  if (table.empty()) return true;
  LT_CHECK(table.size() <= 0x7FFFFFFF, "adamw_master_step: " << table.size() << " tensors in one group");
  c10::cuda::CUDAGuard guard(dev);
  // The table travels through pinned memory, copied on the current stream before the launch; the
  // caching host allocator keeps the pinned block until that copy has run.
  const int64_t bytes = static_cast<int64_t>(table.size() * sizeof(cuda::AdamWTensor));
  at::Tensor host = at::empty({bytes}, at::TensorOptions(at::kByte).pinned_memory(true));
  std::memcpy(host.data_ptr(), table.data(), static_cast<size_t>(bytes));
  at::Tensor device_table = host.to(dev, at::kByte, /*non_blocking=*/true);
  const at::Tensor scale = scalar_on(lr_scale, dev, "lr_scale"), flag = scalar_on(skip, dev, "skip");
  cuda::AdamWScalars s;
  s.lr = lr;
  s.weight_decay = weight_decay;
  s.bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  s.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(step)));
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.eps = eps;
  const int rc = cuda::adamw_step(reinterpret_cast<const cuda::AdamWTensor*>(device_table.data_ptr()),
                                  static_cast<int>(table.size()), chunks, s,
                                  scale.defined() ? scale.data_ptr<float>() : nullptr,
                                  flag.defined() ? flag.data_ptr<float>() : nullptr,
                                  c10::cuda::getCurrentCUDAStream(dev.index()).stream());
  LT_CHECK(rc == 0, "adamw_master_step: CUDA kernel failed: " << cuda::error_string(rc));
  return true;
}
#endif

}  // namespace

void adamw_master_step(const std::vector<at::Tensor>& weights, const std::vector<at::Tensor>& masters,
                       const std::vector<at::Tensor>& grads, const std::vector<at::Tensor>& exp_avg,
                       const std::vector<at::Tensor>& exp_avg_sq, double lr, double beta1, double beta2,
                       double eps, double weight_decay, int64_t step, const at::Tensor& lr_scale,
                       const at::Tensor& skip) {
  check_group(weights, masters, grads, exp_avg, exp_avg_sq, step);
  if (weights.empty()) return;
  at::NoGradGuard no_grad;  // the weights are leaves that require grad
#ifdef LUATUNE_HAS_KERNELS
  if (weights[0].is_cuda() && step_kernels_enabled() &&
      step_cuda(weights, masters, grads, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay, step,
                lr_scale, skip))
    return;
#endif
  // Off the kernel the flags are read on the host: a sync on a GPU without the kernels, nothing on the
  // CPU. Read through the data pointer, not item(), so that bench/step_ops.sh's CPU proxy for a GPU
  // wait (aten::_local_scalar_dense) counts only what would wait on a GPU with them.
  const c10::Device dev = weights[0].device();
  auto host_value = [](const at::Tensor& t) {
    return static_cast<double>(t.to(at::kCPU, at::kFloat).contiguous().data_ptr<float>()[0]);
  };
  const at::Tensor flag = scalar_on(skip, dev, "skip");
  if (flag.defined() && host_value(flag) != 0.0) return;  // NaN skips, as on the device
  const at::Tensor scale = scalar_on(lr_scale, dev, "lr_scale");
  const double lr_eff = scale.defined() ? lr * host_value(scale) : lr;
  RECORD_FUNCTION("luatune::adamw",
                  std::vector<c10::IValue>());  // one op in a trace, as the kernel is one launch
  step_aten(weights, masters, grads, exp_avg, exp_avg_sq, lr_eff, beta1, beta2, eps, weight_decay, step);
}

}  // namespace luatune
