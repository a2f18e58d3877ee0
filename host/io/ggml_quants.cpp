// ggml's tensor types as bytes (see gguf.h): fp16/bf16 conversions and the reference block
// quantizations q8_0, q4_0, q4_K and q6_K, written from the formulas in docs/gguf.md. The float
// operations follow ggml's reference order exactly (this file is built without FMA contraction),
// because the rounding of every intermediate decides which integer a weight lands on.
#include <ATen/Parallel.h>

#include <cmath>
#include <cstring>

#include "host/core/enum_names.h"
#include "host/core/error.h"
#include "host/core/strings.h"
#include "host/io/gguf.h"

namespace luatune {

// ---------------------------------------------------------------------------------------------
// Types

namespace {

// Every type luatune reads: its name, elements per block, bytes per block, and whether it writes it.
struct GgmlTypeRow {
  GgmlType value;
  const char* name;
  int64_t block, bytes;
  bool writes;
};
const GgmlTypeRow kGgmlTypes[] = {
    {GgmlType::F32, "f32", 1, 4, true},
    {GgmlType::F16, "f16", 1, 2, true},
    {GgmlType::BF16, "bf16", 1, 2, true},
    {GgmlType::Q8_0, "q8_0", 32, 2 + 32, true},                   // d, qs[32]
    {GgmlType::Q4_0, "q4_0", 32, 2 + 16, true},                   // d, qs[16]
    {GgmlType::Q4_1, "q4_1", 32, 2 + 2 + 16, false},              // d, m, qs[16]
    {GgmlType::Q5_0, "q5_0", 32, 2 + 4 + 16, false},              // d, qh[4], qs[16]
    {GgmlType::Q5_1, "q5_1", 32, 2 + 2 + 4 + 16, false},          // d, m, qh[4], qs[16]
    {GgmlType::Q2_K, "q2_K", 256, 16 + 64 + 2 + 2, false},        // scales[16], qs[64], d, dmin
    {GgmlType::Q3_K, "q3_K", 256, 32 + 64 + 12 + 2, false},       // hmask[32], qs[64], scales[12], d
    {GgmlType::Q4_K, "q4_K", 256, 2 + 2 + 12 + 128, true},        // d, dmin, scales[12], qs[128]
    {GgmlType::Q5_K, "q5_K", 256, 2 + 2 + 12 + 32 + 128, false},  // d, dmin, scales[12], qh[32], qs[128]
    {GgmlType::Q6_K, "q6_K", 256, 128 + 64 + 16 + 2, true},       // ql[128], qh[64], scales[16], d
};

const GgmlTypeRow& ggml_type_row(GgmlType t) {
  for (const GgmlTypeRow& row : kGgmlTypes)
    if (row.value == t) return row;
  fail_internal(__FILE__, __LINE__, "unknown GgmlType " + std::to_string(uint32_t(t)));
}

std::string ascii_lower(std::string s) {
  for (char& c : s) c = (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c;
  return s;
}

}  // namespace

const char* ggml_type_name(GgmlType t) {
  return enum_name(kGgmlTypes, t);
}

GgmlType ggml_type_parse(const std::string& name) {
  const std::string lower = ascii_lower(name);  // "Q4_K" and "q4_k" name q4_K
  std::vector<std::string> names;
  bool read_only = false;
  for (const GgmlTypeRow& row : kGgmlTypes) {
    if (lower != ascii_lower(row.name)) {
      if (row.writes) names.push_back(ascii_lower(row.name));
    } else if (row.writes) {
      return row.value;
    } else {
      read_only = true;
    }
  }
  const std::string last = names.back();
  names.pop_back();
  const std::string expected = " (expected " + str_join(names, ", ") + " or " + last + ")";
  if (read_only) fail_usage("GGUF tensor type '" + name + "' is read by luatune but not written" + expected);
  fail_usage("unknown GGUF tensor type '" + name + "'" + expected);
}

bool ggml_type_writes(GgmlType t) {
  return ggml_type_row(t).writes;
}

int64_t ggml_block_size(GgmlType t) {
  return ggml_type_row(t).block;
}

int64_t ggml_type_bytes(GgmlType t) {
  return ggml_type_row(t).bytes;
}

int64_t ggml_row_bytes(GgmlType t, int64_t n) {
  int64_t bs = ggml_block_size(t);
  if (n < 0 || n % bs != 0) {
    fail(std::string("ggml ") + ggml_type_name(t) + ": " + std::to_string(n) +
         " elements is not a multiple of its block size " + std::to_string(bs));
  }
  return n / bs * ggml_type_bytes(t);
}

// ---------------------------------------------------------------------------------------------
// fp16 / bf16

static uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float f32_from(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t ggml_fp32_to_fp16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7fffffff;
  if (ax > 0x7f800000) return sign | 0x7e00;   // NaN
  if (ax >= 0x47800000) return sign | 0x7c00;  // >= 65536 (and inf): inf
  const uint32_t e = ax >> 23;
  if (e >= 113) {  // a normal half: rebias the exponent, round 13 mantissa bits to nearest even
    uint32_t h = ((e - 112) << 10) | ((ax & 0x7fffff) >> 13);
    const uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h += 1;  // a carry may reach inf: correct
    return sign | uint16_t(h);
  }
  // A half subnormal (units of 2^-24): the float's significand shifted right, rounded to even.
  const uint32_t shift = 126 - e;  // >= 14
  if (shift > 24) return sign;     // below 2^-25: rounds to zero
  const uint32_t m = (ax & 0x7fffff) | 0x800000;
  uint32_t h = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1))) h += 1;
  return sign | uint16_t(h);
}

float ggml_fp16_to_fp32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0x1f) return f32_from(sign | 0x7f800000 | (m << 13));
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact in float
    float v = float(m) * f32_from(0x33800000);
    return sign ? -v : v;
  }
  return f32_from(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t ggml_fp32_to_bf16(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x40);  // NaN: keep, make quiet
  return uint16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

float ggml_bf16_to_fp32(uint16_t h) {
  return f32_from(uint32_t(h) << 16);
}

// ---------------------------------------------------------------------------------------------
// Block helpers

namespace {

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: below it a group counts as zero

// ggml's nearest_int: adding 1.5 * 2^23 leaves round-half-to-even of fval in the low mantissa
// bits (valid for |fval| < 2^22, which every caller below stays within).
int nearest_int(float fval) {
  const float val = fval + 12582912.f;
  int32_t i;
  std::memcpy(&i, &val, 4);
  return (i & 0x007fffff) - 0x00400000;
}

void put_u16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
uint16_t get_u16(const uint8_t* p) {
  return uint16_t(p[0] | (p[1] << 8));
}

// q8_0: 32 values, d = amax / 127, q = round(x / d) (C roundf: halves away from zero).
void quantize_q8_0(const float* x, uint8_t* y) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float a = std::fabs(x[j]);
    amax = amax > a ? amax : a;
  }
  const float d = amax / 127;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_u16(y, ggml_fp32_to_fp16(d));
  for (int j = 0; j < 32; ++j) y[2 + j] = uint8_t(int8_t(std::round(x[j] * id)));
}

// q4_0: 32 values, d = (the value of largest magnitude, signed) / -8, q = min(15, trunc(x/d + 8.5));
// byte j holds element j in its low nibble and element j + 16 in its high nibble.
void quantize_q4_0(const float* x, uint8_t* y) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_u16(y, ggml_fp32_to_fp16(d));
  for (int j = 0; j < 16; ++j) {
    const int8_t a = int8_t(x[j] * id + 8.5f), b = int8_t(x[j + 16] * id + 8.5f);
    const uint8_t q0 = uint8_t(a < 15 ? a : 15), q1 = uint8_t(b < 15 ? b : 15);
    y[2 + j] = uint8_t(q0 | (q1 << 4));
  }
}

// ggml's make_qkx2_quants: the scale and (negated) min of an affine nmax-level grid for n values,
// searched over nstep + 1 candidate scales by weighted squared (or absolute) error.
float make_qkx2_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * (x[i] - min));
    L[i] = uint8_t(l < 0 ? 0 : l > nmax ? nmax : l);
    float diff = scale * L[i] + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_error += w[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = l < 0 ? 0 : l > nmax ? nmax : l;
      Laux[i] = uint8_t(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * Laux[i] + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        cur_error += w[i] * diff;
      }
      if (cur_error < best_error) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// The 6-bit scale and min of sub-block j (0..7) from q4_K's 12 packed bytes (get_scale_min_k4).
void scale_min_k4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = uint8_t((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// q4_K: 256 values as 8 sub-blocks of 32, each x ~ d*sc*q - dmin*m with 4-bit q and 6-bit sc, m.
void quantize_q4_K(const float* x, uint8_t* y) {
  uint8_t L[256], Laux[32];
  float weights[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = make_qkx2_quants(32, 15, xs, weights, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  uint8_t* sc = y + 4;
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = uint8_t(nearest_int(inv_scale * scales[j]));
    uint8_t lm = uint8_t(nearest_int(inv_min * mins[j]));
    ls = ls < 63 ? ls : 63;
    lm = lm < 63 ? lm : 63;
    if (j < 4) {
      sc[j] = ls;
      sc[j + 4] = lm;
    } else {
      sc[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
      sc[j - 4] |= uint8_t((ls >> 4) << 6);
      sc[j] |= uint8_t((lm >> 4) << 6);
    }
  }
  const uint16_t dh = ggml_fp32_to_fp16(max_scale / 63.f), mh = ggml_fp32_to_fp16(max_min / 63.f);
  put_u16(y, dh);
  put_u16(y + 2, mh);
  // Requantize against the rounded scales; a sub-block whose scale rounds to 0 keeps its levels.
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    scale_min_k4(j, sc, &s, &m);
    const float d = ggml_fp16_to_fp32(dh) * s;
    if (d == 0.0f) continue;
    const float dm = ggml_fp16_to_fp32(mh) * m;
    for (int i = 0; i < 32; ++i) {
      const int l = nearest_int((x[32 * j + i] + dm) / d);
      L[32 * j + i] = uint8_t(l < 0 ? 0 : l > 15 ? 15 : l);
    }
  }
  // qs: each 64-value chunk is 32 bytes, value l in the low nibble, value l + 32 in the high one.
  uint8_t* q = y + 16;
  for (int j = 0; j < 256; j += 64, q += 32) {
    for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
  }
}

// ggml's make_qx_quants for q6_K's case (rmse_type 1, no importance weights: w = x^2): a symmetric
// grid of 2*nmax levels, scale refined over 18 nearby candidates by weighted least squares.
float make_qx_quants_rmse1(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.f;
  }
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    int l = nearest_int(iscale * x[i]);
    l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
    L[i] = int8_t(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
        L[i] = int8_t(l + nmax);
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// q6_K: 256 values as 16 sub-blocks of 16, x ~ d * scale(int8) * (q - 32) with 6-bit q.
// Layout: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (int8), d (fp16).
void quantize_q6_K(const float* x, uint8_t* y) {
  int8_t L[256];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    const float scale = make_qx_quants_rmse1(16, 32, x + 16 * ib, L + 16 * ib);
    scales[ib] = scale;
    const float abs_scale = std::fabs(scale);
    if (abs_scale > max_abs_scale) {
      max_abs_scale = abs_scale;
      max_scale = scale;
    }
  }
  if (max_abs_scale < kGroupMaxEps) {
    std::memset(y, 0, 210);
    return;
  }
  uint8_t* ql = y;
  uint8_t* qh = y + 128;
  int8_t* sc = reinterpret_cast<int8_t*>(y + 192);
  const float iscale = -128.f / max_scale;
  const uint16_t dh = ggml_fp32_to_fp16(1 / iscale);
  put_u16(y + 208, dh);
  for (int ib = 0; ib < 16; ++ib) {
    const int s = nearest_int(iscale * scales[ib]);
    sc[ib] = int8_t(s < 127 ? s : 127);
  }
  for (int j = 0; j < 16; ++j) {
    const float d = ggml_fp16_to_fp32(dh) * sc[j];
    if (d == 0.0f) continue;
    for (int i = 0; i < 16; ++i) {
      int l = nearest_int(x[16 * j + i] / d);
      l = l < -32 ? -32 : l > 31 ? 31 : l;
      L[16 * j + i] = int8_t(l + 32);
    }
  }
  // Each 128-value half: ql[l] = v[l] | v[l+64] << 4, ql[l+32] = v[l+32] | v[l+96] << 4, and
  // qh[l] the top two bits of v[l], v[l+32], v[l+64], v[l+96] at bits 0, 2, 4, 6.
  for (int j = 0; j < 256; j += 128, ql += 64, qh += 32) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* v = reinterpret_cast<const uint8_t*>(L + j + l);
      ql[l] = uint8_t((v[0] & 0xF) | ((v[64] & 0xF) << 4));
      ql[l + 32] = uint8_t((v[32] & 0xF) | ((v[96] & 0xF) << 4));
      qh[l] = uint8_t((v[0] >> 4) | ((v[32] >> 4) << 2) | ((v[64] >> 4) << 4) | ((v[96] >> 4) << 6));
    }
  }
}

// Dequantization, one block each (ggml's dequantize_row_*).
void dequantize_block(GgmlType t, const uint8_t* b, float* y) {
  switch (t) {
    case GgmlType::F32:
      std::memcpy(y, b, 4);
      return;
    case GgmlType::F16:
      *y = ggml_fp16_to_fp32(get_u16(b));
      return;
    case GgmlType::BF16:
      *y = ggml_bf16_to_fp32(get_u16(b));
      return;
    case GgmlType::Q8_0: {
      const float d = ggml_fp16_to_fp32(get_u16(b));
      for (int j = 0; j < 32; ++j) y[j] = int8_t(b[2 + j]) * d;
      return;
    }
    case GgmlType::Q4_0: {
      const float d = ggml_fp16_to_fp32(get_u16(b));
      for (int j = 0; j < 16; ++j) {
        y[j] = ((b[2 + j] & 0xF) - 8) * d;
        y[j + 16] = ((b[2 + j] >> 4) - 8) * d;
      }
      return;
    }
    case GgmlType::Q4_1: {  // x = q * d + m
      const float d = ggml_fp16_to_fp32(get_u16(b)), m = ggml_fp16_to_fp32(get_u16(b + 2));
      for (int j = 0; j < 16; ++j) {
        y[j] = (b[4 + j] & 0xF) * d + m;
        y[j + 16] = (b[4 + j] >> 4) * d + m;
      }
      return;
    }
    case GgmlType::Q5_0:
    case GgmlType::Q5_1: {  // 5-bit q: the low 4 bits as q4_*, bit 4 of element j is bit j of qh
      const bool affine = t == GgmlType::Q5_1;
      const float d = ggml_fp16_to_fp32(get_u16(b));
      const float m = affine ? ggml_fp16_to_fp32(get_u16(b + 2)) : 0.0f;
      const uint8_t* p = b + (affine ? 4 : 2);
      const uint32_t qh = uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
      const uint8_t* qs = p + 4;
      for (int j = 0; j < 16; ++j) {
        const int h0 = int((qh >> j) << 4) & 0x10, h1 = int(qh >> (j + 12)) & 0x10;
        const int x0 = (qs[j] & 0xF) | h0, x1 = (qs[j] >> 4) | h1;
        if (affine) {
          y[j] = x0 * d + m;
          y[j + 16] = x1 * d + m;
        } else {
          y[j] = (x0 - 16) * d;
          y[j + 16] = (x1 - 16) * d;
        }
      }
      return;
    }
    case GgmlType::Q2_K: {  // 16 sub-blocks of 16: x = d * (sc & 15) * q - dmin * (sc >> 4), 2-bit q
      const uint8_t* sc = b;
      const uint8_t* q = b + 16;
      const float d = ggml_fp16_to_fp32(get_u16(b + 80)), dmin = ggml_fp16_to_fp32(get_u16(b + 82));
      int is = 0;
      for (int n = 0; n < 256; n += 128, q += 32) {
        for (int shift = 0; shift < 8; shift += 2) {
          for (int half = 0; half < 2; ++half) {
            const uint8_t s = sc[is++];
            const float dl = d * (s & 0xF), ml = dmin * (s >> 4);
            for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l + 16 * half] >> shift) & 3) - ml;
          }
        }
      }
      return;
    }
    case GgmlType::Q3_K: {  // 16 sub-blocks of 16: x = d * (scale - 32) * (q - (high bit ? 0 : 4)), 2+1-bit q
      const uint8_t* hm = b;
      const uint8_t* q = b + 32;
      const uint8_t* packed = b + 96;  // 16 6-bit scales in 12 bytes
      const float d = ggml_fp16_to_fp32(get_u16(b + 108));
      int8_t scales[16];
      for (int j = 0; j < 16; ++j) {
        const int low = j < 8 ? (packed[j] & 0xF) : (packed[j - 8] >> 4);
        const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
        scales[j] = int8_t(low | (high << 4));
      }
      int is = 0;
      uint8_t mask = 1;
      for (int n = 0; n < 256; n += 128, q += 32) {
        for (int shift = 0; shift < 8; shift += 2, mask <<= 1) {
          for (int half = 0; half < 2; ++half) {
            const float dl = d * (scales[is++] - 32);
            for (int l = 0; l < 16; ++l) {
              const int k = l + 16 * half;
              *y++ = dl * (int((q[k] >> shift) & 3) - ((hm[k] & mask) ? 0 : 4));
            }
          }
        }
      }
      return;
    }
    case GgmlType::Q5_K: {  // as q4_K, with a fifth bit from qh
      const float d = ggml_fp16_to_fp32(get_u16(b)), dmin = ggml_fp16_to_fp32(get_u16(b + 2));
      const uint8_t* qh = b + 16;
      const uint8_t* ql = b + 48;
      uint8_t u1 = 1, u2 = 2;
      for (int j = 0; j < 4; ++j, ql += 32, u1 <<= 2, u2 <<= 2) {
        uint8_t s, m;
        scale_min_k4(2 * j, b + 4, &s, &m);
        const float d1 = d * s, m1 = dmin * m;
        scale_min_k4(2 * j + 1, b + 4, &s, &m);
        const float d2 = d * s, m2 = dmin * m;
        for (int l = 0; l < 32; ++l) y[64 * j + l] = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; ++l) y[64 * j + 32 + l] = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      }
      return;
    }
    case GgmlType::Q4_K: {
      const float d = ggml_fp16_to_fp32(get_u16(b)), dmin = ggml_fp16_to_fp32(get_u16(b + 2));
      const uint8_t* q = b + 16;
      for (int j = 0; j < 4; ++j, q += 32) {
        uint8_t s, m;
        scale_min_k4(2 * j, b + 4, &s, &m);
        const float d1 = d * s, m1 = dmin * m;
        scale_min_k4(2 * j + 1, b + 4, &s, &m);
        const float d2 = d * s, m2 = dmin * m;
        for (int l = 0; l < 32; ++l) y[64 * j + l] = d1 * (q[l] & 0xF) - m1;
        for (int l = 0; l < 32; ++l) y[64 * j + 32 + l] = d2 * (q[l] >> 4) - m2;
      }
      return;
    }
    case GgmlType::Q6_K: {
      const float d = ggml_fp16_to_fp32(get_u16(b + 208));
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
      for (int h = 0; h < 2; ++h, ql += 64, qh += 32, sc += 8, y += 128) {
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
          const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          y[l] = d * sc[is] * q1;
          y[l + 32] = d * sc[is + 2] * q2;
          y[l + 64] = d * sc[is + 4] * q3;
          y[l + 96] = d * sc[is + 6] * q4;
        }
      }
      return;
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Rows

void ggml_quantize_into(GgmlType t, const float* values, int64_t n, char* out) {
  const int64_t bytes = ggml_row_bytes(t, n);  // checks n against the block size
  (void)bytes;
  uint8_t* y = reinterpret_cast<uint8_t*>(out);
  switch (t) {
    case GgmlType::F32:
      std::memcpy(out, values, size_t(n) * 4);  // little-endian hosts only (x86-64, aarch64)
      return;
    case GgmlType::F16:
    case GgmlType::BF16: {
      const bool half = t == GgmlType::F16;
      at::parallel_for(0, n, 1 << 16, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          put_u16(y + 2 * i, half ? ggml_fp32_to_fp16(values[i]) : ggml_fp32_to_bf16(values[i]));
        }
      });
      return;
    }
    default:
      break;
  }
  LT_CHECK(ggml_type_writes(t), "ggml: luatune reads " << ggml_type_name(t) << " but does not write it");
  const int64_t bs = ggml_block_size(t), tb = ggml_type_bytes(t);
  void (*fn)(const float*, uint8_t*) = t == GgmlType::Q8_0   ? quantize_q8_0
                                       : t == GgmlType::Q4_0 ? quantize_q4_0
                                       : t == GgmlType::Q4_K ? quantize_q4_K
                                                             : quantize_q6_K;
  // Blocks are independent, so splitting them over threads gives the same bytes.
  const int64_t grain = t == GgmlType::Q4_K || t == GgmlType::Q6_K ? 64 : 1024;
  at::parallel_for(0, n / bs, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) fn(values + b * bs, y + b * tb);
  });
}

std::string ggml_quantize(GgmlType t, const float* values, int64_t n) {
  std::string out(size_t(ggml_row_bytes(t, n)), '\0');
  ggml_quantize_into(t, values, n, &out[0]);
  return out;
}

std::vector<float> ggml_dequantize(GgmlType t, const std::string& bytes, int64_t n) {
  const int64_t need = ggml_row_bytes(t, n);
  if (int64_t(bytes.size()) != need) {
    fail(std::string("ggml ") + ggml_type_name(t) + ": " + std::to_string(n) + " elements take " +
         std::to_string(need) + " bytes, got " + std::to_string(bytes.size()));
  }
  std::vector<float> out(static_cast<size_t>(n));
  const int64_t bs = ggml_block_size(t), tb = ggml_type_bytes(t);
  const uint8_t* b = reinterpret_cast<const uint8_t*>(bytes.data());
  for (int64_t i = 0; i < n / bs; ++i) dequantize_block(t, b + i * tb, out.data() + i * bs);
  return out;
}

}  // namespace luatune
