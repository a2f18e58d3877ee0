// The decoder layer's element-wise chains as single autograd nodes with hand-written backwards:
// RMSNorm, RoPE and the gated MLP activation. Each saves the least its backward needs and runs one
// CUDA kernel per direction on a GPU (kernels/fused_cuda.h), ATen compositions elsewhere. Outputs
// equal HF's modules (same float32 maths, same rounding points); gradients are computed in float32
// and rounded once, so in bf16 they are closer to exact than autograd through HF's casts.
#pragma once

#include <ATen/core/Tensor.h>

#include "host/model/config.h"

namespace luatune {

// RMSNorm over the last dim of x (..., C) with weight w (C), as HF's LlamaRMSNorm (w * n cast to
// x's dtype) or, with `gemma`, Gemma 2's (n * (1 + w) in float32, then cast). Saves x and the
// per-row rstd (float32).
at::Tensor rms_norm_fused(const at::Tensor& x, const at::Tensor& w, double eps, bool gemma);

// RoPE on q or k laid out (B, T, heads, D), before the transpose to (B, heads, T, D); cos and sin
// (B, T, D) in x's dtype, from rope_cos_sin. Returns x * cos + rotate_half(x) * sin, (B, T, heads,
// D) contiguous. Saves only cos and sin.
at::Tensor rope_fused(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// act(gate) * up for the gated MLP (SwiGLU with act_silu, GeGLU with the gelus); gate and up of one
// shape. Saves gate and up; the CUDA kernel recomputes act(gate) in the backward, the CPU path
// keeps it (another pass over (B, T, I) would cost the CPU more than the memory saves).
at::Tensor glu_fused(const at::Tensor& gate, const at::Tensor& up, Activation act);

}  // namespace luatune
