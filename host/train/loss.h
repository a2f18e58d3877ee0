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
at::Tensor chunked_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                 int64_t chunk, double softcap);

}  // namespace luatune
