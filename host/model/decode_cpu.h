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
  // `caches` (each batch 1, from model.new_cache) must outlive this object; the prefill fills their
  // first positions through model.forward, then each step() appends one position to the sequences
  // it is given. Sequence i uses caches[i].
  DecodeCpu(const Model& model, std::vector<KVCache*> caches);
  DecodeCpu(const Model& model, KVCache* cache) : DecodeCpu(model, std::vector<KVCache*>{cache}) {}
  // Feeds `token` to sequence 0 at position caches[0]->length and returns its logits, (1, 1, V)
  // float32, a view of a buffer the next step() overwrites.
  at::Tensor step(int64_t token);
  // Feeds tokens[j] to sequence seqs[j] (each at most once) in one pass over the weights (every
  // weight row is read once for all of them) and returns their logits, (n, V) float32 in seqs'
  // order, a view the next step() overwrites. Each sequence's arithmetic is the same as alone, so
  // its logits equal one-at-a-time decoding's bit for bit.
  at::Tensor step(const std::vector<int64_t>& seqs, const std::vector<int64_t>& tokens);

 private:
  const Model& model_;
  std::vector<KVCache*> caches_;
  std::vector<float> inv_freq_;  // (D/2), the model's RoPE frequencies
  double rope_scale_ = 1.0;      // YaRN's attention factor on cos and sin
  // scratch, n rows each: residual x (C), normed h (C), q (H*D), k (KV*D), v (KV*D), attention out
  // (H*D), gate (I), up (I), logits (V); scores (capacity); cos/sin (n * D/2)
  std::vector<float> x_, h_, q_, k_, v_, att_, gate_, up_, logits_, scores_, cos_, sin_;
};

// Y (n, rows) = X (n, cols) W^T [+ bias] for W (rows, cols, row-major): each row of W read once for
// all n vectors, every vector's dot products computed as for n = 1 (so a batch gives each row the
// bits it gets alone). Parallel over rows with LibTorch's intra-op threads.
void decode_matmul(const float* W, const float* X, float* Y, int64_t n, int64_t rows, int64_t cols,
                   const float* bias);

// y (rows) = W (rows, cols, row-major) x (cols) [+ bias]: the decode step's matrix-vector product,
// parallel over rows with LibTorch's intra-op threads. Exposed for tests and benchmarks.
void decode_matvec(const float* W, const float* x, float* y, int64_t rows, int64_t cols, const float* bias);

}  // namespace luatune
