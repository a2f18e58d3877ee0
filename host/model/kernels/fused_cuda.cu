// CUDA kernels for RMSNorm, RoPE and the gated MLP activation, forward and backward (interface and
// maths: fused_cuda.h; the CPU reference and the autograd wiring: host/model/fused.cpp). Every
// value is computed in float32 from the stored dtype and rounded once on the way out, except where
// HF's module rounds in between (RMSNorm's n before the weight, RoPE's products, the activation
// before `* up`): there the kernels round at the same points, so bf16 outputs match ATen's.
#include "host/model/kernels/fused_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "host/quant/kernels/cuda_types.cuh"

namespace luatune {
namespace cuda {

namespace {

// Element conversions (Elem<T>) and launch_typed: host/quant/kernels/cuda_types.cuh.

constexpr int kThreads = 256;

// Sum over the block; `red` is 33 floats of shared memory. Every thread gets the total.
__device__ __forceinline__ float block_sum(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  __syncthreads();  // the previous call's readers of red[32] are done
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? red[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) red[32] = v;
  }
  __syncthreads();
  return red[32];
}

// ---------------------------------------------------------------------------------------------
// RMSNorm: a block per row (grid-stride over rows), threads striding over the columns.

template <typename T, bool kGemma>
__global__ void __launch_bounds__(kThreads) rms_norm_forward_kernel(const T* x, const T* w, T* y, float* rstd,
                                                                    int64_t rows, int64_t cols, float eps) {
  __shared__ float red[33];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float v = Elem<T>::load(xr, j);
      ss += v * v;
    }
    ss = block_sum(ss, red);
    const float rs = rsqrtf(ss / static_cast<float>(cols) + eps);
    if (rstd != nullptr && threadIdx.x == 0) rstd[r] = rs;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float n = Elem<T>::load(xr, j) * rs;
      const float wj = Elem<T>::load(w, j);
      Elem<T>::store(yr, j, kGemma ? n * (1.0f + wj) : wj * Elem<T>::round(n));
    }
  }
}

// With n = x * rstd and gn = dy * w' (w' = w, or 1 + w for gemma):
// dx = rstd * (gn - n * mean(gn * n)), dw = sum over rows of dy * n. Each block adds its rows' dw
// terms into its own workspace row (no atomics); rms_norm_column_sum adds the rows up.
template <typename T, bool kGemma>
__global__ void __launch_bounds__(kThreads)
    rms_norm_backward_kernel(const T* dy, const T* x, const T* w, const float* rstd, T* dx, float* workspace,
                             int64_t rows, int64_t cols) {
  __shared__ float red[33];
  float* part = workspace != nullptr ? workspace + blockIdx.x * cols : nullptr;
  if (part != nullptr)  // each thread zeroes the columns it alone accumulates below
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) part[j] = 0.0f;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const T* gr = dy + r * cols;
    const float rs = rstd[r];
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float n = Elem<T>::load(xr, j) * rs, g = Elem<T>::load(gr, j);
      const float wj = Elem<T>::load(w, j);
      dot += g * (kGemma ? 1.0f + wj : wj) * n;
      if (part != nullptr) part[j] += g * n;
    }
    if (dx == nullptr) continue;
    const float mean_dot = block_sum(dot, red) / static_cast<float>(cols);
    T* dr = dx + r * cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float n = Elem<T>::load(xr, j) * rs, g = Elem<T>::load(gr, j);
      const float wj = Elem<T>::load(w, j);
      Elem<T>::store(dr, j, rs * (g * (kGemma ? 1.0f + wj : wj) - n * mean_dot));
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    rms_norm_column_sum(const float* workspace, int parts, int64_t cols, T* dw) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < cols;
       j += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int p = 0; p < parts; p++) s += workspace[p * cols + j];
    Elem<T>::store(dw, j, s);
  }
}

// ---------------------------------------------------------------------------------------------
// RoPE: a thread per (row, head, i < dim/2) pair (x_i, x_{i+dim/2}).

template <typename T, bool kBackward>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(const T* x, const T* cos, const T* sin, T* y, int64_t rows, int64_t heads, int64_t half) {
  const int64_t n = rows * heads * half;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < n;
       p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = p % half, row_head = p / half, row = row_head / heads;
    const int64_t xo = row_head * 2 * half + i, co = row * 2 * half + i;
    const float x1 = Elem<T>::load(x, xo), x2 = Elem<T>::load(x, xo + half);
    const float c1 = Elem<T>::load(cos, co), c2 = Elem<T>::load(cos, co + half);
    const float s1 = Elem<T>::load(sin, co), s2 = Elem<T>::load(sin, co + half);
    if (kBackward) {
      // y1 = x1 c1 - x2 s1, y2 = x2 c2 + x1 s2, transposed; one rounding, as the grads are ours.
      Elem<T>::store(y, xo, x1 * c1 + x2 * s2);
      Elem<T>::store(y, xo + half, x2 * c2 - x1 * s1);
    } else {
      // rotate_half(x) = (-x2, x1); ATen rounds each product to T, then the sum.
      Elem<T>::store(y, xo, Elem<T>::round(x1 * c1) - Elem<T>::round(x2 * s1));
      Elem<T>::store(y, xo + half, Elem<T>::round(x2 * c2) + Elem<T>::round(x1 * s2));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Gated activations, written as ATen's CUDA kernels write them (same operation order in float32,
// constants rounded from double as theirs are).

constexpr double kSqrt2 = 1.41421356237309504880, kTwoOverSqrtPi = 1.12837916709551257390;
constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr float kGeluBeta = static_cast<float>(kSqrt2 * kTwoOverSqrtPi * 0.5), kGeluKappa = 0.044715f;

template <int kAct>
__device__ __forceinline__ float act_forward(float x) {
  if (kAct == 0) return x / (1.0f + expf(-x));  // silu
  if (kAct == 1) {                              // gelu, tanh approximation
    const float inner = kGeluBeta * (x + kGeluKappa * (x * x * x));
    return 0.5f * x * (1.0f + tanhf(inner));
  }
  return x * 0.5f * (1.0f + erff(x * static_cast<float>(kSqrtHalf)));  // gelu
}

// d act / dx.
template <int kAct>
__device__ __forceinline__ float act_grad(float x) {
  if (kAct == 0) {
    const float s = 1.0f / (1.0f + expf(-x));
    return s * (1.0f + x * (1.0f - s));
  }
  if (kAct == 1) {
    const float x_sq = x * x, inner = kGeluBeta * (x + kGeluKappa * (x_sq * x)), t = tanhf(inner);
    const float left = 0.5f * x, right = 1.0f + t;
    return 0.5f * right + left * (1.0f - t * t) * (kGeluBeta * (1.0f + 3.0f * kGeluKappa * x_sq));
  }
  const float alpha = static_cast<float>(kTwoOverSqrtPi * kSqrtHalf * 0.5);
  const float cdf = 0.5f * (1.0f + erff(x * static_cast<float>(kSqrtHalf)));
  return cdf + x * (expf(-0.5f * x * x) * alpha);
}

template <typename T, int kAct>
__global__ void __launch_bounds__(kThreads) glu_forward_kernel(const T* gate, const T* up, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    Elem<T>::store(y, i, Elem<T>::round(act_forward<kAct>(Elem<T>::load(gate, i))) * Elem<T>::load(up, i));
}

template <typename T, int kAct>
__global__ void __launch_bounds__(kThreads)
    glu_backward_kernel(const T* dy, const T* gate, const T* up, T* dgate, T* dup, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = Elem<T>::load(gate, i), d = Elem<T>::load(dy, i);
    if (dgate != nullptr) Elem<T>::store(dgate, i, d * Elem<T>::load(up, i) * act_grad<kAct>(g));
    if (dup != nullptr) Elem<T>::store(dup, i, d * act_forward<kAct>(g));
  }
}

// ---------------------------------------------------------------------------------------------
// Host side: argument checks, launch shapes, dispatch over the template parameters.

// A grid of `needed` CTAs, capped at `per_sm` per SM (the kernels loop over the rest).
int grid_size(int64_t needed, int per_sm, int* err) {
  int dev = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  *err = static_cast<int>(e);
  const int64_t cap = int64_t(sms > 0 ? sms : 1) * per_sm;
  return static_cast<int>(needed < 1 ? 1 : (needed < cap ? needed : cap));
}

// Threads per row-block: a warp multiple covering short rows (q/k norms have 64-256 columns).
int row_threads(int64_t cols) {
  const int64_t t = (cols + 31) / 32 * 32;
  return static_cast<int>(t < kThreads ? (t < 32 ? 32 : t) : kThreads);
}

bool act_ok(GluAct act) {
  return act == GluAct::silu || act == GluAct::gelu_tanh || act == GluAct::gelu;
}

template <typename T, int kAct>
void launch_glu(bool backward, const void* dy, const void* gate, const void* up, void* y, void* dgate,
                void* dup, int64_t n, int grid, cudaStream_t st) {
  if (backward)
    glu_backward_kernel<T, kAct><<<grid, kThreads, 0, st>>>(
        static_cast<const T*>(dy), static_cast<const T*>(gate), static_cast<const T*>(up),
        static_cast<T*>(dgate), static_cast<T*>(dup), n);
  else
    glu_forward_kernel<T, kAct><<<grid, kThreads, 0, st>>>(static_cast<const T*>(gate),
                                                           static_cast<const T*>(up), static_cast<T*>(y), n);
}

int glu_run(bool backward, const void* dy, const void* gate, const void* up, void* y, void* dgate, void* dup,
            int64_t n, GluAct act, Dtype dtype, void* stream) {
  if (n < 0 || !act_ok(act)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  int err = 0;
  const int grid = grid_size((n + kThreads - 1) / kThreads, 16, &err);
  if (err != 0) return err;
  return launch_typed(dtype, stream, [&](auto tag, cudaStream_t st) {
    using T = typename decltype(tag)::type;
    if (act == GluAct::silu)
      launch_glu<T, 0>(backward, dy, gate, up, y, dgate, dup, n, grid, st);
    else if (act == GluAct::gelu_tanh)
      launch_glu<T, 1>(backward, dy, gate, up, y, dgate, dup, n, grid, st);
    else
      launch_glu<T, 2>(backward, dy, gate, up, y, dgate, dup, n, grid, st);
  });
}

int rope_run(bool backward, const void* x, const void* cos, const void* sin, void* y, int64_t rows,
             int64_t heads, int64_t dim, Dtype dtype, void* stream) {
  if (rows < 0 || heads < 0 || dim < 0 || dim % 2 != 0) return cudaErrorInvalidValue;
  const int64_t pairs = rows * heads * (dim / 2);
  if (pairs == 0) return cudaSuccess;
  if (x == nullptr || cos == nullptr || sin == nullptr || y == nullptr) return cudaErrorInvalidValue;
  int err = 0;
  const int grid = grid_size((pairs + kThreads - 1) / kThreads, 16, &err);
  if (err != 0) return err;
  return launch_typed(dtype, stream, [&](auto tag, cudaStream_t st) {
    using T = typename decltype(tag)::type;
    const T *xt = static_cast<const T*>(x), *ct = static_cast<const T*>(cos),
            *st_ = static_cast<const T*>(sin);
    if (backward)
      rope_kernel<T, true><<<grid, kThreads, 0, st>>>(xt, ct, st_, static_cast<T*>(y), rows, heads, dim / 2);
    else
      rope_kernel<T, false><<<grid, kThreads, 0, st>>>(xt, ct, st_, static_cast<T*>(y), rows, heads, dim / 2);
  });
}

}  // namespace

int rms_norm_forward(const void* x, const void* w, void* y, float* rstd, int64_t rows, int64_t cols,
                     float eps, bool gemma, Dtype dtype, void* stream) {
  if (rows < 0 || cols < 0) return cudaErrorInvalidValue;
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (x == nullptr || w == nullptr || y == nullptr) return cudaErrorInvalidValue;
  int err = 0;
  const int grid = grid_size(rows, 16, &err);
  if (err != 0) return err;
  const int threads = row_threads(cols);
  return launch_typed(dtype, stream, [&](auto tag, cudaStream_t st) {
    using T = typename decltype(tag)::type;
    const T *xt = static_cast<const T*>(x), *wt = static_cast<const T*>(w);
    if (gemma)
      rms_norm_forward_kernel<T, true>
          <<<grid, threads, 0, st>>>(xt, wt, static_cast<T*>(y), rstd, rows, cols, eps);
    else
      rms_norm_forward_kernel<T, false>
          <<<grid, threads, 0, st>>>(xt, wt, static_cast<T*>(y), rstd, rows, cols, eps);
  });
}

int rms_norm_backward_parts(int64_t rows) {
  int err = 0;
  return grid_size(rows, 4, &err);  // on an error, 1 part; the backward's own call reports it
}

int rms_norm_backward(const void* dy, const void* x, const void* w, const float* rstd, void* dx, void* dw,
                      float* workspace, int parts, int64_t rows, int64_t cols, bool gemma, Dtype dtype,
                      void* stream) {
  if (rows < 0 || cols < 0 || parts < 1) return cudaErrorInvalidValue;
  if (cols == 0 || (dx == nullptr && dw == nullptr)) return cudaSuccess;
  if (dw != nullptr && workspace == nullptr) return cudaErrorInvalidValue;
  if (rows > 0 && (dy == nullptr || x == nullptr || w == nullptr || rstd == nullptr))
    return cudaErrorInvalidValue;
  int err = 0;
  const int col_grid = grid_size((cols + kThreads - 1) / kThreads, 4, &err);
  if (err != 0) return err;
  const int threads = row_threads(cols);
  return launch_typed(dtype, stream, [&](auto tag, cudaStream_t st) {
    using T = typename decltype(tag)::type;
    const T *gt = static_cast<const T*>(dy), *xt = static_cast<const T*>(x), *wt = static_cast<const T*>(w);
    float* ws = dw != nullptr ? workspace : nullptr;
    // With no rows, the partial rows still need their zeros for dw (all zero).
    if (gemma)
      rms_norm_backward_kernel<T, true>
          <<<parts, threads, 0, st>>>(gt, xt, wt, rstd, static_cast<T*>(dx), ws, rows, cols);
    else
      rms_norm_backward_kernel<T, false>
          <<<parts, threads, 0, st>>>(gt, xt, wt, rstd, static_cast<T*>(dx), ws, rows, cols);
    if (dw != nullptr)
      rms_norm_column_sum<T><<<col_grid, kThreads, 0, st>>>(ws, parts, cols, static_cast<T*>(dw));
  });
}

int rope_forward(const void* x, const void* cos, const void* sin, void* y, int64_t rows, int64_t heads,
                 int64_t dim, Dtype dtype, void* stream) {
  return rope_run(false, x, cos, sin, y, rows, heads, dim, dtype, stream);
}

int rope_backward(const void* dy, const void* cos, const void* sin, void* dx, int64_t rows, int64_t heads,
                  int64_t dim, Dtype dtype, void* stream) {
  return rope_run(true, dy, cos, sin, dx, rows, heads, dim, dtype, stream);
}

int glu_forward(const void* gate, const void* up, void* y, int64_t n, GluAct act, Dtype dtype, void* stream) {
  if (n > 0 && (gate == nullptr || up == nullptr || y == nullptr)) return cudaErrorInvalidValue;
  return glu_run(false, nullptr, gate, up, y, nullptr, nullptr, n, act, dtype, stream);
}

int glu_backward(const void* dy, const void* gate, const void* up, void* dgate, void* dup, int64_t n,
                 GluAct act, Dtype dtype, void* stream) {
  if (n > 0 && (dy == nullptr || gate == nullptr || up == nullptr)) return cudaErrorInvalidValue;
  if (dgate == nullptr && dup == nullptr) return cudaSuccess;
  return glu_run(true, dy, gate, up, nullptr, dgate, dup, n, act, dtype, stream);
}

}  // namespace cuda
}  // namespace luatune
