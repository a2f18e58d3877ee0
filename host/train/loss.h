// Losses the trainer computes from hidden states, never from full-vocabulary logits of a whole
// batch: a fused cross-entropy through the LM head (its gradients formed chunk by chunk in the
// forward pass) and per-row target log-probabilities (recomputed chunk by chunk in backward).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace luatune {

// How chunked_cross_entropy turns each chunk's logits into its loss and gradient.
//   ce_path_auto: the one-pass kernel on CUDA (builds with the kernels; f32 / bf16 / f16 heads),
//     the blocks elsewhere.
//   ce_path_blocks: float32 vocabulary blocks through ATen, several passes over each (the CPU path,
//     and the reference the one-pass path is defined to agree with).
//   ce_path_one_pass: cross_entropy_rows_ (the CUDA kernel, or its CPU reference off CUDA).
enum class CrossEntropyPath { ce_path_auto, ce_path_blocks, ce_path_one_pass };

// Sum over rows with target != -100 of -log softmax(softcap(hidden @ weight^T))[target], in float32.
// hidden (N, C) and weight (V, C) of one float dtype; targets (N) int64. softcap > 0 applies Gemma
// 2's final tanh(z / cap) * cap. Fused: with autograd on and hidden or weight requiring grad, the
// forward pass also forms the gradients of the sum (none for a weight that does not require grad)
// and backward scales them by its incoming gradient, so the logits are never recomputed; a second
// backward through the same result fails. Only `chunk` rows of logits exist at once, in the model
// dtype, with float32 working blocks of 1/16 of the vocabulary (none on the one-pass path, except
// for an fp16 head's float32 gradient sums). A target outside [0, V) other than -100 makes the loss
// NaN on the one-pass path and fails on the blocks.
at::Tensor chunked_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight,
                                 const at::Tensor& targets, int64_t chunk, double softcap,
                                 CrossEntropyPath path = CrossEntropyPath::ce_path_auto);

// The one-pass cross-entropy of a block of logits rows z (n, V), in place: per row, with
// x = softcap > 0 ? softcap * tanh(z / softcap) : z, returns lse(x) - x[target] (n), 0 for a row
// whose target is -100 and NaN for a target outside [0, V); with write_grad, z becomes
// d loss / d z = (softmax(x) - onehot(target)) * (softcap > 0 ? 1 - tanh(z / softcap)^2 : 1) in its
// dtype, all zeros on ignored rows. The result is float32 (float64 for a float64 z). On CUDA
// (f32 / bf16 / f16, contiguous) host/train/kernels/cross_entropy_cuda.cu reads each row once for
// an online softmax and once for the gradient; elsewhere the same arithmetic runs on float32
// vocabulary blocks through ATen, the reference the kernel is tested against.
at::Tensor cross_entropy_rows_(const at::Tensor& z, const at::Tensor& targets, double softcap,
                               bool write_grad);

// Per row: log softmax(softcap(hidden @ weight^T))[target] as float32 (N); rows whose target is
// -100 give 0. Chunked like chunked_cross_entropy but not fused (each row's gradient differs, so
// backward recomputes each chunk's float32 logits); differentiable with respect to hidden and weight with any
// gradient per row. The sequence log-probabilities of preference losses are sums of these.
at::Tensor chunked_token_logprobs(const at::Tensor& hidden, const at::Tensor& weight,
                                  const at::Tensor& targets, int64_t chunk, double softcap);

}  // namespace luatune
