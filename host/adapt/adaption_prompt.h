// LLaMA-Adapter (Zhang et al. 2023, arXiv:2303.16199) as PEFT implements it (peft_type
// ADAPTION_PROMPT): in each of the top `adapter_layers` decoder layers, a learnable prompt of
// `adapter_len` vectors is projected through the layer's frozen k_proj / v_proj, the layer's queries
// attend to it (no mask, no RoPE on the prompt), and a zero-initialised gate scales the result
// before o_proj, so the model starts out exactly the base model. Maths, PEFT's layout and where we
// depart from it: docs/lora.md, section "LLaMA-Adapter".
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "host/model/transformer.h"

namespace luatune {

struct AdaptionPromptConfig {
  int64_t adapter_len = 10;     // prompt vectors per adapted layer
  int64_t adapter_layers = 30;  // adapted layers, counted from the top (the last ones)
};

// One adapted layer's weights, held as its LayerWeights::attn_branch. Both float32 whatever the
// model's dtype (as LoRA adapters); the forward casts them to the model's dtype, where PEFT keeps them.
struct AdaptionPrompt : AttentionBranch {
  at::Tensor prompt;  // (1, adapter_len, C) float32: PEFT's adaption_prompt
  at::Tensor gate;    // (1) float32, zero at init: PEFT's adaption_gate

  // The adapter branch of layer `L`'s attention, added to o_proj's output by the layer:
  //   K, V = k_proj(prompt), v_proj(prompt)                 (1, KV, A, D), KV heads repeated to H
  //   out  = o_proj_nobias((gate * softmax_f32(q K^T / sqrt(D))) V)
  // q (B, H, T, D) are the layer's queries after RoPE. Returns (B, T, C) in q's dtype.
  at::Tensor forward(const LayerWeights& L, const ModelConfig& c, const at::Tensor& q) const override;
  // "adaption_prompt" and "adaption_gate", PEFT's names under self_attn.
  std::vector<std::pair<std::string, at::Tensor*>> parameters() override;
};

// Layer `L`'s adaption prompt, or null when its attention has no branch or another kind.
AdaptionPrompt* adaption_prompt_of(const LayerWeights& L);

// Adds an AdaptionPrompt to each of the top config.adapter_layers layers: prompt ~ N(0, 1) (PEFT
// follows the paper's nn.Embedding init), drawn in float32 on CPU from `seed`, lowest adapted
// layer first; gate = 0. Freezes every base weight. Fails if the model already has adapters (LoRA
// or adaption prompts: the two are not combined), if adapter_len < 1, if adapter_layers is not in
// 1..num_layers, or for architectures PEFT's maths does not cover (Qwen3's k_norm, Gemma 2's
// softcaps). Returns the number of layers adapted.
int64_t adaption_prompt_apply(Model& model, const AdaptionPromptConfig& config, uint64_t seed);

// True when some layer carries an adaption prompt.
bool adaption_prompt_present(const Model& model);

// The settings the model's adaption prompts were applied with.
AdaptionPromptConfig adaption_prompt_config_of(const Model& model);

// Writes `dir`/adapter_config.json (peft_type ADAPTION_PROMPT) and `dir`/adapter_model.safetensors
// (base_model.model.model.layers.{i}.self_attn.adaption_prompt / .adaption_gate), as PEFT saves
// them, each file atomically.
void adaption_prompt_save(Model& model, const std::string& dir, const std::string& base_model_name_or_path);

// Reads a PEFT ADAPTION_PROMPT directory, applies its config to `model` and loads its weights
// (float32, on the model's device). Returns the config read.
AdaptionPromptConfig adaption_prompt_load(Model& model, const std::string& dir);

}  // namespace luatune
