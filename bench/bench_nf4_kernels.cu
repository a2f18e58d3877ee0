// bench_nf4_kernels: the NF4 dequantize kernel (host/quant/kernels/nf4_cuda.cu) on an 8B-class
// weight (4096 x 14336, blocksize 64) to bf16, against a naive two-pass peer written here (unpack
// every code to a byte, then gather code * absmax per element), timed with CUDA events in the same
// run. Prints GB/s of the minimum traffic (packed + scales read, bf16 written) for both and their
// ratio; the CPU reference's ns/element is context. Exits 77 without a CUDA device.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "host/quant/kernels/nf4_cuda.h"
#include "host/quant/nf4.h"
#include "tests/cuda/cuda_ok.h"

namespace {

// ---------------------------------------------------------------------------------------------
// The peer: how dequantization reads when written the obvious way, one element per thread.

__constant__ float kNF4Peer[16];  // filled from nf4::kNF4Code

__global__ void peer_unpack(const uint8_t* packed, int64_t n, uint8_t* codes) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint8_t byte = packed[i / 2];
  codes[i] = (i % 2 == 0) ? (byte >> 4) : (byte & 0xF);
}

__global__ void peer_scale(const uint8_t* codes, const float* absmax, int64_t n, int64_t blocksize,
                           __nv_bfloat16* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = __float2bfloat16_rn(__fmul_rn(kNF4Peer[codes[i]], absmax[i / blocksize]));
}

// Mean milliseconds per call of fn over `iters` calls after 3 warm-up calls.
template <typename F>
float time_ms(F fn, int iters) {
  for (int i = 0; i < 3; i++) fn();
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  CUDA_OK(cudaEventRecord(a));
  for (int i = 0; i < iters; i++) fn();
  CUDA_OK(cudaEventRecord(b));
  CUDA_OK(cudaEventSynchronize(b));
  float ms = 0.0f;
  CUDA_OK(cudaEventElapsedTime(&ms, a, b));
  CUDA_OK(cudaEventDestroy(a));
  CUDA_OK(cudaEventDestroy(b));
  return ms / iters;
}

void must(int rc, const char* what) {
  if (rc != 0) {
    std::fprintf(stderr, "%s: %s\n", what, luatune::cuda::error_string(rc));
    std::exit(1);
  }
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("bench_nf4_kernels: no CUDA device, nothing to measure (skipped)\n");
    return 77;
  }
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));

  const int64_t rows = 4096, cols = 14336, n = rows * cols, blocksize = 64;
  const int64_t blocks = n / blocksize, packed_bytes = n / 2;
  const int iters = 50;
  std::mt19937_64 rng(1);
  std::vector<uint8_t> packed(packed_bytes);
  for (auto& b : packed) b = static_cast<uint8_t>(rng() & 0xFF);
  std::vector<float> absmax(blocks);
  std::uniform_real_distribution<float> u(0.01f, 0.2f);
  for (auto& a : absmax) a = u(rng);

  uint8_t *d_packed, *d_codes;
  float* d_absmax;
  __nv_bfloat16 *d_out, *d_peer;
  CUDA_OK(cudaMalloc(&d_packed, packed_bytes));
  CUDA_OK(cudaMalloc(&d_codes, n));
  CUDA_OK(cudaMalloc(&d_absmax, blocks * 4));
  CUDA_OK(cudaMalloc(&d_out, n * 2));
  CUDA_OK(cudaMalloc(&d_peer, n * 2));
  CUDA_OK(cudaMemcpy(d_packed, packed.data(), packed_bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_absmax, absmax.data(), blocks * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpyToSymbol(kNF4Peer, luatune::nf4::kNF4Code, sizeof(kNF4Peer)));

  luatune::cuda::BlockScale scale;
  scale.absmax = d_absmax;
  auto ours = [&] {
    must(luatune::cuda::dequantize_4bit(d_packed, n, blocksize, 0, scale, d_out, luatune::cuda::Dtype::bf16,
                                        nullptr),
         "dequantize_4bit");
  };
  const unsigned grid = static_cast<unsigned>((n + 255) / 256);
  auto peer = [&] {
    peer_unpack<<<grid, 256>>>(d_packed, n, d_codes);
    peer_scale<<<grid, 256>>>(d_codes, d_absmax, n, blocksize, d_peer);
  };
  const float ms_ours = time_ms(ours, iters);
  const float ms_peer = time_ms(peer, iters);
  CUDA_OK(cudaGetLastError());

  // Same bits from both, or the comparison means nothing.
  std::vector<uint16_t> a(n), b(n);
  CUDA_OK(cudaMemcpy(a.data(), d_out, n * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(b.data(), d_peer, n * 2, cudaMemcpyDeviceToHost));
  const bool same = std::memcmp(a.data(), b.data(), n * 2) == 0;

  // Quantizing the bf16 weight back (for scale; no peer).
  float* d_absmax2;
  uint8_t* d_packed2;
  CUDA_OK(cudaMalloc(&d_absmax2, blocks * 4));
  CUDA_OK(cudaMalloc(&d_packed2, packed_bytes));
  const float ms_quant = time_ms(
      [&] {
        must(luatune::cuda::quantize_4bit(d_out, luatune::cuda::Dtype::bf16, n, blocksize, 0, d_packed2,
                                          d_absmax2, nullptr),
             "quantize_4bit");
      },
      iters);

  // The CPU reference on a 4M-element slice, single thread, float32 out.
  const int64_t cpu_n = int64_t(1) << 22;
  std::vector<float> cpu_out(cpu_n);
  const auto t0 = std::chrono::steady_clock::now();
  luatune::nf4::dequantize_4bit(packed.data(), absmax.data(), cpu_n, blocksize, luatune::nf4::QuantType::nf4,
                                cpu_out.data());
  const double cpu_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / cpu_n;

  const double bytes = double(packed_bytes) + double(blocks) * 4 + double(n) * 2;  // the minimum traffic
  const double quant_bytes = double(n) * 2 + double(packed_bytes) + double(blocks) * 4;
  std::printf(
      "bench_nf4_kernels on %s: NF4 %lld x %lld, blocksize %lld, bf16 out, mean of %d calls (CUDA events)\n",
      prop.name, (long long)rows, (long long)cols, (long long)blocksize, iters);
  std::printf("  dequantize_4bit (ours)        %8.3f ms  %7.1f GB/s\n", ms_ours, bytes / ms_ours / 1e6);
  std::printf("  two-pass peer (unpack+gather) %8.3f ms  %7.1f GB/s  (same bits: %s)\n", ms_peer,
              bytes / ms_peer / 1e6, same ? "yes" : "NO");
  std::printf("  ratio peer / ours             %8.2fx\n", ms_peer / ms_ours);
  std::printf("  quantize_4bit from bf16       %8.3f ms  %7.1f GB/s\n", ms_quant,
              quant_bytes / ms_quant / 1e6);
  std::printf("  CPU reference dequantize      %8.2f ns/element (1 thread, f32 out; context only)\n", cpu_ns);

  cudaFree(d_packed);
  cudaFree(d_codes);
  cudaFree(d_absmax);
  cudaFree(d_out);
  cudaFree(d_peer);
  cudaFree(d_absmax2);
  cudaFree(d_packed2);
  return same ? 0 : 1;
}
