// A decode step made for decoding on the CPU: one new token of one sequence through a float32 model,
// computed with plain loops over the weights' memory (AVX2/FMA where the CPU has them) instead of a
// dozen LibTorch ops per layer. Nothing is allocated per token: the scratch buffers and the KV cache
// (the model's own KVCache layout, which the LibTorch prefill fills) are sized once. q/k/v and
// gate/up are read as one pass over their rows each. The arithmetic is the model's forward pass
// (host/model/transformer.cpp) in float32; sums run in another order than MKL's, so logits agree to
// float32 rounding, not bit for bit. docs/generation.md.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "host/model/transformer.h"

namespace luatune {

// Why `model` cannot take the fast CPU decode step, or "" when it can: float32 weights on the CPU,
// no 4-bit weights, no enabled adapter or attention branch, no ZeRO residency, no softcaps and no
// Gemma 2 norms (those take the LibTorch path).
std::string decode_cpu_unsupported(const Model& model);

class DecodeCpu {
 public:
  // `cache` (batch 1, from model.new_cache) must outlive this object; the prefill fills its first
  // positions through model.forward, then each step() appends one.
  DecodeCpu(const Model& model, KVCache* cache);
  // Feeds `token` at position cache->length and returns its logits, (1, 1, V) float32, a view of a
  // buffer the next step() overwrites.
  at::Tensor step(int64_t token);

 private:
  const Model& model_;
  KVCache* cache_;
  std::vector<float> inv_freq_;  // (D/2), the model's RoPE frequencies
  double rope_scale_ = 1.0;      // YaRN's attention factor on cos and sin
  // scratch: residual x (C), normed h (C), q|k|v (H*D + 2*KV*D), attention out (H*D), scores (capacity),
  // gate|up (2I), logits (V)
  std::vector<float> x_, h_, qkv_, att_, scores_, gu_, logits_;
};

// y (rows) = W (rows, cols, row-major) x (cols) [+ bias]: the decode step's matrix-vector product,
// parallel over rows with LibTorch's intra-op threads. Exposed for tests and benchmarks.
void decode_matvec(const float* W, const float* x, float* y, int64_t rows, int64_t cols, const float* bias);

}  // namespace luatune
