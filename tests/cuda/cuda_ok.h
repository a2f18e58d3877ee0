// CUDA_OK(call): runs a CUDA runtime call and, when it fails, prints file:line, the call and CUDA's
// message, then exits 1. For the programs that drive the kernels directly (tests/cuda,
// bench/bench_nf4_kernels.cu), where nothing after a failed call can be trusted.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CUDA_OK(call)                                                                                    \
  do {                                                                                                   \
    cudaError_t e_ = (call);                                                                             \
    if (e_ != cudaSuccess) {                                                                             \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                                      \
    }                                                                                                    \
  } while (0)
