// GGUF: every block quantization against an independent, straightforward implementation of
// ggml's reference formulas written here (fp16 through c10::Half, rounding through std::nearbyint,
// not through host/io), dequantization error bounds, a tiny file's bytes checked by hand against
// the spec, full write/read round trips, and the atomic-write and malformed-file errors.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/io/gguf.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------------------------------------
// The reference: ggml's formulas (ggml/src/ggml-quants.c, docs/gguf.md), one block at a time.

uint16_t ref_half(float f) {
  return c10::Half(f).x;
}
float ref_unhalf(uint16_t h) {
  return static_cast<float>(c10::Half(h, c10::Half::from_bits()));
}
int ref_round_even(float f) {
  return static_cast<int>(std::nearbyint(f));
}  // = ggml's nearest_int
int clampi(int v, int lo, int hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

void push_half(std::vector<uint8_t>& b, uint16_t h) {
  b.push_back(h & 0xff);
  b.push_back(h >> 8);
}

std::vector<uint8_t> ref_q8_0(const float* x) {
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float inv = d == 0.0f ? 0.0f : 1.0f / d;
  std::vector<uint8_t> b;
  push_half(b, ref_half(d));
  for (int i = 0; i < 32; ++i) b.push_back(static_cast<uint8_t>(static_cast<int>(std::round(x[i] * inv))));
  return b;
}

std::vector<uint8_t> ref_q4_0(const float* x) {
  int k = 0;  // the first element of largest magnitude
  for (int i = 1; i < 32; ++i) {
    if (std::fabs(x[i]) > std::fabs(x[k])) k = i;
  }
  const float d = x[k] / -8.0f;
  const float inv = d == 0.0f ? 0.0f : 1.0f / d;
  int q[32];
  for (int i = 0; i < 32; ++i) q[i] = std::min(15, static_cast<int>(std::trunc(x[i] * inv + 8.5f)));
  std::vector<uint8_t> b;
  push_half(b, ref_half(d));
  for (int i = 0; i < 16; ++i) b.push_back(static_cast<uint8_t>(q[i] | (q[i + 16] << 4)));
  return b;
}

// make_qkx2_quants: returns {scale, -min} and the levels.
std::pair<float, float> ref_qkx2(const float* x, const float* w, int n, int nmax, float rmin, float rdelta,
                                 int nstep, std::vector<int>& levels) {
  float lo = x[0], hi = x[0], sw = w[0], sx = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sw += w[i];
    sx += w[i] * x[i];
  }
  lo = std::min(lo, 0.0f);
  levels.assign(n, 0);
  if (hi == lo) return {0.0f, -lo};
  // ggml moves the grid's origin to each better candidate's min as it searches, so later
  // candidates are measured from it: `mn` below is both the answer and the current origin.
  float scale = 1 / (nmax / (hi - lo)), mn = lo;
  auto quantize_at = [&](float iscale, std::vector<int>& out) {
    for (int i = 0; i < n; ++i) out[i] = clampi(ref_round_even(iscale * (x[i] - mn)), 0, nmax);
  };
  quantize_at(nmax / (hi - lo), levels);
  float best = 0;
  for (int i = 0; i < n; ++i) {
    const float e = scale * levels[i] + lo - x[i];
    best += w[i] * (e * e);
  }
  std::vector<int> trial(n);
  for (int s = 0; s <= nstep; ++s) {
    quantize_at((rmin + rdelta * s + nmax) / (hi - mn), trial);
    float sl = 0, sl2 = 0, sxl = 0;
    for (int i = 0; i < n; ++i) {
      sl += w[i] * trial[i];
      sl2 += w[i] * trial[i] * trial[i];
      sxl += w[i] * trial[i] * x[i];
    }
    const float det = sw * sl2 - sl * sl;
    if (!(det > 0)) continue;
    float a = (sw * sxl - sx * sl) / det, m = (sl2 * sx - sl * sxl) / det;
    if (m > 0) {
      m = 0;
      a = sxl / sl2;
    }
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float e = a * trial[i] + m - x[i];
      err += w[i] * (e * e);
    }
    if (err < best) {
      best = err;
      levels = trial;
      scale = a;
      mn = m;
    }
  }
  return {scale, -mn};
}

std::vector<uint8_t> ref_q4_K(const float* x) {
  float sub_scale[8], sub_min[8];
  std::vector<int> L(256);
  for (int s = 0; s < 8; ++s) {
    const float* xs = x + 32 * s;
    float ss = 0;
    for (int i = 0; i < 32; ++i) ss += xs[i] * xs[i];
    const float av = std::sqrt(ss / 32);
    float w[32];
    for (int i = 0; i < 32; ++i) w[i] = av + std::fabs(xs[i]);
    std::vector<int> lv;
    auto r = ref_qkx2(xs, w, 32, 15, -1.0f, 0.1f, 20, lv);
    sub_scale[s] = r.first;
    sub_min[s] = r.second;
    std::copy(lv.begin(), lv.end(), L.begin() + 32 * s);
  }
  float max_scale = 0, max_min = 0;
  for (int s = 0; s < 8; ++s) {
    if (sub_scale[s] > max_scale) max_scale = sub_scale[s];
    if (sub_min[s] > max_min) max_min = sub_min[s];
  }
  const float is = max_scale > 0 ? 63.0f / max_scale : 0.0f, im = max_min > 0 ? 63.0f / max_min : 0.0f;
  int ls[8], lm[8];
  for (int s = 0; s < 8; ++s) {
    ls[s] = std::min(63, ref_round_even(is * sub_scale[s]) & 0xff);
    lm[s] = std::min(63, ref_round_even(im * sub_min[s]) & 0xff);
  }
  // The 12 scale bytes: 6-bit scales of sub-blocks 0-3 in bytes 0-3 and their mins in bytes 4-7;
  // sub-blocks 4-7 keep their low 4 bits in bytes 8-11 (scale low, min high nibble) and their top 2
  // bits in the top 2 bits of bytes 0-3 (scales) and 4-7 (mins).
  uint8_t sc[12];
  for (int s = 0; s < 4; ++s) {
    sc[s] = static_cast<uint8_t>(ls[s] | ((ls[s + 4] >> 4) << 6));
    sc[s + 4] = static_cast<uint8_t>(lm[s] | ((lm[s + 4] >> 4) << 6));
    sc[s + 8] = static_cast<uint8_t>((ls[s + 4] & 15) | ((lm[s + 4] & 15) << 4));
  }
  const uint16_t dh = ref_half(max_scale / 63.0f), mh = ref_half(max_min / 63.0f);
  for (int s = 0; s < 8; ++s) {
    const float d = ref_unhalf(dh) * ls[s];
    if (d == 0.0f) continue;
    const float dm = ref_unhalf(mh) * lm[s];
    for (int i = 0; i < 32; ++i) L[32 * s + i] = clampi(ref_round_even((x[32 * s + i] + dm) / d), 0, 15);
  }
  std::vector<uint8_t> b;
  push_half(b, dh);
  push_half(b, mh);
  b.insert(b.end(), sc, sc + 12);
  for (int c = 0; c < 4; ++c) {
    for (int i = 0; i < 32; ++i) b.push_back(static_cast<uint8_t>(L[64 * c + i] | (L[64 * c + 32 + i] << 4)));
  }
  return b;
}

// make_qx_quants with rmse_type 1 and no weights: returns the scale, levels in 0..2*nmax-1.
float ref_qx(const float* x, int n, int nmax, int* L) {
  int k = 0;
  for (int i = 1; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(x[k])) k = i;
  }
  const float mx = x[k];
  if (std::fabs(mx) < 1e-15f) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  auto sums = [&](float iscale, float& slx, float& sl2) {
    slx = 0;
    sl2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clampi(ref_round_even(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      slx += w * x[i] * l;
      sl2 += w * l * l;
    }
  };
  auto levels = [&](float iscale) {
    for (int i = 0; i < n; ++i) L[i] = clampi(ref_round_even(iscale * x[i]), -nmax, nmax - 1) + nmax;
  };
  float slx, sl2;
  sums(-nmax / mx, slx, sl2);
  levels(-nmax / mx);
  float scale = sl2 != 0 ? slx / sl2 : 0.0f, best = scale * slx;
  for (int t = -9; t <= 9; ++t) {
    if (t == 0) continue;
    const float iscale = -(nmax + 0.1f * t) / mx;
    sums(iscale, slx, sl2);
    if (sl2 > 0 && slx * slx > best * sl2) {
      levels(iscale);
      scale = slx / sl2;
      best = scale * slx;
    }
  }
  return scale;
}

std::vector<uint8_t> ref_q6_K(const float* x) {
  int L[256];
  float scales[16];
  int k = 0;
  for (int s = 0; s < 16; ++s) {
    scales[s] = ref_qx(x + 16 * s, 16, 32, L + 16 * s);
    if (std::fabs(scales[s]) > std::fabs(scales[k])) k = s;
  }
  if (std::fabs(scales[k]) < 1e-15f) return std::vector<uint8_t>(210, 0);
  const float iscale = -128.0f / scales[k];
  const uint16_t dh = ref_half(1 / iscale);
  int8_t sc[16];
  for (int s = 0; s < 16; ++s) sc[s] = static_cast<int8_t>(std::min(127, ref_round_even(iscale * scales[s])));
  for (int s = 0; s < 16; ++s) {
    const float d = ref_unhalf(dh) * sc[s];
    if (d == 0.0f) continue;
    for (int i = 0; i < 16; ++i) L[16 * s + i] = clampi(ref_round_even(x[16 * s + i] / d), -32, 31) + 32;
  }
  std::vector<uint8_t> ql(128), qh(64);
  for (int e = 0; e < 256; ++e) {
    const int half = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
    // low nibbles: quarters 0/1 in the low nibble of bytes l / l+32, quarters 2/3 in the high nibble
    const int qi = 64 * half + l + 32 * (quarter % 2);
    ql[qi] |= static_cast<uint8_t>((L[e] & 15) << (quarter >= 2 ? 4 : 0));
    qh[32 * half + l] |= static_cast<uint8_t>((L[e] >> 4) << (2 * quarter));
  }
  std::vector<uint8_t> b(ql);
  b.insert(b.end(), qh.begin(), qh.end());
  for (int s = 0; s < 16; ++s) b.push_back(static_cast<uint8_t>(sc[s]));
  push_half(b, dh);
  return b;
}

std::vector<uint8_t> ref_blocks(GgmlType t, const std::vector<float>& x) {
  const int bs = static_cast<int>(ggml_block_size(t));
  std::vector<uint8_t> out;
  for (size_t i = 0; i < x.size(); i += bs) {
    std::vector<uint8_t> b = t == GgmlType::Q8_0   ? ref_q8_0(&x[i])
                             : t == GgmlType::Q4_0 ? ref_q4_0(&x[i])
                             : t == GgmlType::Q4_K ? ref_q4_K(&x[i])
                                                   : ref_q6_K(&x[i]);
    out.insert(out.end(), b.begin(), b.end());
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Inputs

std::vector<float> gaussian(size_t n, float sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Named edge inputs of n elements (n a multiple of 256).
std::vector<std::pair<std::string, std::vector<float>>> edge_inputs(size_t n) {
  std::vector<std::pair<std::string, std::vector<float>>> cases;
  cases.push_back({"zeros", std::vector<float>(n, 0.0f)});
  cases.push_back({"all 0.37", std::vector<float>(n, 0.37f)});
  cases.push_back({"all -2.5", std::vector<float>(n, -2.5f)});
  cases.push_back({"huge", gaussian(n, 8000.0f, 11)});
  cases.push_back({"tiny 1e-6", gaussian(n, 1e-6f, 12)});
  cases.push_back({"subnormal-scale 1e-9", gaussian(n, 1e-9f, 13)});
  cases.push_back({"below eps 1e-17", gaussian(n, 1e-17f, 14)});
  std::vector<float> outlier = gaussian(n, 0.02f, 15);
  outlier[5] = 3.0f;
  outlier[300] = -4.0f;
  cases.push_back({"one outlier per block", outlier});
  std::vector<float> positive = gaussian(n, 1.0f, 16);
  for (float& x : positive) x = std::fabs(x) + 0.5f;
  cases.push_back({"all positive", positive});
  std::vector<float> negative = gaussian(n, 1.0f, 17);
  for (float& x : negative) x = -std::fabs(x) - 0.5f;
  cases.push_back({"all negative", negative});
  std::vector<float> ties(n);
  for (size_t i = 0; i < n; ++i) ties[i] = static_cast<float>(static_cast<int>(i % 33) - 16) * 0.5f;
  cases.push_back({"half-integer ties", ties});
  std::vector<float> mixed = gaussian(n, 1.0f, 18);
  for (size_t i = 0; i < n; i += 64) std::fill(mixed.begin() + i, mixed.begin() + i + 32, 0.0f);
  cases.push_back({"zero sub-blocks", mixed});
  return cases;
}

const GgmlType kQuantTypes[] = {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K};

std::string hex_diff(const std::string& a, const std::vector<uint8_t>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (static_cast<uint8_t>(a[i]) != b[i]) {
      return "first difference at byte " + std::to_string(i) + ": " +
             std::to_string(static_cast<uint8_t>(a[i])) + " vs " + std::to_string(b[i]);
    }
  }
  return a.size() == b.size() ? "" : "sizes " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
}

std::string temp_dir(const std::string& name) {
  return test_temp_dir("gguf_" + name, /*create=*/true);
}

std::string le(uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Conversions

TEST(Gguf, Fp16MatchesC10HalfOnEveryClassOfFloat) {
  std::mt19937 rng(1);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    // Spread the exponent over the half range (subnormals, normals, overflow) as well as anywhere.
    if (i % 2) u = (u & 0x807fffff) | ((100 + (u >> 24) % 50) << 23);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(ggml_fp32_to_fp16(f), ref_half(f)) << "bits 0x" << std::hex << u;
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float a = ggml_fp16_to_fp32(static_cast<uint16_t>(h)), b = ref_unhalf(static_cast<uint16_t>(h));
    if (std::isnan(b)) {
      ASSERT_TRUE(std::isnan(a));
    } else {
      ASSERT_EQ(a, b) << h;
    }
  }
  // Hand-checked: ties to even, the largest half, overflow, the smallest subnormal, NaN.
  EXPECT_EQ(ggml_fp32_to_fp16(1.0f + 1.0f / 2048), 0x3c00);  // tie, even stays
  EXPECT_EQ(ggml_fp32_to_fp16(1.0f + 3.0f / 2048), 0x3c02);  // tie, odd rounds up
  EXPECT_EQ(ggml_fp32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(ggml_fp32_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(ggml_fp32_to_fp16(65520.0f), 0x7c00);
  EXPECT_EQ(ggml_fp32_to_fp16(-1e9f), 0xfc00);
  EXPECT_EQ(ggml_fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(ggml_fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (zero)
  EXPECT_EQ(ggml_fp32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(ggml_fp32_to_fp16(-std::nanf("")), 0xfe00);
}

TEST(Gguf, Bf16RoundsToNearestEvenAndKeepsNan) {
  std::mt19937 rng(2);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(ggml_fp32_to_bf16(f), c10::BFloat16(f).x) << "bits 0x" << std::hex << u;
  }
  EXPECT_EQ(ggml_fp32_to_bf16(1.0f), 0x3f80);
  float f;
  uint32_t u = 0x3f808000;  // 1 + 2^-8: a tie, 0x3f80 is even
  std::memcpy(&f, &u, 4);
  EXPECT_EQ(ggml_fp32_to_bf16(f), 0x3f80);
  u = 0x3f818000;  // tie with an odd neighbour: up
  std::memcpy(&f, &u, 4);
  EXPECT_EQ(ggml_fp32_to_bf16(f), 0x3f82);
  u = 0xff800001;  // a signalling NaN with payload only in the low bits: made quiet, sign kept
  std::memcpy(&f, &u, 4);
  EXPECT_EQ(ggml_fp32_to_bf16(f), 0xffc0);
  u = 0x7fa12345;  // payload's top bits kept
  std::memcpy(&f, &u, 4);
  EXPECT_EQ(ggml_fp32_to_bf16(f), 0x7fe1);
  EXPECT_EQ(ggml_bf16_to_fp32(0x3f80), 1.0f);
}

// ---------------------------------------------------------------------------------------------
// Block bytes against the reference

TEST(Gguf, BlockSizesMatchGgml) {
  EXPECT_EQ(ggml_type_bytes(GgmlType::Q8_0), 34);
  EXPECT_EQ(ggml_type_bytes(GgmlType::Q4_0), 18);
  EXPECT_EQ(ggml_type_bytes(GgmlType::Q4_K), 144);
  EXPECT_EQ(ggml_type_bytes(GgmlType::Q6_K), 210);
  EXPECT_EQ(ggml_block_size(GgmlType::Q4_K), 256);
  EXPECT_EQ(ggml_row_bytes(GgmlType::Q6_K, 512), 420);
  EXPECT_EQ(ggml_row_bytes(GgmlType::BF16, 3), 6);
  EXPECT_EQ(ggml_type_parse("Q4_K"), GgmlType::Q4_K);
  EXPECT_EQ(ggml_type_parse("bf16"), GgmlType::BF16);
  EXPECT_EQ(std::string(ggml_type_name(GgmlType::Q6_K)), "q6_K");
  EXPECT_EQ(error_of([] { ggml_type_parse("q9_k"); }),
            "unknown GGUF tensor type 'q9_k' (expected f32, f16, bf16, q8_0, q4_0, q4_k or q6_k)");
  EXPECT_EQ(
      error_of([] { ggml_type_parse("q5_k"); }),
      "GGUF tensor type 'q5_k' is read by luatune but not written (expected f32, f16, bf16, q8_0, q4_0, q4_k "
      "or q6_k)");
  EXPECT_EQ(ggml_type_bytes(GgmlType::Q3_K), 110);  // the read-only types (ggml-common.h's block structs)
  EXPECT_EQ(ggml_type_bytes(GgmlType::Q5_1), 24);
  EXPECT_FALSE(ggml_type_writes(GgmlType::Q2_K));
  EXPECT_TRUE(ggml_type_writes(GgmlType::Q4_K));
  EXPECT_EQ(error_of([] { ggml_row_bytes(GgmlType::Q4_0, 48); }),
            "ggml q4_0: 48 elements is not a multiple of its block size 32");
}

TEST(Gguf, QuantizedBytesEqualTheReferenceOnRandomInputs) {
  for (GgmlType t : kQuantTypes) {
    for (uint32_t seed = 0; seed < 6; ++seed) {
      const float sigma = std::pow(10.0f, static_cast<float>(seed) - 3.0f);  // 1e-3 ... 1e2
      const std::vector<float> x = gaussian(256 * 16, sigma, 100 + seed);
      const std::string got = ggml_quantize(t, x.data(), static_cast<int64_t>(x.size()));
      EXPECT_EQ(hex_diff(got, ref_blocks(t, x)), "") << ggml_type_name(t) << " sigma " << sigma;
    }
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 3.0f);
    std::vector<float> x(256 * 8);
    for (float& v : x) v = u(rng);
    EXPECT_EQ(hex_diff(ggml_quantize(t, x.data(), static_cast<int64_t>(x.size())), ref_blocks(t, x)), "")
        << ggml_type_name(t) << " uniform, offset";
  }
}

TEST(Gguf, QuantizedBytesEqualTheReferenceOnEdgeInputs) {
  for (GgmlType t : kQuantTypes) {
    for (const auto& c : edge_inputs(512)) {
      const std::string got = ggml_quantize(t, c.second.data(), static_cast<int64_t>(c.second.size()));
      EXPECT_EQ(hex_diff(got, ref_blocks(t, c.second)), "") << ggml_type_name(t) << " " << c.first;
    }
  }
  // Hand-checked q8_0 and q4_0 blocks: x = j - 16 for j in 0..31.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  const std::string q8 = ggml_quantize(GgmlType::Q8_0, x.data(), 32);
  EXPECT_EQ(static_cast<uint8_t>(q8[0]) | (static_cast<uint8_t>(q8[1]) << 8), ref_half(16.0f / 127));
  EXPECT_EQ(static_cast<int8_t>(q8[2]), -127);  // -16 / (16/127)
  EXPECT_EQ(static_cast<int8_t>(q8[2 + 16]), 0);
  EXPECT_EQ(static_cast<int8_t>(q8[2 + 31]), 119);  // 15 * 127 / 16 = 119.06
  const std::string q4 = ggml_quantize(GgmlType::Q4_0, x.data(), 32);
  EXPECT_EQ(static_cast<uint8_t>(q4[0]) | (static_cast<uint8_t>(q4[1]) << 8), 0x4000);  // d = -16 / -8 = 2
  // element 0: -16/2 + 8.5 = 0.5 -> 0; element 16: 0 + 8.5 -> 8; so byte 0 = 0 | 8 << 4
  EXPECT_EQ(static_cast<uint8_t>(q4[2]), 0x80);
  // element 15: -1/2 + 8.5 = 8 -> 8; element 31: 15/2 + 8.5 = 16 -> 15 (clamped)
  EXPECT_EQ(static_cast<uint8_t>(q4[2 + 15]), 0xf8);
}

TEST(Gguf, DequantizedValuesAreWithinTheFormatsError) {
  const std::vector<float> x = gaussian(256 * 64, 1.0f, 42);
  const int64_t n = static_cast<int64_t>(x.size());
  struct Bound {
    GgmlType t;
    double max_rel_rms;
  };
  // Relative RMS error on Gaussian weights (ggml's own test-quantize-fns allows more for its
  // synthetic data); q8_0 and q4_0 also get their analytic per-element bound below.
  for (Bound b : {Bound{GgmlType::Q8_0, 0.008}, Bound{GgmlType::Q6_K, 0.02}, Bound{GgmlType::Q4_K, 0.08},
                  Bound{GgmlType::Q4_0, 0.12}, Bound{GgmlType::F16, 1e-3}, Bound{GgmlType::BF16, 5e-3},
                  Bound{GgmlType::F32, 0.0}}) {
    const std::vector<float> y = ggml_dequantize(b.t, ggml_quantize(b.t, x.data(), n), n);
    double se = 0, s2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      se += (y[i] - x[i]) * (y[i] - x[i]);
      s2 += x[i] * x[i];
    }
    EXPECT_LE(std::sqrt(se / s2), b.max_rel_rms) << ggml_type_name(b.t);
  }
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0}) {
    const std::vector<float> y = ggml_dequantize(t, ggml_quantize(t, x.data(), n), n);
    for (int64_t b0 = 0; b0 < n; b0 += 32) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b0 + j]));
      // q8_0: half a step of amax/127 (plus the fp16 rounding of d); q4_0: one step of amax/8 at
      // the clamped end of the grid, half a step elsewhere.
      const float bound = t == GgmlType::Q8_0 ? amax / 127 * 0.5f + amax * 1e-3f : amax / 8 * 1.01f;
      for (int j = 0; j < 32; ++j) ASSERT_LE(std::fabs(y[b0 + j] - x[b0 + j]), bound) << ggml_type_name(t);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Files

TEST(Gguf, TinyFileBytesMatchTheSpecByHand) {
  const std::string dir = temp_dir("tiny");
  GgufWriter w;
  w.set("general.architecture", GgufValue::str("llama"));
  w.add_tensor("t", at::tensor({1.0f, 2.0f}), GgmlType::F32);
  w.write(dir + "/t.gguf");
  std::string want = "GGUF" + le(3, 4) + le(1, 8) + le(1, 8);                  // magic, version, tensors, kvs
  want += le(20, 8) + "general.architecture" + le(8, 4) + le(5, 8) + "llama";  // key, string type, value
  want += le(1, 8) + "t" + le(1, 4) + le(2, 8) + le(0, 4) + le(0, 8);  // name, n_dims, ne, f32, offset
  ASSERT_EQ(want.size(), 102u);
  want += std::string(128 - 102, '\0');                                   // pad to the 32 alignment
  want += le(0x3f800000, 4) + le(0x40000000, 4) + std::string(24, '\0');  // 1.0f, 2.0f, padding
  EXPECT_EQ(file_read(dir + "/t.gguf"), want);
  fs::remove_all(dir);
}

TEST(Gguf, WrittenFileReadsBackEveryKeyTensorAndAlignment) {
  for (uint32_t alignment : {0u, 64u}) {
    const std::string dir = temp_dir("rt" + std::to_string(alignment));
    GgufWriter w;
    w.set("general.architecture", GgufValue::str("llama"));
    if (alignment) w.set("general.alignment", GgufValue::u32(alignment));
    w.set("a.u32", GgufValue::u32(4000000000u));
    w.set("a.i32", GgufValue::i32(-7));
    w.set("a.u64", GgufValue::u64(1ull << 40));
    w.set("a.i64", GgufValue::i64(-(1ll << 40)));
    w.set("a.f32", GgufValue::f32(0.25f));
    w.set("a.f64", GgufValue::f64(1e-300));
    w.set("a.bool", GgufValue::boolean(true));
    w.set("a.strings", GgufValue::strings({"a", "", "héllo"}));
    w.set("a.i32s", GgufValue::i32s({1, -2, 3}));
    w.set("a.f32s", GgufValue::f32s({0.5f, -1.5f}));
    w.set("a.empty", GgufValue::strings({}));
    w.set("a.i32", GgufValue::i32(-8));  // replaces, keeps its place
    // One tensor of each type, shapes chosen so sizes are not multiples of the alignment.
    struct T {
      std::string name;
      at::Tensor t;
      GgmlType type;
    };
    std::vector<T> ts = {
        {"q8", at::randn({3, 64}), GgmlType::Q8_0},
        {"q4", at::randn({2, 32}).to(at::kBFloat16), GgmlType::Q4_0},
        {"q4k", at::randn({3, 256}).to(at::kHalf), GgmlType::Q4_K},
        {"q6k", at::randn({1, 2, 512}), GgmlType::Q6_K},
        {"f16", at::randn({5, 3}), GgmlType::F16},
        {"bf16", at::randn({7}), GgmlType::BF16},
        {"f32", at::randn({2, 3, 4, 5}).transpose(1, 2), GgmlType::F32},  // non-contiguous
        {"scalar", at::scalar_tensor(3.5), GgmlType::F32},
    };
    for (const T& t : ts) w.add_tensor(t.name, t.t, t.type);
    EXPECT_EQ(w.tensor_count(), ts.size());
    w.write(dir + "/m.gguf");

    const GgufFile g = gguf_read(dir + "/m.gguf");
    const uint64_t align = alignment ? alignment : 32;
    EXPECT_EQ(g.version, 3u);
    EXPECT_EQ(g.alignment, align);
    EXPECT_EQ(g.data_offset % align, 0u);
    ASSERT_EQ(g.kv.size(), alignment ? 13u : 12u);
    EXPECT_EQ(g.kv[0].first, "general.architecture");
    EXPECT_EQ(g.find("general.architecture")->s, "llama");
    EXPECT_EQ(g.kv[alignment ? 3 : 2].first, "a.i32");
    EXPECT_EQ(g.find("a.u32")->type, GgufValue::Type::u32);
    EXPECT_EQ(g.find("a.u32")->u, 4000000000u);
    EXPECT_EQ(g.find("a.i32")->i, -8);
    EXPECT_EQ(g.find("a.u64")->u, 1ull << 40);
    EXPECT_EQ(g.find("a.i64")->type, GgufValue::Type::i64);
    EXPECT_EQ(g.find("a.i64")->i, -(1ll << 40));
    EXPECT_EQ(g.find("a.f32")->f, 0.25);
    EXPECT_EQ(g.find("a.f64")->f, 1e-300);
    EXPECT_EQ(g.find("a.bool")->type, GgufValue::Type::boolean);
    EXPECT_EQ(g.find("a.bool")->u, 1u);
    const GgufValue* s = g.find("a.strings");
    ASSERT_EQ(s->type, GgufValue::Type::array);
    EXPECT_EQ(s->item_type, GgufValue::Type::string);
    ASSERT_EQ(s->items.size(), 3u);
    EXPECT_EQ(s->items[2].s, "héllo");
    EXPECT_EQ(g.find("a.i32s")->items[1].i, -2);
    EXPECT_EQ(g.find("a.f32s")->items[1].f, -1.5);
    EXPECT_EQ(g.find("a.empty")->items.size(), 0u);
    EXPECT_EQ(g.find("nope"), nullptr);

    ASSERT_EQ(g.tensors.size(), ts.size());
    uint64_t expect_offset = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
      const GgufFile::Tensor& t = g.tensors[i];
      EXPECT_EQ(t.name, ts[i].name);
      EXPECT_EQ(t.type, ts[i].type);
      std::vector<int64_t> ne(ts[i].t.sizes().rbegin(), ts[i].t.sizes().rend());
      if (ne.empty()) ne = {1};
      EXPECT_EQ(t.ne, ne) << t.name;
      EXPECT_EQ(t.offset, expect_offset) << t.name;
      EXPECT_EQ(t.offset % align, 0u);
      const at::Tensor f = ts[i].t.to(at::kFloat).contiguous();
      const std::string want = ggml_quantize(t.type, f.data_ptr<float>(), f.numel());
      EXPECT_EQ(t.bytes, want) << t.name;
      expect_offset += (want.size() + align - 1) / align * align;
    }
    EXPECT_EQ(fs::file_size(dir + "/m.gguf"), g.data_offset + expect_offset);
    const GgufFile h = gguf_read(dir + "/m.gguf", false);
    EXPECT_EQ(h.tensors.size(), ts.size());
    EXPECT_TRUE(h.tensors[0].bytes.empty());
    fs::remove_all(dir);
  }
}

TEST(Gguf, LargeTensorsStreamInSlicesWithTheSameBytes) {
  // 2^24 + a few rows' worth of elements crosses the writer's slice boundary.
  const std::string dir = temp_dir("big");
  const at::Tensor t = at::randn({65600, 256});
  GgufWriter w;
  w.add_tensor("big", t, GgmlType::Q8_0);
  w.write(dir + "/b.gguf");
  const GgufFile g = gguf_read(dir + "/b.gguf");
  EXPECT_EQ(g.tensors[0].bytes, ggml_quantize(GgmlType::Q8_0, t.data_ptr<float>(), t.numel()));
  fs::remove_all(dir);
}

TEST(Gguf, WriterRefusesWhatLlamaCppCannotRead) {
  GgufWriter w;
  EXPECT_EQ(error_of([&] {
              w.add_tensor("w", at::zeros({4, 48}), GgmlType::Q4_K);
            }),
            "GGUF tensor 'w': rows of 48 elements cannot be q4_K (blocks of 256)\n"
            "  HINT: keep such tensors in f16 or f32 (llama.cpp's converter falls back the same way)");
  EXPECT_EQ(
      error_of([&] { w.add_tensor(std::string(64, 'n'), at::zeros({4}), GgmlType::F32); }),
      "GGUF tensor '" + std::string(64, 'n') + "': the name must be 1 to 63 bytes (ggml's GGML_MAX_NAME)");
  EXPECT_EQ(error_of([&] { w.add_tensor("i", at::zeros({4}, at::kLong), GgmlType::F32); }),
            "GGUF tensor 'i': expected a floating-point tensor, got Long");
  EXPECT_EQ(error_of([&] {
              w.add_tensor("d5", at::zeros({1, 1, 1, 1, 1}), GgmlType::F32);
            }),
            "GGUF tensor 'd5': 5 dimensions, ggml allows at most 4");
  w.add_tensor("ok", at::zeros({4}), GgmlType::F32);
  EXPECT_EQ(error_of([&] { w.add_tensor("ok", at::zeros({4}), GgmlType::F32); }),
            "GGUF tensor 'ok': added twice");
  GgufValue nested;
  nested.type = GgufValue::Type::array;
  nested.item_type = GgufValue::Type::array;
  EXPECT_EQ(error_of([&] { w.set("x.nested", nested); }),
            "GGUF key 'x.nested': arrays of arrays (or of unknown types) are not readable by llama.cpp");
  GgufValue mixed = GgufValue::i32s({1});
  mixed.items.push_back(GgufValue::str("s"));
  EXPECT_EQ(error_of([&] { w.set("x.mixed", mixed); }), "GGUF key 'x.mixed': an array of i32 holds a string");
  w.set("general.alignment", GgufValue::u32(48));
  EXPECT_EQ(error_of([&] { w.write("/tmp/never.gguf"); }),
            "GGUF key 'general.alignment': 48 is not a power of two >= 8");
  w.set("general.alignment", GgufValue::u64(64));
  EXPECT_EQ(error_of([&] { w.write("/tmp/never.gguf"); }),
            "GGUF key 'general.alignment': must be a u32 (ggml reads it as one)");
  EXPECT_FALSE(fs::exists("/tmp/never.gguf"));
}

TEST(Gguf, FailedWritesLeaveNoFile) {
  GgufWriter w;
  w.add_tensor("t", at::ones({32}), GgmlType::Q8_0);
  const std::string missing = "/nonexistent_luatune_dir/m.gguf";
  EXPECT_EQ(error_of([&] { w.write(missing); }),
            "cannot write GGUF '" + missing + "': No such file or directory");
  // The target is a directory: the temporary is written, the rename fails, the temporary goes.
  const std::string dir = temp_dir("fail");
  fs::create_directories(dir + "/m.gguf");
  const std::string msg = error_of([&] { w.write(dir + "/m.gguf"); });
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(msg.rfind("cannot move '" + dir + "/m.gguf.tmp.", 0), 0u) << msg;
  auto entries = [&] { return std::distance(fs::directory_iterator(dir), fs::directory_iterator()); };
  EXPECT_EQ(entries(), 1);  // only the directory that was in the way
  // A tensor that cannot be converted fails mid-stream: the temporary is removed, and an
  // existing file of that name is left as it was.
  file_write_atomic(dir + "/old.gguf", "old");
  GgufWriter bad;
  bad.add_tensor("a", at::ones({32}), GgmlType::F32);
  at::Tensor meta = at::empty({32}, at::TensorOptions().device(at::kMeta));
  bad.add_tensor("b", meta, GgmlType::F32);
  EXPECT_THROW(bad.write(dir + "/old.gguf"), c10::Error);
  EXPECT_EQ(file_read(dir + "/old.gguf"), "old");
  EXPECT_EQ(entries(), 2);
  fs::remove_all(dir);
}

TEST(Gguf, ReaderRejectsMalformedFilesInOneLine) {
  const std::string dir = temp_dir("bad");
  const std::string p = dir + "/x.gguf";
  file_write_atomic(p, "GGML" + le(3, 4) + le(0, 8) + le(0, 8));
  EXPECT_EQ(error_of([&] { gguf_read(p); }), "bad GGUF file '" + p + "': no GGUF magic");
  file_write_atomic(p, "GGUF" + le(4, 4) + le(0, 8) + le(0, 8));
  EXPECT_EQ(error_of([&] { gguf_read(p); }), "bad GGUF file '" + p + "': version 4 (expected 3)");
  file_write_atomic(p, "GGUF" + le(3, 4) + le(0, 8) + le(1, 8) + le(100, 8) + "abc");
  EXPECT_EQ(error_of([&] { gguf_read(p); }), "bad GGUF file '" + p + "': truncated (a key of 100 bytes)");
  // A valid file cut short inside its data section.
  GgufWriter w;
  w.add_tensor("t", at::ones({64}), GgmlType::F32);
  w.write(p);
  std::string bytes = file_read(p);
  file_write_atomic(p, bytes.substr(0, bytes.size() - 100));
  EXPECT_EQ(
      error_of([&] { gguf_read(p); }),
      "bad GGUF file '" + p + "': tensor 't' (256 bytes at data offset 0) runs past the end of the file");
  EXPECT_EQ(error_of([&] { gguf_read(dir + "/none.gguf"); }),
            "cannot read GGUF '" + dir + "/none.gguf': No such file or directory");
  fs::remove_all(dir);
}
