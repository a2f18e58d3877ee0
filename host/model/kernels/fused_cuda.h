// CUDA kernels for the decoder layer's element-wise chains: RMSNorm, RoPE and the gated MLP
// activation (SwiGLU / GeGLU), forward and backward, one kernel per op and direction. Plain C++
// interface like nf4_cuda.h (whose Dtype and error_string these share): device pointers to
// contiguous tensors, streams as void*, and every call returns 0 or a cudaError_t value.
// Called by host/model/fused.cpp, which states the maths and keeps the CPU reference.
#pragma once

#include <cstdint>

#include "host/quant/kernels/nf4_cuda.h"  // cuda::Dtype, cuda::error_string

namespace luatune {
namespace cuda {

// The gate's activation in act(gate) * up; values as host/model/config.h's Activation.
enum class GluAct : int { silu = 0, gelu_tanh = 1, gelu = 2 };

// x, y (rows, cols) and w (cols) in `dtype`; rstd (rows) float32, may be null. Per row, in float32:
// n = x * rsqrt(mean(x^2) + eps); y = w * round(n) (Llama: HF casts n to the input dtype before the
// weight) or n * (1 + w) (gemma).
int rms_norm_forward(const void* x, const void* w, void* y, float* rstd, int64_t rows, int64_t cols,
                     float eps, bool gemma, Dtype dtype, void* stream);

// How many partial rows of dw rms_norm_backward sums: its workspace is (parts, cols) float32.
int rms_norm_backward_parts(int64_t rows);
// dy, x, dx (rows, cols), w, dw (cols) in `dtype`; rstd (rows) from the forward. dx or dw may be
// null (not needed); dw needs `workspace` of (parts, cols) float32 with parts from
// rms_norm_backward_parts(rows).
int rms_norm_backward(const void* dy, const void* x, const void* w, const float* rstd, void* dx, void* dw,
                      float* workspace, int parts, int64_t rows, int64_t cols, bool gemma, Dtype dtype,
                      void* stream);

// x, y (rows, heads, dim) and cos, sin (rows, dim), all in `dtype`, dim even; rows is B*T for q/k
// laid out (B, T, heads, dim). Forward: y = x * cos + rotate_half(x) * sin, rounded per product as
// ATen does in that dtype. Backward (x is dy, y is dx): the transposed rotation,
// dx = dy * cos + rotate_half^T(dy * sin).
int rope_forward(const void* x, const void* cos, const void* sin, void* y, int64_t rows, int64_t heads,
                 int64_t dim, Dtype dtype, void* stream);
int rope_backward(const void* dy, const void* cos, const void* sin, void* dx, int64_t rows, int64_t heads,
                  int64_t dim, Dtype dtype, void* stream);

// gate, up, y (n) in `dtype`: y = round(act(gate)) * up. Backward: dgate = dy * up * act'(gate),
// dup = dy * act(gate); either output may be null.
int glu_forward(const void* gate, const void* up, void* y, int64_t n, GluAct act, Dtype dtype, void* stream);
int glu_backward(const void* dy, const void* gate, const void* up, void* dgate, void* dup, int64_t n,
                 GluAct act, Dtype dtype, void* stream);

}  // namespace cuda
}  // namespace luatune
