// The CUDA 4-bit kernels (host/quant/kernels/nf4_cuda.cu) against the CPU reference
// (host/quant/nf4.cpp), bit for bit: packed bytes, absmax and every dequantized element, for NF4
// and FP4, f32/bf16/f16 in and out, plain and double-quantized scales. Skips (77) without a CUDA
// device. Expected bf16/f16 outputs are the reference's float32 rounded by c10::BFloat16 /
// c10::Half (round to nearest even), an implementation we did not write. docs/kernels.md.
#include <ATen/ATen.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "host/quant/kernels/nf4_cuda.h"
#include "host/quant/nf4.h"
#include "host/quant/nf4_tables.h"
#include "host/quant/quant.h"
#include "tests/cuda/cuda_ok.h"

namespace {

using luatune::cuda::BlockScale;
using luatune::cuda::Dtype;
namespace nf4 = luatune::nf4;

int g_failures = 0;
cudaStream_t g_stream = nullptr;

// ---------------------------------------------------------------------------------------------
// Plumbing: device buffers, CUDA error checks, result lines.

// A kernel wrapper's return code, then the stream (errors raised while the kernel ran).
void kernel_ok(int rc, const char* what) {
  if (rc != 0) {
    std::fprintf(stderr, "%s returned %d: %s\n", what, rc, luatune::cuda::error_string(rc));
    std::exit(1);
  }
  CUDA_OK(cudaStreamSynchronize(g_stream));
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t bytes) { CUDA_OK(cudaMalloc(&p, bytes < 1 ? 1 : bytes)); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as(size_t offset_bytes = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(p) + offset_bytes);
  }
};

template <typename T>
void to_device(void* dst, const std::vector<T>& v) {
  CUDA_OK(cudaMemcpy(dst, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <typename T>
std::vector<T> to_host(const void* src, size_t count) {
  std::vector<T> v(count);
  CUDA_OK(cudaMemcpy(v.data(), src, count * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

void report(const std::string& name, bool ok, const std::string& detail = "") {
  std::printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", name.c_str(), detail.empty() ? "" : ": ", detail.c_str());
  std::fflush(stdout);
  if (!ok) g_failures++;
}

// ---------------------------------------------------------------------------------------------
// Bit-for-bit comparisons; on a mismatch: how many, the first index and the largest difference.

std::string diff_bytes(const uint8_t* got, const uint8_t* want, size_t count) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < count; i++) {
    if (got[i] != want[i] && bad++ == 0) first = i;
  }
  if (bad == 0) return "";
  char buf[160];
  std::snprintf(buf, sizeof buf, "%zu of %zu bytes differ, first at %zu (got 0x%02x, want 0x%02x)", bad,
                count, first, got[first], want[first]);
  return buf;
}

// Compares 32-bit (f32) or 16-bit (bf16/f16) words; to_float reads a word as a number for the report.
template <typename W, typename F>
std::string diff_words(const W* got, const W* want, size_t count, F to_float) {
  size_t bad = 0, first = 0;
  double max_diff = 0.0;
  for (size_t i = 0; i < count; i++) {
    if (got[i] == want[i]) continue;
    if (bad++ == 0) first = i;
    max_diff = std::max(max_diff, std::fabs(double(to_float(got[i])) - double(to_float(want[i]))));
  }
  if (bad == 0) return "";
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "%zu of %zu values differ, first at %zu (got %.9g, want %.9g), max abs diff %.9g", bad, count,
                first, double(to_float(got[first])), double(to_float(want[first])), max_diff);
  return buf;
}

float f32_of(uint32_t w) {
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}
float bf16_of(uint16_t w) {
  return float(c10::BFloat16(w, c10::BFloat16::from_bits()));
}
float f16_of(uint16_t w) {
  return float(c10::Half(w, c10::Half::from_bits()));
}
uint16_t bf16_bits(float f) {
  return c10::BFloat16(f).x;
}
uint16_t f16_bits(float f) {
  return c10::Half(f).x;
}

// ---------------------------------------------------------------------------------------------
// Inputs.

std::vector<float> normal_values(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// bitsandbytes' 8-bit dynamic map as quant.cpp builds it (the kernels read whatever table they get).
std::vector<float> dynamic_map_like() {
  at::Tensor m = luatune::dynamic_map_8bit().contiguous();
  return std::vector<float>(m.data_ptr<float>(), m.data_ptr<float>() + m.numel());
}

// The NF4 thresholds (docs/qlora.md, "Sources") and FP4's (on |x|), for the edge-value blocks.
const float kNF4Thresholds[15] = {LUATUNE_NF4_THRESHOLDS};
const float kFP4Thresholds[7] = {LUATUNE_FP4_THRESHOLDS};

// Blocks of 64 built to sit on the trees' decision points (comparisons are x > t, so a value equal
// to a threshold and its float neighbours must all agree). With absmax 1 the scaled value is the
// value itself; absmax 2 scales exactly; absmax 3 does not (1/3 rounds).
std::vector<float> edge_values() {
  const int64_t bs = 64;
  // Two blocks of values in [-1, 1] holding +-1: the NF4 thresholds and their float neighbours
  // (45 values), then FP4's on both signs (28).
  std::vector<float> nf4_unit, fp4_unit;
  for (float t : kNF4Thresholds) {
    nf4_unit.push_back(t);
    nf4_unit.push_back(std::nextafter(t, 2.0f));
    nf4_unit.push_back(std::nextafter(t, -2.0f));
  }
  for (float t : kFP4Thresholds) {
    for (float u : {t, -t}) {
      fp4_unit.push_back(u);
      fp4_unit.push_back(std::nextafter(u, 2.0f));
    }
  }
  for (auto* unit : {&nf4_unit, &fp4_unit}) {
    unit->push_back(-0.0f);
    unit->resize(bs - 2, 0.0f);
    unit->push_back(1.0f);
    unit->push_back(-1.0f);
  }

  std::vector<float> v;
  for (float mul : {1.0f, 2.0f, 3.0f, -1.0f, 0.1f}) {
    for (float x : nf4_unit) v.push_back(x * mul);
    for (float x : fp4_unit) v.push_back(x * mul);
  }
  for (int64_t i = 0; i < bs; i++) v.push_back(i % 3 == 0 ? -0.0f : 0.0f);  // all zero: absmax 0, codes 0
  // Every NF4 and FP4 code value itself, times a few scales.
  for (float s : {1.0f, 0.75f}) {
    for (int q = 0; q < 16; q++) v.push_back(nf4::kNF4Code[q] * s);
    for (int q = 0; q < 16; q++) v.push_back(nf4::kFP4Code[q] * s);
    for (int q = 0; q < 32; q++) v.push_back(q % 2 ? s : -s);  // +-absmax
  }
  // Subnormal block: 1 / absmax overflows to inf, so the scaled values are +-inf and 0 * inf = NaN.
  for (int64_t i = 0; i < bs; i++) v.push_back(i % 4 == 0 ? 0.0f : (i % 2 ? 1e-40f : -3e-41f));
  // NaN and inf inputs: NaN never raises the absmax; an inf absmax gives r = 0.
  for (int64_t i = 0; i < bs; i++)
    v.push_back(i == 5 ? std::numeric_limits<float>::quiet_NaN() : 0.5f * (i % 7) - 1.0f);
  for (int64_t i = 0; i < bs; i++)
    v.push_back(i == 9 ? std::numeric_limits<float>::infinity() : float(i) - 30.0f);
  v.push_back(0.25f);  // a partial last block of 3
  v.push_back(-0.5f);
  v.push_back(0.0f);
  return v;
}

// The values an input dtype can hold: the float32 the kernel will see after its exact conversion.
std::vector<float> round_to(Dtype dt, const std::vector<float>& v) {
  std::vector<float> r(v);
  if (dt == Dtype::bf16)
    for (auto& x : r) x = float(c10::BFloat16(x));
  if (dt == Dtype::f16)
    for (auto& x : r) x = float(c10::Half(x));
  return r;
}
std::vector<uint16_t> bits16(Dtype dt, const std::vector<float>& v) {
  std::vector<uint16_t> r(v.size());
  for (size_t i = 0; i < v.size(); i++) r[i] = dt == Dtype::bf16 ? bf16_bits(v[i]) : f16_bits(v[i]);
  return r;
}

const char* dtype_name(Dtype d) {
  return d == Dtype::f32 ? "f32" : d == Dtype::bf16 ? "bf16" : "f16";
}
const char* type_name(nf4::QuantType t) {
  return t == nf4::QuantType::nf4 ? "nf4" : "fp4";
}
size_t dtype_size(Dtype d) {
  return d == Dtype::f32 ? 4 : 2;
}

// ---------------------------------------------------------------------------------------------
// Quantize: the kernel on `values` (given in in_dtype; `values` must already be representable)
// against nf4::quantize_4bit. in_offset shifts the device input by that many elements and the
// packed output by one byte, to take the kernels' unaligned (scalar) path.

void check_quantize(const std::string& label, const std::vector<float>& values, Dtype in_dtype,
                    int64_t blocksize, nf4::QuantType type, int64_t in_offset = 0) {
  const int64_t n = static_cast<int64_t>(values.size());
  const int64_t blocks = nf4::num_blocks(n, blocksize);
  const size_t packed_bytes = static_cast<size_t>((n + 1) / 2);
  char name[200];
  std::snprintf(name, sizeof name, "quantize %s %s in=%s n=%lld blocksize=%lld%s", label.c_str(),
                type_name(type), dtype_name(in_dtype), (long long)n, (long long)blocksize,
                in_offset ? " unaligned" : "");

  std::vector<uint8_t> want_packed(packed_bytes);
  std::vector<float> want_absmax(blocks);
  nf4::quantize_4bit(values.data(), n, blocksize, type, want_packed.data(), want_absmax.data());

  const size_t esz = dtype_size(in_dtype);
  const size_t pad = in_offset ? 1 : 0;
  DeviceBuffer d_in((n + in_offset) * esz), d_packed(packed_bytes + pad), d_absmax(blocks * sizeof(float));
  void* in_ptr = d_in.as<char>(in_offset * esz);
  if (in_dtype == Dtype::f32) {
    CUDA_OK(cudaMemcpy(in_ptr, values.data(), n * 4, cudaMemcpyHostToDevice));
  } else {
    const std::vector<uint16_t> b = bits16(in_dtype, values);
    CUDA_OK(cudaMemcpy(in_ptr, b.data(), n * 2, cudaMemcpyHostToDevice));
  }
  uint8_t* packed_ptr = d_packed.as<uint8_t>(pad);
  kernel_ok(luatune::cuda::quantize_4bit(in_ptr, in_dtype, n, blocksize, static_cast<int>(type), packed_ptr,
                                         d_absmax.as<float>(), g_stream),
            name);
  const auto got_packed = to_host<uint8_t>(packed_ptr, packed_bytes);
  const auto got_absmax = to_host<uint32_t>(d_absmax.p, blocks);
  std::vector<uint32_t> want_absmax_bits(blocks);
  std::memcpy(want_absmax_bits.data(), want_absmax.data(), blocks * 4);

  std::string why = diff_bytes(got_packed.data(), want_packed.data(), packed_bytes);
  if (why.empty()) {
    why = diff_words(got_absmax.data(), want_absmax_bits.data(), blocks, f32_of);
    if (!why.empty()) why = "absmax: " + why;
  } else {
    why = "packed: " + why;
  }
  report(name, why.empty(), why);
}

// ---------------------------------------------------------------------------------------------
// Dequantize: random packed codes and scales spanning e^-20 .. e^12 (bf16/f16 subnormals, f16
// overflow to inf), plain or double-quantized, against nf4::dequantize_4bit (and, for the nested
// scale, nf4::dequantize_8bit with the offset, the same two roundings).

void check_dequantize(int64_t n, int64_t blocksize, nf4::QuantType type, bool nested,
                      int64_t nested_blocksize, bool unaligned, uint64_t seed) {
  const int64_t blocks = nf4::num_blocks(n, blocksize);
  const size_t packed_bytes = static_cast<size_t>((n + 1) / 2);
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> packed(packed_bytes);
  for (auto& b : packed) b = static_cast<uint8_t>(rng() & 0xFF);
  std::uniform_real_distribution<float> log_scale(-20.0f, 12.0f);
  std::vector<float> absmax(blocks);
  for (auto& a : absmax) a = std::exp(log_scale(rng));

  // The scale per block as the kernel must compute it.
  std::vector<float> scales = absmax;
  std::vector<float> code256 = dynamic_map_like();
  std::vector<uint8_t> qabsmax(blocks);
  const int64_t nested_blocks = nf4::num_blocks(blocks, nested_blocksize);
  std::vector<float> nested_absmax(nested_blocks);
  float offset = 0.0f;
  if (nested) {
    double sum = 0.0;
    for (float a : absmax) sum += a;
    offset = static_cast<float>(sum / double(blocks));
    std::vector<float> centred(blocks);
    for (int64_t b = 0; b < blocks; b++) centred[b] = absmax[b] - offset;
    nf4::quantize_8bit(centred.data(), blocks, nested_blocksize, code256.data(), qabsmax.data(),
                       nested_absmax.data());
    nf4::dequantize_8bit(qabsmax.data(), nested_absmax.data(), blocks, nested_blocksize, code256.data(),
                         scales.data(), offset);
  }
  std::vector<float> want(n);
  nf4::dequantize_4bit(packed.data(), scales.data(), n, blocksize, type, want.data());

  const size_t pad = unaligned ? 1 : 0;
  DeviceBuffer d_packed(packed_bytes + pad), d_absmax(blocks * 4), d_q(blocks), d_code(256 * 4),
      d_nested(nested_blocks * 4), d_out((n + pad) * 4);
  uint8_t* packed_ptr = d_packed.as<uint8_t>(pad);
  CUDA_OK(cudaMemcpy(packed_ptr, packed.data(), packed_bytes, cudaMemcpyHostToDevice));
  BlockScale s;
  if (nested) {
    to_device(d_q.p, qabsmax);
    to_device(d_code.p, code256);
    to_device(d_nested.p, nested_absmax);
    s.absmax_q = d_q.as<uint8_t>();
    s.nested_code = d_code.as<float>();
    s.nested_absmax = d_nested.as<float>();
    s.nested_blocksize = nested_blocksize;
    s.offset = offset;
  } else {
    to_device(d_absmax.p, absmax);
    s.absmax = d_absmax.as<float>();
  }

  for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f16}) {
    char name[200];
    std::snprintf(name, sizeof name, "dequantize %s out=%s n=%lld blocksize=%lld %s%s", type_name(type),
                  dtype_name(dt), (long long)n, (long long)blocksize,
                  nested ? ("double-quant/" + std::to_string(nested_blocksize)).c_str() : "plain",
                  unaligned ? " unaligned" : "");
    void* out = d_out.as<char>(pad * dtype_size(dt));
    kernel_ok(luatune::cuda::dequantize_4bit(packed_ptr, n, blocksize, static_cast<int>(type), s, out, dt,
                                             g_stream),
              name);
    std::string why;
    if (dt == Dtype::f32) {
      const auto got = to_host<uint32_t>(out, n);
      std::vector<uint32_t> w(n);
      std::memcpy(w.data(), want.data(), n * 4);
      why = diff_words(got.data(), w.data(), n, f32_of);
    } else {
      const auto got = to_host<uint16_t>(out, n);
      const std::vector<uint16_t> w = bits16(dt, want);
      why = diff_words(got.data(), w.data(), n, dt == Dtype::bf16 ? bf16_of : f16_of);
    }
    report(name, why.empty(), why);
  }
}

// ---------------------------------------------------------------------------------------------
// n > 2^31: int64 indexing end to end. bf16 input (4 GiB), quantize then dequantize to bf16, and
// compare four windows against the reference: the start, around element 2^30 (f32 byte offsets
// past 2^32 in a float view), across element 2^31, and the end.

void check_huge() {
  // The GPU harness sets LUATUNE_NF4_HUGE=0 when its time budget cannot spare this check's host
  // loops (an estimated 10-20 s; scripts/gpu_validate.py, docs/gpu.md).
  if (const char* v = std::getenv("LUATUNE_NF4_HUGE"); v && std::string(v) == "0") {
    std::printf("SKIP n > 2^31: LUATUNE_NF4_HUGE=0 (the harness's time budget)\n");
    return;
  }
  const int64_t blocksize = 64;
  const int64_t n = (int64_t(1) << 31) + 3 * 4096 + 77;
  const int64_t blocks = nf4::num_blocks(n, blocksize);
  const size_t packed_bytes = static_cast<size_t>((n + 1) / 2);
  const size_t device_need = n * 2 + packed_bytes + blocks * 4 + n * 2 + (size_t(512) << 20);
  size_t free_b = 0, total_b = 0;
  CUDA_OK(cudaMemGetInfo(&free_b, &total_b));
  const double host_free = double(sysconf(_SC_AVPHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  if (free_b < std::max<size_t>(device_need, size_t(8) << 30) || host_free < 2.5 * double(n * 2)) {
    std::printf(
        "SKIP n > 2^31: needs %.1f GB free on the device (%.1f free) and %.1f GB host memory (%.1f free)\n",
        device_need / 1e9, free_b / 1e9, 2.5 * n * 2 / 1e9, host_free / 1e9);
    return;
  }
  // Cheap deterministic values (a hash of the index), rounded to bf16.
  std::vector<uint16_t> in_bits(n);
  auto value_at = [](int64_t i) {
    uint64_t h = uint64_t(i) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    return float(c10::BFloat16(float(int64_t(h % 20001) - 10000) / 4000.0f));
  };
  for (int64_t i = 0; i < n; i++) in_bits[i] = c10::BFloat16(value_at(i)).x;

  DeviceBuffer d_in(n * 2), d_packed(packed_bytes), d_absmax(blocks * 4), d_out(n * 2);
  to_device(d_in.p, in_bits);
  std::vector<uint16_t>().swap(in_bits);
  for (nf4::QuantType type : {nf4::QuantType::nf4, nf4::QuantType::fp4}) {
    kernel_ok(luatune::cuda::quantize_4bit(d_in.p, Dtype::bf16, n, blocksize, static_cast<int>(type),
                                           d_packed.as<uint8_t>(), d_absmax.as<float>(), g_stream),
              "quantize n > 2^31");
    BlockScale s;
    s.absmax = d_absmax.as<float>();
    kernel_ok(luatune::cuda::dequantize_4bit(d_packed.as<uint8_t>(), n, blocksize, static_cast<int>(type), s,
                                             d_out.p, Dtype::bf16, g_stream),
              "dequantize n > 2^31");
    const int64_t w = int64_t(1) << 22;  // a window, a multiple of blocksize
    for (int64_t start : {int64_t(0), (int64_t(1) << 30) - w / 2, (int64_t(1) << 31) - w / 2,
                          (n - w) / blocksize * blocksize}) {
      const int64_t len = std::min(w + blocksize, n - start);  // the last window runs to n
      std::vector<float> x(len);
      for (int64_t i = 0; i < len; i++) x[i] = value_at(start + i);
      std::vector<uint8_t> want_packed((len + 1) / 2);
      std::vector<float> want_absmax(nf4::num_blocks(len, blocksize)), want_out(len);
      nf4::quantize_4bit(x.data(), len, blocksize, type, want_packed.data(), want_absmax.data());
      nf4::dequantize_4bit(want_packed.data(), want_absmax.data(), len, blocksize, type, want_out.data());

      std::vector<uint8_t> got_packed((len + 1) / 2);
      CUDA_OK(cudaMemcpy(got_packed.data(), d_packed.as<uint8_t>(start / 2), got_packed.size(),
                         cudaMemcpyDeviceToHost));
      const auto got_absmax = to_host<float>(d_absmax.as<float>(start / blocksize * 4), want_absmax.size());
      const auto got_out = to_host<uint16_t>(d_out.as<uint16_t>(start * 2), len);
      std::string why = diff_bytes(got_packed.data(), want_packed.data(), got_packed.size());
      if (why.empty() && std::memcmp(got_absmax.data(), want_absmax.data(), want_absmax.size() * 4) != 0)
        why = "absmax differs";
      if (why.empty()) why = diff_words(got_out.data(), bits16(Dtype::bf16, want_out).data(), len, bf16_of);
      char name[160];
      std::snprintf(name, sizeof name, "n > 2^31 %s window at %lld (+%lld)", type_name(type),
                    (long long)start, (long long)len);
      report(name, why.empty(), why);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Arguments the wrappers refuse (an error code, never an abort) and n = 0 (nothing to do).

void check_arguments() {
  DeviceBuffer d(4096);
  BlockScale s;
  s.absmax = d.as<float>();
  auto deq = [&](int64_t n, int64_t bs, int qt, const BlockScale& sc) {
    return luatune::cuda::dequantize_4bit(d.as<uint8_t>(), n, bs, qt, sc, d.p, Dtype::f32, g_stream);
  };
  auto q = [&](int64_t n, int64_t bs, int qt) {
    return luatune::cuda::quantize_4bit(d.p, Dtype::f32, n, bs, qt, d.as<uint8_t>(), d.as<float>(), g_stream);
  };
  BlockScale none;
  BlockScale both = s;
  both.absmax_q = d.as<uint8_t>();
  bool ok = deq(0, 64, 0, s) == 0 && q(0, 64, 0) == 0;
  for (int64_t bs : {16, 48, 8192}) ok = ok && deq(100, bs, 0, s) != 0 && q(100, bs, 0) != 0;
  ok = ok && deq(100, 64, 2, s) != 0 && q(100, 64, 2) != 0 && deq(-1, 64, 0, s) != 0;
  ok = ok && deq(100, 64, 0, none) != 0 && deq(100, 64, 0, both) != 0;
  const int rc = q(100, 48, 0);
  ok = ok && luatune::cuda::error_string(rc) != nullptr && std::strlen(luatune::cuda::error_string(rc)) > 0;
  CUDA_OK(cudaStreamSynchronize(g_stream));
  report("bad arguments give error codes, n = 0 does nothing", ok);
}

}  // namespace

int main() {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 77;
  }
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  CUDA_OK(cudaStreamCreate(&g_stream));

  using nf4::QuantType;
  const int64_t big = 4096 * 4096;
  for (QuantType t : {QuantType::nf4, QuantType::fp4}) {
    // Random normal float32, three shapes (a full weight, an odd n, less than one block).
    for (int64_t n : {big, int64_t(12345), int64_t(50)}) {
      const auto v = normal_values(n, 1000 + n);
      for (int64_t bs : {64, 128, 4096}) check_quantize("normal", v, Dtype::f32, bs, t);
    }
    const auto odd = normal_values(12345, 7, 3.0f);
    for (int64_t bs : {32, 256, 512, 1024, 2048}) check_quantize("normal", odd, Dtype::f32, bs, t);
    check_quantize("normal", odd, Dtype::f32, 64, t, 1);
    // bf16 and f16 inputs.
    for (Dtype dt : {Dtype::bf16, Dtype::f16}) {
      for (int64_t n : {big, int64_t(12345)}) {
        const auto v = round_to(dt, normal_values(n, 2000 + n));
        for (int64_t bs : {64, 4096}) check_quantize("normal", v, dt, bs, t);
      }
      check_quantize("normal", round_to(dt, odd), dt, 32, t, 1);
    }
    // Edge values: zeros, thresholds and their neighbours, +-absmax, subnormals, NaN, inf.
    const auto edges = edge_values();
    for (Dtype dt : {Dtype::f32, Dtype::bf16, Dtype::f16})
      check_quantize("edges", round_to(dt, edges), dt, 64, t);
    check_quantize("edges", edges, Dtype::f32, 32, t, 1);

    // Dequantize, plain and double-quantized.
    for (bool nested : {false, true}) {
      for (int64_t n : {big, int64_t(12345), int64_t(50)})
        for (int64_t bs : {64, 4096}) check_dequantize(n, bs, t, nested, 256, false, 3000 + n + bs);
      check_dequantize(12345, 128, t, nested, 256, true, 11);
    }
    check_dequantize(1 << 20, 32, t, true, 128, false, 12);
  }
  check_arguments();
  check_huge();

  CUDA_OK(cudaStreamDestroy(g_stream));
  std::printf("%s: %d failure(s)\n", g_failures == 0 ? "ALL PASSED" : "FAILED", g_failures);
  return g_failures == 0 ? 0 : 1;
}
