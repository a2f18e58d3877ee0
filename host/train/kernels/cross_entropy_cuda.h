// The one-pass cross-entropy of a block of logits rows, in CUDA: per row an online softmax (running
// maximum and sum) in one read, then the gradient of the row's loss written over the logits.
// host/train/loss.h (cross_entropy_block_) states the contract and holds the CPU reference of the
// same arithmetic. Plain C++ interface, no CUDA or Torch headers: the stream is a cudaStream_t
// passed as void*, and the call returns 0 or a cudaError_t value (cuda::error_string names it).
#pragma once

#include <cstdint>

// cuda::Dtype and cuda::error_string: one definition for every kernel library in lt_kernels.
#include "host/quant/kernels/nf4_cuda.h"

namespace luatune {
namespace cuda {

// z (n, V) row-major contiguous in `dtype` (device); targets (n) int64 (device), `ignore_index`
// marking a row without one. Per row, with x = softcap > 0 ? softcap * tanh(z / softcap) : z:
//   loss[row] = (log sum_j exp(x_j) - x[target]) in float32, 0 for an ignored row and NaN for a
//   target outside [0, V);
//   with write_grad, z[row, :] = (softmax(x) - onehot(target)) * (softcap > 0 ? 1 - tanh^2 : 1),
//   rounded to dtype, and all zeros for an ignored row (its loss has no gradient).
// Without write_grad z is only read. loss (n) float32 on the device.
int cross_entropy_rows(void* z, Dtype dtype, int64_t n, int64_t V, const int64_t* targets,
                       int64_t ignore_index, float softcap, bool write_grad, float* loss, void* stream);

}  // namespace cuda
}  // namespace luatune
