// Rotary position embeddings as HF computes them: inverse frequencies per rope_type (default,
// linear, llama3, yarn) in float32, cos/sin from positions, and rotate_half application.
// Facts and sources: docs/hf_models.md, "Rotary position embeddings".
#pragma once

#include <ATen/core/Tensor.h>

#include "host/model/config.h"

namespace luatune {

// (head_dim / 2) float32 inverse frequencies for `c` (before any attention scaling).
at::Tensor rope_inv_freq(const ModelConfig& c);
// cos and sin, each (B, 1, T, head_dim) in `dtype`, for int64 positions (B, T).
std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& inv_freq, const at::Tensor& positions,
                                               double attention_scaling, at::ScalarType dtype);
// x (B, heads, T, D): x * cos + rotate_half(x) * sin.
at::Tensor rope_apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace luatune
