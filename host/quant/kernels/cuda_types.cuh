// Device-side helpers every kernel library in lt_kernels shares (CUDA code only: include it from .cu
// files). Elem<T>: the element conversions, bf16 / f16 -> float32 exact, float32 -> bf16 / f16 to
// nearest even; launch_typed: a kernel template instantiated for the element type a Dtype names.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "host/quant/kernels/nf4_cuda.h"  // cuda::Dtype

namespace luatune {
namespace cuda {

template <typename T>
struct Elem;
template <>
struct Elem<float> {
  static __device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }
  static __device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
  static __device__ __forceinline__ float round(float v) { return v; }
};
template <>
struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i) {
    return __bfloat162float(p[i]);
  }
  static __device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, float v) {
    p[i] = __float2bfloat16_rn(v);
  }
  static __device__ __forceinline__ float round(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
};
template <>
struct Elem<__half> {
  static __device__ __forceinline__ float load(const __half* p, int64_t i) { return __half2float(p[i]); }
  static __device__ __forceinline__ void store(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
  static __device__ __forceinline__ float round(float v) { return __half2float(__float2half_rn(v)); }
};

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls launch(TypeTag<T>(), stream) with the element type T of `dtype`, then returns the launch's
// error: cudaErrorInvalidValue for a dtype the kernels do not take.
template <typename F>
inline int launch_typed(Dtype dtype, void* stream, F launch) {
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case Dtype::f32:
      launch(TypeTag<float>(), st);
      break;
    case Dtype::bf16:
      launch(TypeTag<__nv_bfloat16>(), st);
      break;
    case Dtype::f16:
      launch(TypeTag<__half>(), st);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace cuda
}  // namespace luatune
