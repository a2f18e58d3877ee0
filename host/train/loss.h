// Losses the trainer computes from hidden states, never from full-vocabulary logits of a whole
// batch: cross-entropy through the LM head in chunks of rows, recomputed chunk by chunk in backward.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace luatune {

// Sum over rows with target != -100 of -log softmax(softcap(hidden @ weight^T))[target], in float32.
// hidden (N, C) any float dtype; weight (V, C); targets (N) int64. Only `chunk` rows of logits
// (chunk x V, float32) exist at any time, forward or backward. softcap > 0 applies Gemma 2's final
// tanh(z / cap) * cap. Differentiable with respect to hidden and weight.
at::Tensor chunked_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight,
                                 const at::Tensor& targets, int64_t chunk, double softcap);

// Per row: log softmax(softcap(hidden @ weight^T))[target] as float32 (N); rows whose target is
// -100 give 0. The same chunking as chunked_cross_entropy (nothing of the logits is kept for
// backward); differentiable with respect to hidden and weight with any gradient per row. The
// sequence log-probabilities of preference losses are sums of these.
at::Tensor chunked_token_logprobs(const at::Tensor& hidden, const at::Tensor& weight,
                                  const at::Tensor& targets, int64_t chunk, double softcap);

}  // namespace luatune
