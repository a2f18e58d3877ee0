// The CPU reference for bitsandbytes' blockwise 4-bit and 8-bit quantization (rules: nf4.h).
// Compiled with -ffp-contract=off (CMakeLists.txt) so that no multiply-add is fused: the two
// roundings of the double-quantized scale are part of the format.
#include "host/quant/nf4.h"

#include "host/quant/nf4_tables.h"

#include <algorithm>
#include <cmath>

namespace luatune {
namespace nf4 {

const float kNF4Code[16] = {LUATUNE_NF4_CODE};
const float kFP4Code[16] = {LUATUNE_FP4_CODE};

namespace {
const float kNF4Thresholds[15] = {LUATUNE_NF4_THRESHOLDS};
const float kFP4Thresholds[7] = {LUATUNE_FP4_THRESHOLDS};
}  // namespace

uint8_t quantize_nf4_value(float x) {
  // The tree is a binary search over these thresholds; counting them gives the same code.
  uint8_t k = 0;
  for (float t : kNF4Thresholds) k += x > t ? 1 : 0;
  return k;
}

uint8_t quantize_fp4_value(float x) {
  // kernels.cu dQuantizeFP4: sign bit 3, the tree on |x| picks the magnitude code.
  const float* t = kFP4Thresholds;
  const uint8_t sign = x < 0 ? 0x8 : 0x0;
  x = std::fabs(x);
  uint8_t m;
  if (x > t[3])
    m = x > t[5] ? (x > t[6] ? 0x3 : 0x2) : (x > t[4] ? 0x5 : 0x4);
  else
    m = x > t[1] ? (x > t[2] ? 0x7 : 0x6) : (x > t[0] ? 0x1 : 0x0);
  return static_cast<uint8_t>(m + sign);
}

uint8_t quantize_8bit_value(const float* code, float x) {
  // kernels.cu dQuantize (not stochastic): a 7-step binary search from the middle of the sorted
  // code, then the nearer of the last value and its bracketing neighbour.
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float lower = -1.0f, upper = 1.0f;
  float val = code[pivot];
  for (int i = 64; i > 0; i >>= 1) {
    if (x > val) {
      lower_pivot = pivot;
      lower = val;
      pivot += i;
    } else {
      upper_pivot = pivot;
      upper = val;
      pivot -= i;
    }
    val = code[pivot];
  }
  if (upper_pivot == 255) upper = code[upper_pivot];
  if (lower_pivot == 0) lower = code[lower_pivot];
  if (x > val) {
    float midpoint = (upper + val) * 0.5f;
    return static_cast<uint8_t>(x > midpoint ? upper_pivot : pivot);
  }
  float midpoint = (lower + val) * 0.5f;
  return static_cast<uint8_t>(x < midpoint ? lower_pivot : pivot);
}

namespace {

// Blockwise scaling, shared by both widths: for each block [begin, end) of `in`, stores its
// absolute maximum in absmax[block] and calls quantize(begin, end, r) with r = 1 / absmax.
template <class Quantize>
void for_each_scaled_block(const float* in, int64_t n, int64_t blocksize, float* absmax, Quantize quantize) {
  const int64_t blocks = num_blocks(n, blocksize);
  for (int64_t b = 0; b < blocks; b++) {
    const int64_t begin = b * blocksize, end = std::min(n, begin + blocksize);
    float m = 0.0f;
    for (int64_t i = begin; i < end; i++) m = std::max(m, std::fabs(in[i]));
    absmax[b] = m;
    quantize(begin, end, 1.0f / m);
  }
}

}  // namespace

void quantize_4bit(const float* in, int64_t n, int64_t blocksize, QuantType type, uint8_t* packed,
                   float* absmax) {
  for_each_scaled_block(in, n, blocksize, absmax, [&](int64_t begin, int64_t end, float r) {
    // A block starts on an even index whenever blocksize is even (bitsandbytes allows only
    // powers of two >= 32), so a byte never straddles two blocks.
    for (int64_t i = begin; i < end; i += 2) {
      uint8_t hi = quantize_4bit_value(type, in[i] * r);
      uint8_t lo = i + 1 < end ? quantize_4bit_value(type, in[i + 1] * r) : 0;
      packed[i / 2] = static_cast<uint8_t>((hi << 4) | lo);
    }
  });
}

void dequantize_4bit(const uint8_t* packed, const float* absmax, int64_t n, int64_t blocksize, QuantType type,
                     float* out) {
  const float* code = code4(type);
  // Block by block, byte by byte (blocks start on even indices: blocksize is even).
  for (int64_t begin = 0; begin < n; begin += blocksize) {
    const float scale = absmax[begin / blocksize];
    const int64_t end = std::min(n, begin + blocksize);
    int64_t i = begin;
    for (; i + 1 < end; i += 2) {
      const uint8_t byte = packed[i / 2];
      out[i] = code[byte >> 4] * scale;
      out[i + 1] = code[byte & 0x0F] * scale;
    }
    if (i < end) out[i] = code[packed[i / 2] >> 4] * scale;
  }
}

void quantize_8bit(const float* in, int64_t n, int64_t blocksize, const float* code256, uint8_t* q,
                   float* absmax) {
  for_each_scaled_block(in, n, blocksize, absmax, [&](int64_t begin, int64_t end, float r) {
    for (int64_t i = begin; i < end; i++) q[i] = quantize_8bit_value(code256, in[i] * r);
  });
}

void dequantize_8bit(const uint8_t* q, const float* absmax, int64_t n, int64_t blocksize,
                     const float* code256, float* out, float offset) {
  for (int64_t i = 0; i < n; i++) {
    float v = code256[q[i]] * absmax[i / blocksize];
    out[i] = v + offset;
  }
}

}  // namespace nf4
}  // namespace luatune
