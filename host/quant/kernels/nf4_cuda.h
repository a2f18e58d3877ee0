// CUDA kernels for bitsandbytes' 4-bit formats (host/quant/nf4.h states the rules they follow,
// bit for bit). Plain C++ interface, no CUDA or Torch headers: streams are cudaStream_t passed as
// void*, and every call returns 0 or a cudaError_t value (error_string names it).
// Built when nvcc is found (CPU machines compile them so CI catches errors); called by
// host/quant/quant.cpp only in builds against a CUDA LibTorch (LUATUNE_HAS_CUDA).
#pragma once

#include <cstdint>

namespace luatune {
namespace cuda {

enum class Dtype : int { f32 = 0, bf16 = 1, f16 = 2 };

// The per-block scale: either plain float32 absmax[num_blocks], or double-quantized:
// absmax_q[num_blocks] uint8 codes into nested_code[256], nested_absmax[ceil(num_blocks /
// nested_blocksize)] float32 and offset. Exactly one of absmax / absmax_q is non-null.
struct BlockScale {
  const float* absmax = nullptr;
  const uint8_t* absmax_q = nullptr;
  const float* nested_code = nullptr;  // device pointer, 256 floats
  const float* nested_absmax = nullptr;
  int64_t nested_blocksize = 256;
  float offset = 0.0f;
};

// packed[(n + 1) / 2] (device) -> out[n] (device) in out_dtype. quant_type: 0 NF4, 1 FP4.
int dequantize_4bit(const uint8_t* packed, int64_t n, int64_t blocksize, int quant_type,
                    const BlockScale& scale, void* out, Dtype out_dtype, void* stream);

// in[n] (device, in_dtype) -> packed[(n + 1) / 2], absmax[num_blocks] (device), float32 absmax.
int quantize_4bit(const void* in, Dtype in_dtype, int64_t n, int64_t blocksize, int quant_type,
                  uint8_t* packed, float* absmax, void* stream);

const char* error_string(int code);

}  // namespace cuda
}  // namespace luatune
