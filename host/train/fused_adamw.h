// AdamW for a group of tensors at once, with float32 master copies of low-precision weights: on
// CUDA one kernel launch for the whole group (host/train/kernels/adamw_cuda.cu), on the CPU the
// same arithmetic through ATen, tensor by tensor. The numbers are torch.optim.AdamW's, as
// host/train/optim.cpp's optim_update computes them for a float32 tensor.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace luatune {

// One AdamW update of every tensor i:
//   w = masters[i] when given (float32), else weights[i] read as float32
//   w *= 1 - lr * weight_decay                       (only when weight_decay > 0)
//   exp_avg    = exp_avg * beta1 + (1 - beta1) * g   (g = grads[i] as float32)
//   exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * g * g
//   w += -lr / (1 - beta1^step) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^step) + eps)
//   masters[i] = w; weights[i] = w rounded to its dtype (to nearest even)
// with lr multiplied by lr_scale when it is defined (a float32 scalar on the tensors' device, so a
// schedule or a loss-scale decision never needs a host sync), and nothing changed at all when
// `skip` is defined and nonzero (a scalar on the device: a step with non-finite gradients).
// For float32 weights without a master this is optim_update to the bit on the CPU. A low-precision
// weight without a master is updated in float32 and rounded once (optim_update would do the
// arithmetic in its dtype). weights: float32 / bf16 / f16; masters: empty, or one per weight
// (undefined entries: that weight has none); grads: any float dtype, the weights' shapes; exp_avg,
// exp_avg_sq: float32; all on one device. step is 1-based, as in OptimHyper.
void adamw_master_step(const std::vector<at::Tensor>& weights, const std::vector<at::Tensor>& masters,
                       const std::vector<at::Tensor>& grads, const std::vector<at::Tensor>& exp_avg,
                       const std::vector<at::Tensor>& exp_avg_sq, double lr, double beta1, double beta2,
                       double eps, double weight_decay, int64_t step, const at::Tensor& lr_scale,
                       const at::Tensor& skip);

}  // namespace luatune
