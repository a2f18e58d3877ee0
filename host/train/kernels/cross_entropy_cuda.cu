// The one-pass cross-entropy over a logits block (cross_entropy_cuda.h): one thread block per row.
// Pass 1 reads the row once, each thread keeping a running maximum and a sum of exp(x - max) that
// it rescales when the maximum grows (the online softmax), merged across the block at the end;
// pass 2 reads the row again and writes (softmax - onehot) * dtanh over it. Three touches of each
// logit (read, read, write) instead of the nine of the per-block ATen chain in host/train/loss.cpp.
// The CPU reference of the same arithmetic is loss.cpp's cross_entropy_block_ on whole tensors;
// they agree to float32 rounding (exp and tanh differ in their last bits), not bit for bit.
#include "host/train/kernels/cross_entropy_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

namespace luatune {
namespace cuda {

namespace {

constexpr int kThreads = 512;  // per row: 16 warps, so a 128k-entry row is 250 values per thread

// ---------------------------------------------------------------------------------------------
// Element access: scalar, and 16 bytes at a time (4 float32 or 8 bf16 / f16 values) when every
// row starts 16-byte aligned. 16-bit values travel as unsigned short, so no union needs the CUDA
// types' constructors.

template <typename T>
struct Elem;

template <>
struct Elem<float> {
  static constexpr int kWidth = 4;
  static __device__ __forceinline__ float load(const float* p) { return *p; }
  static __device__ __forceinline__ void store(float* p, float v) { *p = v; }
  static __device__ __forceinline__ void load_vec(const float* p, float v[kWidth]) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  }
  static __device__ __forceinline__ void store_vec(float* p, const float v[kWidth]) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  }
};

template <typename T>
struct Elem16 {
  static constexpr int kWidth = 8;
  static __device__ __forceinline__ float to_float(unsigned short u) {
    if constexpr (std::is_same<T, __half>::value) return __half2float(__ushort_as_half(u));
    return __bfloat162float(__ushort_as_bfloat16(u));
  }
  static __device__ __forceinline__ unsigned short from_float(float v) {  // round to nearest even
    if constexpr (std::is_same<T, __half>::value) return __half_as_ushort(__float2half_rn(v));
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
  static __device__ __forceinline__ float load(const T* p) {
    return to_float(*reinterpret_cast<const unsigned short*>(p));
  }
  static __device__ __forceinline__ void store(T* p, float v) {
    *reinterpret_cast<unsigned short*>(p) = from_float(v);
  }
  static __device__ __forceinline__ void load_vec(const T* p, float v[kWidth]) {
    const uint4 w = *reinterpret_cast<const uint4*>(p);
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
    for (int k = 0; k < 4; k++) {  // little endian: the lower half is the earlier value
      v[2 * k] = to_float(static_cast<unsigned short>(words[k] & 0xFFFFu));
      v[2 * k + 1] = to_float(static_cast<unsigned short>(words[k] >> 16));
    }
  }
  static __device__ __forceinline__ void store_vec(T* p, const float v[kWidth]) {
    uint32_t words[4];
    for (int k = 0; k < 4; k++)
      words[k] = uint32_t(from_float(v[2 * k])) | (uint32_t(from_float(v[2 * k + 1])) << 16);
    *reinterpret_cast<uint4*>(p) = make_uint4(words[0], words[1], words[2], words[3]);
  }
};

template <>
struct Elem<__nv_bfloat16> : Elem16<__nv_bfloat16> {};
template <>
struct Elem<__half> : Elem16<__half> {};

// ---------------------------------------------------------------------------------------------
// The online softmax's state: m the largest x seen, s = sum exp(x - m). -inf / 0 before any value.

// Folds `count` values into (m, s): the group's maximum first, so the sum is rescaled at most once
// per group rather than once per value. A NaN makes s NaN for good, as ATen's log-softmax makes
// the row's loss NaN: fmaxf skips NaN, and a NaN met while m is still -inf was dropped, which gave a
// finite loss over NaN gradients.
__device__ __forceinline__ void fold(float& m, float& s, const float* x, int count) {
  float gm = x[0];
  bool nan = isnan(x[0]);
  for (int k = 1; k < count; k++) gm = fmaxf(gm, x[k]), nan = nan || isnan(x[k]);
  if (nan) {
    s = __int_as_float(0x7fc00000);
    if (gm > m) m = gm;
    return;
  }
  if (gm > m) {
    s = s * __expf(m - gm);  // m = -inf (nothing yet): s = 0 * 0
    m = gm;
  }
  if (m == -INFINITY) return;  // only -inf values so far: exp(x - m) would be exp(nan)
  for (int k = 0; k < count; k++) s += __expf(x[k] - m);
}

// (m, s) <- (m, s) merged with (m2, s2).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  if (isnan(s) || isnan(s2)) {  // a NaN on either side (its m may still be -inf) stays
    s = __int_as_float(0x7fc00000);
    if (m2 > m) m = m2;
    return;
  }
  if (m2 > m) {
    s = s * __expf(m - m2) + s2;
    m = m2;
  } else if (m2 != -INFINITY) {
    s += s2 * __expf(m2 - m);
  }
}

// x = softcap * tanh(z / softcap); th = the tanh (for the chain rule), or x = z without a softcap.
__device__ __forceinline__ float capped(float z, float softcap, float& th) {
  if (softcap > 0.0f) {
    th = tanhf(z / softcap);
    return th * softcap;
  }
  return z;
}

// ---------------------------------------------------------------------------------------------
// One block per row. kVec: V is a multiple of the vector width and z 16-byte aligned, so every row
// is read and written in 16-byte pieces.

template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_rows_kernel(T* __restrict__ z, int64_t V, const int64_t* __restrict__ targets,
                              int64_t ignore_index, float softcap, bool write_grad,
                              float* __restrict__ loss) {
  constexpr int W = Elem<T>::kWidth;
  const int64_t row = blockIdx.x;
  T* zr = z + row * V;
  const int64_t target = targets[row];
  const int tid = threadIdx.x;
  const int64_t nvec = kVec ? V / W : 0;  // vector pieces; the rest (all of it without kVec) scalar

  // A row without a target: loss 0, gradient 0, and the logits need not be read at all.
  if (target == ignore_index) {
    if (tid == 0) loss[row] = 0.0f;
    if (!write_grad) return;
    const float zeros[W] = {};
    for (int64_t k = tid; k < nvec; k += kThreads) Elem<T>::store_vec(zr + k * W, zeros);
    for (int64_t j = nvec * W + tid; j < V; j += kThreads) Elem<T>::store(zr + j, 0.0f);
    return;
  }
  const bool bad_target = target < 0 || target >= V;

  __shared__ float warp_m[kThreads / 32], warp_s[kThreads / 32];
  __shared__ float picked, lse_shared;
  // The target's logit, read before the barrier below: pass 2 may overwrite it after.
  if (tid == 0) {
    float th;
    picked = bad_target ? 0.0f : capped(Elem<T>::load(zr + target), softcap, th);
  }

  // Pass 1: the online softmax over this thread's values, then over the block.
  float m = -INFINITY, s = 0.0f;
  for (int64_t k = tid; k < nvec; k += kThreads) {
    float x[W];
    Elem<T>::load_vec(zr + k * W, x);
    float th;
    for (int e = 0; e < W; e++) x[e] = capped(x[e], softcap, th);
    fold(m, s, x, W);
  }
  for (int64_t j = nvec * W + tid; j < V; j += kThreads) {
    float th;
    const float x = capped(Elem<T>::load(zr + j), softcap, th);
    fold(m, s, &x, 1);
  }
  for (int off = 16; off > 0; off >>= 1) {
    const float m2 = __shfl_xor_sync(0xFFFFFFFFu, m, off), s2 = __shfl_xor_sync(0xFFFFFFFFu, s, off);
    merge(m, s, m2, s2);
  }
  if ((tid & 31) == 0) warp_m[tid / 32] = m, warp_s[tid / 32] = s;
  __syncthreads();
  if (tid == 0) {
    float bm = warp_m[0], bs = warp_s[0];
    for (int w = 1; w < kThreads / 32; w++) merge(bm, bs, warp_m[w], warp_s[w]);
    const float lse = logf(bs) + bm;  // the CPU's s.log_().add_(m)
    lse_shared = lse;
    loss[row] = bad_target ? __int_as_float(0x7fc00000) : lse - picked;  // NaN flags a bad target
  }
  if (!write_grad) return;
  __syncthreads();
  const float lse = lse_shared;

  // Pass 2: d loss / d z = (exp(x - lse) - onehot) * (1 - tanh^2), over the logits.
  auto grad = [&](float zv, int64_t j) {
    float th = 0.0f;
    const float x = capped(zv, softcap, th);
    float p = __expf(x - lse);
    if (j == target) p -= 1.0f;
    if (softcap > 0.0f) p *= 1.0f - th * th;
    return p;
  };
  for (int64_t k = tid; k < nvec; k += kThreads) {
    float x[W];
    Elem<T>::load_vec(zr + k * W, x);
    for (int e = 0; e < W; e++) x[e] = grad(x[e], k * W + e);
    Elem<T>::store_vec(zr + k * W, x);
  }
  for (int64_t j = nvec * W + tid; j < V; j += kThreads)
    Elem<T>::store(zr + j, grad(Elem<T>::load(zr + j), j));
}

template <typename T>
void launch(void* z, int64_t n, int64_t V, const int64_t* targets, int64_t ignore_index, float softcap,
            bool write_grad, float* loss, cudaStream_t stream) {
  T* zt = static_cast<T*>(z);
  const bool vec = V % Elem<T>::kWidth == 0 && reinterpret_cast<uintptr_t>(z) % 16 == 0;
  const dim3 grid(static_cast<unsigned>(n));
  if (vec)
    cross_entropy_rows_kernel<T, true>
        <<<grid, kThreads, 0, stream>>>(zt, V, targets, ignore_index, softcap, write_grad, loss);
  else
    cross_entropy_rows_kernel<T, false>
        <<<grid, kThreads, 0, stream>>>(zt, V, targets, ignore_index, softcap, write_grad, loss);
}

}  // namespace

int cross_entropy_rows(void* z, Dtype dtype, int64_t n, int64_t V, const int64_t* targets,
                       int64_t ignore_index, float softcap, bool write_grad, float* loss, void* stream) {
  if (n <= 0) return 0;
  if (V <= 0 || n > 0x7FFFFFFF) return static_cast<int>(cudaErrorInvalidValue);  // one block per row
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case Dtype::f32:
      launch<float>(z, n, V, targets, ignore_index, softcap, write_grad, loss, s);
      break;
    case Dtype::bf16:
      launch<__nv_bfloat16>(z, n, V, targets, ignore_index, softcap, write_grad, loss, s);
      break;
    case Dtype::f16:
      launch<__half>(z, n, V, targets, ignore_index, softcap, write_grad, loss, s);
      break;
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cuda
}  // namespace luatune
