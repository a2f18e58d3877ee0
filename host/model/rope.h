// Rotary position embeddings as HF computes them: inverse frequencies per rope_type (default,
// linear, llama3, yarn) in float32, cos/sin from positions, and rotate_half application.
// Facts and sources: docs/hf_models.md, "Rotary position embeddings".
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <utility>

#include "host/model/config.h"

namespace luatune {

// (head_dim / 2) float32 inverse frequencies for `c` (before any attention scaling).
at::Tensor rope_inv_freq(const ModelConfig& c);
// The same on `device`, computed once per (RoPE parameters, head_dim, device) and kept for the
// process: the forward pass used to rebuild it on the CPU and copy it over at every call.
at::Tensor rope_inv_freq_on(const ModelConfig& c, c10::Device device);
// cos and sin, each (B, T, head_dim) in `dtype`, for int64 positions (B, T), computed on the
// positions' device (inv_freq must be there too).
std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& inv_freq, const at::Tensor& positions,
                                               double attention_scaling, at::ScalarType dtype);
// x * cos + rotate_half(x) * sin over the last dim, cos and sin broadcast to x: the plain
// composition, kept as the reference for rope_fused (host/model/fused.h).
at::Tensor rope_apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace luatune
