// Attention for every model: LibTorch's fused scaled_dot_product_attention (flash /
// memory-efficient kernels on CUDA) wherever the maths allows it, else an explicit fp32-softmax
// path. SDPA has no logit softcapping, so Gemma 2 takes the explicit path, as HF's own eager
// attention does. Grouped KV heads go to SDPA as they are (enable_gqa) where a fused backend takes
// them, else repeated to the query heads first.
#pragma once

#include <ATen/ATen.h>
#include <ATen/SDPBackend.h>

#include <limits>

namespace luatune {

// (B, KV, S, D) -> (B, H, S, D): each KV head serves H/KV consecutive query heads.
inline at::Tensor repeat_kv(const at::Tensor& x, int64_t groups) {
  if (groups == 1) return x;
  auto s = x.sizes();
  return x.unsqueeze(2).expand({s[0], s[1], groups, s[2], s[3]}).reshape({s[0], s[1] * groups, s[2], s[3]});
}

// The explicit path: scores in q's dtype (as HF's eager attention), optional softcap, softmax in
// float32. q (B, H, T, D); k, v (B, H, S, D) (KV heads already repeated); `allowed` as for
// attention_forward.
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

// q (B, H, T, D); k, v (B, KV, S, D), KV dividing H (each KV head serves H/KV consecutive query
// heads); `allowed` is a bool mask broadcastable to (B, H, T, S), true where query t may attend key
// s, or undefined meaning plain causal attention with T == S. `softcap` > 0 applies
// tanh(s / cap) * cap to the scores. Returns (B, H, T, D) in q's dtype.
inline at::Tensor attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const at::Tensor& allowed, double scale, double softcap) {
  const int64_t groups = q.size(1) / k.size(1);
  if (softcap > 0)
    return attention_explicit(q, repeat_kv(k, groups), repeat_kv(v, groups), allowed, scale, softcap);
  const bool causal = !allowed.defined();
  const std::optional<at::Tensor> mask = causal ? std::optional<at::Tensor>() : allowed;
  // enable_gqa saves the repeated copies of k and v (and their gradients), but in LibTorch 2.11
  // only CUDA's flash (no mask) and cuDNN backends take grouped heads; the memory-efficient one
  // and the CPU's flash do not, and SDPA would fall back to its math path, which repeats k and v
  // itself and is slower than those kernels. So ask SDPA which backend grouped heads would get, and
  // repeat here when that is the math path.
  if (groups > 1 && (q.is_cuda() || q.is_cpu()) &&
      at::_fused_sdp_choice(q, k, v, mask, 0.0, causal, scale, true) !=
          static_cast<int64_t>(at::SDPBackend::math))
    return at::scaled_dot_product_attention(q, k, v, mask, 0.0, causal, scale, true);
  return at::scaled_dot_product_attention(q, repeat_kv(k, groups), repeat_kv(v, groups), mask, 0.0, causal,
                                          scale);
}

}  // namespace luatune
