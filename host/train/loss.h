// Losses the trainer computes from hidden states, never from full-vocabulary logits of a whole
// batch: a fused cross-entropy through the LM head (its gradients formed chunk by chunk in the
// forward pass) and per-row target log-probabilities (recomputed chunk by chunk in backward).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace luatune {

// Sum over rows with target != -100 of -log softmax(softcap(hidden @ weight^T))[target], in float32.
// hidden (N, C) and weight (V, C) of one float dtype; targets (N) int64. softcap > 0 applies Gemma
// 2's final tanh(z / cap) * cap. Fused: with autograd on and hidden or weight requiring grad, the
// forward pass also forms the gradients of the sum (none for a weight that does not require grad)
// and backward scales them by its incoming gradient, so the logits are never recomputed; a second
// backward through the same result fails. Only `chunk` rows of logits exist at once, in the model
// dtype, with float32 working blocks of 1/16 of the vocabulary.
at::Tensor chunked_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight,
                                 const at::Tensor& targets, int64_t chunk, double softcap);

// Per row: log softmax(softcap(hidden @ weight^T))[target] as float32 (N); rows whose target is
// -100 give 0. Chunked like chunked_cross_entropy but not fused (each row's gradient differs, so
// backward recomputes each chunk's float32 logits); differentiable with respect to hidden and weight with any
// gradient per row. The sequence log-probabilities of preference losses are sums of these.
at::Tensor chunked_token_logprobs(const at::Tensor& hidden, const at::Tensor& weight,
                                  const at::Tensor& targets, int64_t chunk, double softcap);

}  // namespace luatune
