// Attention for every model: LibTorch's fused scaled_dot_product_attention (flash /
// memory-efficient kernels on CUDA) wherever the maths allows it, else an explicit fp32-softmax
// path. SDPA has no logit softcapping, so Gemma 2 takes the explicit path, as HF's own eager
// attention does.
#pragma once

#include <ATen/ATen.h>

#include <limits>

namespace luatune {

// The explicit path: scores in q's dtype (as HF's eager attention), optional softcap, softmax in
// float32. q (B, H, T, D); k, v (B, H, S, D); `allowed` as for attention_forward.
inline at::Tensor attention_explicit(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& allowed, double scale, double softcap) {
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * scale;  // (B, H, T, S)
  if (softcap > 0) scores = at::tanh(scores / softcap) * softcap;
  scores = scores.to(at::kFloat);
  at::Tensor mask = allowed;
  if (!mask.defined()) {
    int64_t t = q.size(-2), s = k.size(-2);
    mask = at::ones({t, s}, q.options().dtype(at::kBool)).tril(s - t);
  }
  scores = scores.masked_fill(mask.logical_not(), -std::numeric_limits<float>::infinity());
  at::Tensor probs = at::softmax(scores, -1).to(q.scalar_type());
  return at::matmul(probs, v);
}

// q (B, H, T, D); k, v (B, H, S, D) with KV heads already repeated to H; `allowed` is a bool mask
// broadcastable to (B, H, T, S), true where query t may attend key s, or undefined meaning plain
// causal attention with T == S. `softcap` > 0 applies tanh(s / cap) * cap to the scores.
// Returns (B, H, T, D) in q's dtype.
inline at::Tensor attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& allowed, double scale, double softcap) {
  if (softcap > 0) return attention_explicit(q, k, v, allowed, scale, softcap);
  if (!allowed.defined()) return at::scaled_dot_product_attention(q, k, v, {}, 0.0, true, scale);
  return at::scaled_dot_product_attention(q, k, v, allowed, 0.0, false, scale);
}

}  // namespace luatune
