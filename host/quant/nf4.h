// bitsandbytes' 4-bit (NF4 / FP4) and 8-bit blockwise quantization on plain arrays: the CPU
// reference every kernel is tested against, bit for bit. No Torch here: host/quant/quant.h wraps
// these for tensors and builds the 8-bit dynamic map (its float32 arithmetic is Torch's).
// Constants and rules, with their bitsandbytes sources: docs/qlora.md, "Sources".
//
// The rules, as bitsandbytes' CUDA kernels apply them:
//   4-bit quantize: values are taken in float32 (bf16/fp16 inputs convert exactly); per block of
//     `blocksize` consecutive values absmax = max |x| (float32, the last block may be partial);
//     each value is scaled by multiplying with r = 1.0f / absmax (not divided), then coded by the
//     NF4 or FP4 decision tree (quantize_nf4_value / quantize_fp4_value). An all-zero block has
//     absmax 0, r = inf, x * r = NaN, which the trees code as 0 (NF4: -1.0 * 0 = 0 on the way back).
//   packing: two codes per byte, the even-index value in the high nibble; an odd count gets a zero
//     low nibble in the last byte. packed has (n + 1) / 2 bytes.
//   4-bit dequantize: out[i] = code[q[i]] * absmax[i / blocksize] in float32 (one rounding), then
//     cast to the output dtype with round-to-nearest-even.
//   8-bit blockwise (double quantization of the absmax): per block of `blocksize` (256) values
//     absmax = max |x|, r = 1.0f / absmax, q = the index of the nearest of the 256 sorted code
//     values to x * r (quantize_8bit_value: bitsandbytes' binary search, ties as it breaks them);
//     dequantize: out = code[q] * absmax (float32).
//   double quantization: offset = mean(absmax) (float32); qabsmax, nested_absmax = quantize_8bit(
//     absmax - offset, 256, the dynamic map); the block scale used by 4-bit dequantize is then
//     (code8[qabsmax[b]] * nested_absmax[b / 256]) + offset, a float32 multiply then a float32
//     add (two roundings, never a fused multiply-add).
#pragma once

#include <cstdint>

namespace luatune {
namespace nf4 {

enum class QuantType : int { nf4 = 0, fp4 = 1 };

// The 16 code values of each type (index = 4-bit code), float32, as bitsandbytes' quant_map.
extern const float kNF4Code[16];
extern const float kFP4Code[16];
inline const float* code4(QuantType t) {
  return t == QuantType::nf4 ? kNF4Code : kFP4Code;
}

// The 4-bit code of one scaled value (x = value * (1 / absmax), nominally in [-1, 1]).
uint8_t quantize_nf4_value(float x);
uint8_t quantize_fp4_value(float x);
inline uint8_t quantize_4bit_value(QuantType t, float x) {
  return t == QuantType::nf4 ? quantize_nf4_value(x) : quantize_fp4_value(x);
}
// The index of the code value nearest x in a sorted 256-value code (bitsandbytes' dQuantize).
uint8_t quantize_8bit_value(const float* code256, float x);

inline int64_t num_blocks(int64_t n, int64_t blocksize) {
  return (n + blocksize - 1) / blocksize;
}

// n values -> packed[(n + 1) / 2], absmax[num_blocks(n, blocksize)].
void quantize_4bit(const float* in, int64_t n, int64_t blocksize, QuantType type, uint8_t* packed,
                   float* absmax);
// packed + float32 absmax -> out[n] float32.
void dequantize_4bit(const uint8_t* packed, const float* absmax, int64_t n, int64_t blocksize, QuantType type,
                     float* out);
// n values -> q[n], absmax[num_blocks(n, blocksize)], with a 256-value code.
void quantize_8bit(const float* in, int64_t n, int64_t blocksize, const float* code256, uint8_t* q,
                   float* absmax);
// q + absmax -> out[n] float32; when `offset` is given, out = code[q] * absmax + offset (two roundings).
void dequantize_8bit(const uint8_t* q, const float* absmax, int64_t n, int64_t blocksize,
                     const float* code256, float* out, float offset = 0.0f);

}  // namespace nf4
}  // namespace luatune
