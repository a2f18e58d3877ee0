// CUDA kernels for bitsandbytes' 4-bit formats (NF4 / FP4): blockwise quantize and dequantize,
// with plain or double-quantized block scales. Bit for bit the CPU reference host/quant/nf4.cpp:
// every float operation whose rounding the format fixes is an explicit _rn intrinsic, so nvcc's
// multiply-add contraction cannot change a result. Interface and rules: nf4_cuda.h, nf4.h;
// why and how it is tested: docs/kernels.md.
#include "host/quant/kernels/nf4_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "host/quant/kernels/cuda_types.cuh"
#include "host/quant/nf4_tables.h"

namespace luatune {
namespace cuda {

namespace {

// ---------------------------------------------------------------------------------------------
// Code tables and the quantization trees, on nf4_tables.h's literals: the CPU reference (nf4.cpp)
// compiles the same characters, so both sides hold the same float32 values.

__constant__ float kNF4CodeDev[16] = {LUATUNE_NF4_CODE};
__constant__ float kFP4CodeDev[16] = {LUATUNE_FP4_CODE};

// The decision trees of nf4.cpp (and bitsandbytes' kernels), on the shared threshold literals.
__device__ __forceinline__ uint32_t nf4_code_of(float x) {
  constexpr float t[15] = {LUATUNE_NF4_THRESHOLDS};
  if (x > t[7]) {
    if (x > t[11]) {
      if (x > t[13]) return x > t[14] ? 15 : 14;
      return x > t[12] ? 13 : 12;
    }
    if (x > t[9]) return x > t[10] ? 11 : 10;
    return x > t[8] ? 9 : 8;
  }
  if (x > t[3]) {
    if (x > t[5]) return x > t[6] ? 7 : 6;
    return x > t[4] ? 5 : 4;
  }
  if (x > t[1]) return x > t[2] ? 3 : 2;
  return x > t[0] ? 1 : 0;
}

__device__ __forceinline__ uint32_t fp4_code_of(float x) {
  constexpr float t[7] = {LUATUNE_FP4_THRESHOLDS};
  const uint32_t sign = x < 0.0f ? 0x8u : 0x0u;
  x = fabsf(x);
  uint32_t m;
  if (x > t[3])
    m = x > t[5] ? (x > t[6] ? 0x3u : 0x2u) : (x > t[4] ? 0x5u : 0x4u);
  else
    m = x > t[1] ? (x > t[2] ? 0x7u : 0x6u) : (x > t[0] ? 0x1u : 0x0u);
  return m + sign;
}

template <int kQuantType>
__device__ __forceinline__ uint32_t code_of(float x) {
  return kQuantType == 0 ? nf4_code_of(x) : fp4_code_of(x);
}

// Element conversions (Elem<T>) and launch_typed: host/quant/kernels/cuda_types.cuh.

// Two 16-bit values -> one 32-bit word, the first at the lower address (little endian).
__device__ __forceinline__ uint32_t pack2(__nv_bfloat16 a, __nv_bfloat16 b) {
  return uint32_t(__bfloat16_as_ushort(a)) | (uint32_t(__bfloat16_as_ushort(b)) << 16);
}
__device__ __forceinline__ uint32_t pack2(__half a, __half b) {
  return uint32_t(__half_as_ushort(a)) | (uint32_t(__half_as_ushort(b)) << 16);
}
__device__ __forceinline__ __nv_bfloat16 to_out(float v, __nv_bfloat16*) {
  return __float2bfloat16_rn(v);
}
__device__ __forceinline__ __half to_out(float v, __half*) {
  return __float2half_rn(v);
}

// Eight consecutive values from 16 aligned bytes of bf16 / f16, or 32 of float32.
__device__ __forceinline__ void load8_vec(const float* p, int64_t i, float v[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p + i);
  const float4 b = *reinterpret_cast<const float4*>(p + i + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void unpack8_16(uint4 w, float v[8], bool bf16) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  for (int k = 0; k < 4; k++) {
    const unsigned short lo = static_cast<unsigned short>(words[k] & 0xFFFFu);
    const unsigned short hi = static_cast<unsigned short>(words[k] >> 16);
    v[2 * k] = bf16 ? __bfloat162float(__ushort_as_bfloat16(lo)) : __half2float(__ushort_as_half(lo));
    v[2 * k + 1] = bf16 ? __bfloat162float(__ushort_as_bfloat16(hi)) : __half2float(__ushort_as_half(hi));
  }
}
__device__ __forceinline__ void load8_vec(const __nv_bfloat16* p, int64_t i, float v[8]) {
  unpack8_16(*reinterpret_cast<const uint4*>(p + i), v, true);
}
__device__ __forceinline__ void load8_vec(const __half* p, int64_t i, float v[8]) {
  unpack8_16(*reinterpret_cast<const uint4*>(p + i), v, false);
}

// ---------------------------------------------------------------------------------------------
// Quantize. A group of G = min(32, blocksize / 8) lanes of one warp codes one block: each lane
// takes 8 consecutive values per step (G * 8 values per step, blocksize / (G * 8) steps), the
// group's absmax is a shuffle-xor max over its G lanes, then each lane codes its values again and
// writes 4 packed bytes per step. A warp therefore codes 32 / G blocks at once, and every lane of a
// warp runs the same number of loop trips, so the full-mask shuffles never miss a lane.
// kVec: the input is 16-byte aligned and packed 4-byte aligned (vector loads and stores for every
// complete 8-value step; the partial step at the end of n is scalar either way).

template <typename InT, int kQuantType, bool kVec>
__global__ void __launch_bounds__(256)
    quantize_4bit_kernel(const InT* __restrict__ in, int64_t n, int64_t blocksize, int group,
                         uint8_t* __restrict__ packed, float* __restrict__ absmax) {
  const int lane = threadIdx.x & 31;
  const int sub = lane % group;  // lane within its group
  const int blocks_per_warp = 32 / group;
  const int64_t steps = blocksize / (int64_t(group) * 8);
  const int64_t num_blocks = (n + blocksize - 1) / blocksize;
  const int64_t warps_total = int64_t(gridDim.x) * (blockDim.x / 32);
  const int64_t warp_id = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int64_t tiles = (num_blocks + blocks_per_warp - 1) / blocks_per_warp;

  for (int64_t tile = warp_id; tile < tiles; tile += warps_total) {  // warp-uniform loop
    const int64_t b = tile * blocks_per_warp + lane / group;
    const bool active = b < num_blocks;
    const int64_t begin = b * blocksize;
    const int64_t end = !active ? begin : (n < begin + blocksize ? n : begin + blocksize);

    // Loads the 8 values of step s into v (values past `end` read as 0: they never raise a max
    // and are never stored). Returns the index of the first value.
    auto load_step = [&](int64_t s, float v[8]) -> int64_t {
      const int64_t i0 = begin + (s * group + sub) * 8;
      if (kVec && i0 + 8 <= end) {
        load8_vec(in, i0, v);
      } else {
        for (int k = 0; k < 8; k++) v[k] = i0 + k < end ? Elem<InT>::load(in, i0 + k) : 0.0f;
      }
      return i0;
    };

    // Pass 1: absmax. The first step's values stay in registers for pass 2 (all of them when
    // blocksize <= 256). Starting from 0 and taking fmaxf, a NaN input is ignored as std::max
    // ignores it in the reference.
    float first[8];
    float m = 0.0f;
    load_step(0, first);
    for (int k = 0; k < 8; k++) m = fmaxf(m, fabsf(first[k]));
    for (int64_t s = 1; s < steps; s++) {
      float v[8];
      load_step(s, v);
      for (int k = 0; k < 8; k++) m = fmaxf(m, fabsf(v[k]));
    }
    for (int off = group / 2; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
    if (active && sub == 0) absmax[b] = m;
    // Correctly rounded 1 / absmax; 1 / 0 = inf, and 0 * inf = NaN codes as 0 (all-zero block).
    const float r = __frcp_rn(m);

    // Pass 2: code and pack, even index in the high nibble.
    for (int64_t s = 0; s < steps; s++) {
      float v[8];
      int64_t i0;
      if (s == 0) {
        for (int k = 0; k < 8; k++) v[k] = first[k];
        i0 = begin + int64_t(sub) * 8;
      } else {
        i0 = load_step(s, v);
      }
      if (!active || i0 >= end) continue;
      uint32_t word = 0;
      for (int j = 0; j < 4; j++) {
        const uint32_t hi = code_of<kQuantType>(__fmul_rn(v[2 * j], r));
        const uint32_t lo = i0 + 2 * j + 1 < end ? code_of<kQuantType>(__fmul_rn(v[2 * j + 1], r)) : 0u;
        word |= ((hi << 4) | lo) << (8 * j);
      }
      if (kVec && i0 + 8 <= end) {
        *reinterpret_cast<uint32_t*>(packed + i0 / 2) = word;
      } else {
        for (int j = 0; j < 4 && i0 + 2 * j < end; j++)
          packed[i0 / 2 + j] = static_cast<uint8_t>(word >> (8 * j));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Dequantize. Each thread expands 4 packed bytes into 8 values (a chunk; blocksize >= 32 so a
// chunk never straddles two blocks), with a grid-stride loop over chunks. The block scale is
// absmax[b], or with double quantization (nested_code[absmax_q[b]] * nested_absmax[b / nb]) +
// offset: two roundings, as the reference. kVec: packed 4-byte and out 16-byte aligned, so a
// complete chunk is one 32-bit load and one 16-byte store (two for float32); the chunk at the end
// of an n that is not a multiple of 8 is written element by element either way.

struct ScaleArgs {
  const float* absmax;
  const uint8_t* absmax_q;
  const float* nested_code;
  const float* nested_absmax;
  int64_t nested_blocksize;
  float offset;
};

template <bool kNested>
__device__ __forceinline__ float block_scale(const ScaleArgs& s, int64_t b) {
  if (!kNested) return __ldg(s.absmax + b);
  const float c = __ldg(s.nested_code + __ldg(s.absmax_q + b));
  return __fadd_rn(__fmul_rn(c, __ldg(s.nested_absmax + b / s.nested_blocksize)), s.offset);
}

template <typename OutT>
__device__ __forceinline__ void store8_vec(OutT* out, int64_t i, const float v[8]) {
  uint4 w;
  w.x = pack2(to_out(v[0], out), to_out(v[1], out));
  w.y = pack2(to_out(v[2], out), to_out(v[3], out));
  w.z = pack2(to_out(v[4], out), to_out(v[5], out));
  w.w = pack2(to_out(v[6], out), to_out(v[7], out));
  *reinterpret_cast<uint4*>(out + i) = w;
}
template <>
__device__ __forceinline__ void store8_vec<float>(float* out, int64_t i, const float v[8]) {
  *reinterpret_cast<float4*>(out + i) = make_float4(v[0], v[1], v[2], v[3]);
  *reinterpret_cast<float4*>(out + i + 4) = make_float4(v[4], v[5], v[6], v[7]);
}

template <typename OutT, int kQuantType, bool kNested, bool kVec>
__global__ void __launch_bounds__(256)
    dequantize_4bit_kernel(const uint8_t* __restrict__ packed, int64_t n, int64_t blocksize, ScaleArgs scale,
                           OutT* __restrict__ out) {
  __shared__ float code[16];
  if (threadIdx.x < 16)
    code[threadIdx.x] = kQuantType == 0 ? kNF4CodeDev[threadIdx.x] : kFP4CodeDev[threadIdx.x];
  __syncthreads();

  const int64_t chunks = (n + 7) / 8;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks; c += stride) {
    const int64_t i0 = c * 8;
    const float sc = block_scale<kNested>(scale, i0 / blocksize);
    if (kVec && i0 + 8 <= n) {
      const uint32_t word = __ldg(reinterpret_cast<const unsigned int*>(packed) + c);
      float v[8];
      for (int j = 0; j < 4; j++) {
        const uint32_t byte = (word >> (8 * j)) & 0xFFu;
        v[2 * j] = __fmul_rn(code[byte >> 4], sc);
        v[2 * j + 1] = __fmul_rn(code[byte & 0xFu], sc);
      }
      store8_vec(out, i0, v);
    } else {
      for (int k = 0; k < 8 && i0 + k < n; k++) {
        const uint32_t byte = __ldg(packed + (i0 + k) / 2);
        const uint32_t q = (k % 2 == 0) ? (byte >> 4) : (byte & 0xFu);
        Elem<OutT>::store(out, i0 + k, __fmul_rn(code[q], sc));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side: argument checks, launch shapes, dispatch over the template parameters.

constexpr int kThreads = 256;

bool blocksize_ok(int64_t blocksize) {
  return blocksize >= 32 && blocksize <= 4096 && (blocksize & (blocksize - 1)) == 0;
}

bool aligned(const void* p, uintptr_t a) {
  return reinterpret_cast<uintptr_t>(p) % a == 0;
}

// A grid of `needed` CTAs, capped at 16 per SM (the kernels loop over the rest).
int grid_size(int64_t needed, int* err) {
  int dev = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  *err = static_cast<int>(e);
  const int64_t cap = int64_t(sms > 0 ? sms : 1) * 16;
  return static_cast<int>(needed < 1 ? 1 : (needed < cap ? needed : cap));
}

template <typename OutT, int kQuantType, bool kNested>
void launch_dequantize(const uint8_t* packed, int64_t n, int64_t blocksize, const ScaleArgs& s, void* out,
                       bool vec, int grid, cudaStream_t stream) {
  OutT* o = static_cast<OutT*>(out);
  if (vec)
    dequantize_4bit_kernel<OutT, kQuantType, kNested, true>
        <<<grid, kThreads, 0, stream>>>(packed, n, blocksize, s, o);
  else
    dequantize_4bit_kernel<OutT, kQuantType, kNested, false>
        <<<grid, kThreads, 0, stream>>>(packed, n, blocksize, s, o);
}

template <typename OutT>
void dispatch_dequantize(const uint8_t* packed, int64_t n, int64_t blocksize, int quant_type, bool nested,
                         const ScaleArgs& s, void* out, bool vec, int grid, cudaStream_t stream) {
  if (quant_type == 0) {
    if (nested)
      launch_dequantize<OutT, 0, true>(packed, n, blocksize, s, out, vec, grid, stream);
    else
      launch_dequantize<OutT, 0, false>(packed, n, blocksize, s, out, vec, grid, stream);
  } else {
    if (nested)
      launch_dequantize<OutT, 1, true>(packed, n, blocksize, s, out, vec, grid, stream);
    else
      launch_dequantize<OutT, 1, false>(packed, n, blocksize, s, out, vec, grid, stream);
  }
}

template <typename InT, int kQuantType>
void launch_quantize(const void* in, int64_t n, int64_t blocksize, int group, uint8_t* packed, float* absmax,
                     bool vec, int grid, cudaStream_t stream) {
  const InT* x = static_cast<const InT*>(in);
  if (vec)
    quantize_4bit_kernel<InT, kQuantType, true>
        <<<grid, kThreads, 0, stream>>>(x, n, blocksize, group, packed, absmax);
  else
    quantize_4bit_kernel<InT, kQuantType, false>
        <<<grid, kThreads, 0, stream>>>(x, n, blocksize, group, packed, absmax);
}

template <typename InT>
void dispatch_quantize(const void* in, int64_t n, int64_t blocksize, int quant_type, int group,
                       uint8_t* packed, float* absmax, bool vec, int grid, cudaStream_t stream) {
  if (quant_type == 0)
    launch_quantize<InT, 0>(in, n, blocksize, group, packed, absmax, vec, grid, stream);
  else
    launch_quantize<InT, 1>(in, n, blocksize, group, packed, absmax, vec, grid, stream);
}

}  // namespace

int dequantize_4bit(const uint8_t* packed, int64_t n, int64_t blocksize, int quant_type,
                    const BlockScale& scale, void* out, Dtype out_dtype, void* stream) {
  const bool nested = scale.absmax_q != nullptr;
  if (n < 0 || !blocksize_ok(blocksize) || (quant_type != 0 && quant_type != 1)) return cudaErrorInvalidValue;
  if ((scale.absmax == nullptr) == (scale.absmax_q == nullptr)) return cudaErrorInvalidValue;
  if (nested &&
      (scale.nested_code == nullptr || scale.nested_absmax == nullptr || scale.nested_blocksize <= 0))
    return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (packed == nullptr || out == nullptr) return cudaErrorInvalidValue;

  int err = 0;
  const int64_t chunks = (n + 7) / 8;
  const int grid = grid_size((chunks + kThreads - 1) / kThreads, &err);
  if (err != 0) return err;
  const bool vec = aligned(packed, 4) && aligned(out, 16);
  const ScaleArgs s{scale.absmax,        scale.absmax_q,         scale.nested_code,
                    scale.nested_absmax, scale.nested_blocksize, scale.offset};
  return launch_typed(out_dtype, stream, [&](auto tag, cudaStream_t st) {
    using OutT = typename decltype(tag)::type;
    dispatch_dequantize<OutT>(packed, n, blocksize, quant_type, nested, s, out, vec, grid, st);
  });
}

int quantize_4bit(const void* in, Dtype in_dtype, int64_t n, int64_t blocksize, int quant_type,
                  uint8_t* packed, float* absmax, void* stream) {
  if (n < 0 || !blocksize_ok(blocksize) || (quant_type != 0 && quant_type != 1)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (in == nullptr || packed == nullptr || absmax == nullptr) return cudaErrorInvalidValue;

  int err = 0;
  const int group = blocksize / 8 < 32 ? static_cast<int>(blocksize / 8) : 32;  // 4, 8, 16 or 32 lanes
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  const int64_t tiles = (blocks + (32 / group) - 1) / (32 / group);  // one tile per warp trip
  const int grid = grid_size((tiles + kThreads / 32 - 1) / (kThreads / 32), &err);
  if (err != 0) return err;
  const bool vec = aligned(in, 16) && aligned(packed, 4);
  return launch_typed(in_dtype, stream, [&](auto tag, cudaStream_t st) {
    using InT = typename decltype(tag)::type;
    dispatch_quantize<InT>(in, n, blocksize, quant_type, group, packed, absmax, vec, grid, st);
  });
}

const char* error_string(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}

}  // namespace cuda
}  // namespace luatune
