// AdamW over many tensors in one CUDA launch: float32 master copies and moments, gradients read in
// their own dtype, low-precision weights written as the rounded master. host/train/fused_adamw.h
// states the arithmetic (torch.optim.AdamW's) and holds the CPU path it must agree with. Plain C++
// interface, no CUDA or Torch headers: the stream is a cudaStream_t passed as void*, and the call
// returns 0 or a cudaError_t value (cuda::error_string names it).
#pragma once

#include <cstdint>

// cuda::Dtype and cuda::error_string: one definition for every kernel library in lt_kernels.
#include "host/quant/kernels/nf4_cuda.h"

namespace luatune {
namespace cuda {

// Elements one thread block updates at a time; a tensor spans ceil(numel / kAdamWChunk) chunks.
constexpr int64_t kAdamWChunk = 16384;

// One tensor's update, every pointer device memory, every tensor contiguous with `numel` elements.
struct AdamWTensor {
  void* weight = nullptr;       // weight_dtype; written as the rounded new master
  float* master = nullptr;      // float32 master copy, or null: the weight itself is read and updated
  const void* grad = nullptr;   // grad_dtype
  float* exp_avg = nullptr;     // float32
  float* exp_avg_sq = nullptr;  // float32
  int64_t numel = 0;
  int64_t first_chunk = 0;   // sum of the chunks of the tensors before this one in the table
  int32_t weight_dtype = 0;  // Dtype
  int32_t grad_dtype = 0;    // Dtype
};

// The scalars of one update, formed on the host. lr and weight_decay stay double because the
// device multiplies lr by *lr_scale before forming 1 - lr * wd and -lr / bias_correction1, as the
// CPU path does with the same doubles.
struct AdamWScalars {
  double lr = 0, weight_decay = 0;
  double bias_correction1 = 1;       // 1 - beta1^step
  double bias_correction2_sqrt = 1;  // sqrt(1 - beta2^step)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};

// tensors: `count` entries in device memory (their first_chunk ascending from 0), total_chunks
// the sum of every tensor's chunks. lr_scale: null or one device float32 multiplying lr. skip: null
// or one device float32; nonzero leaves every tensor unchanged. One launch whatever the count.
int adamw_step(const AdamWTensor* tensors, int count, int64_t total_chunks, const AdamWScalars& scalars,
               const float* lr_scale, const float* skip, void* stream);

}  // namespace cuda
}  // namespace luatune
