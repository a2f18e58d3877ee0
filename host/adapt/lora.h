// LoRA and DoRA adapters on the model's Linear projections, in and out of PEFT's format
// (adapter_config.json + adapter_model.safetensors), and merging them into the base weights.
// Math and names as huggingface/peft does them, with the PEFT source of each and where we depart
// from it: docs/lora.md ("The maths", "PEFT's files").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/model/transformer.h"

namespace luatune {

// The projections LoRA can target, by their HF module names (model.layers.{i}.*.<name>).
// "all-linear" in LoraConfig::targets stands for all seven, as in PEFT (lm_head excluded).
extern const char* const kLoraTargetNames[7];  // q_proj k_proj v_proj o_proj gate_proj up_proj down_proj

struct LoraConfig {
  int64_t r = 16;
  double alpha = 32;
  double dropout = 0.05;  // on the adapter's input, while training only
  // Entries match a Linear whose HF module name ("model.layers.0.self_attn.q_proj") equals the
  // entry or ends in "." + entry, as PEFT's list matching does; "all-linear" = the seven above.
  std::vector<std::string> targets = {"q_proj", "k_proj", "v_proj", "o_proj"};
  // When non-empty, replaces `targets`: a regex that must match the whole module name (PEFT's
  // string form of target_modules).
  std::string target_regex;
  bool rslora = false;          // scale alpha/sqrt(r) instead of alpha/r
  bool dora = false;            // weight-decomposed LoRA
  std::vector<int64_t> layers;  // HF layer numbers to adapt (0-based, as in the names); empty = all

  double scale() const;
};

// One adapted Linear: output = base(x) + B(A(dropout(x))) * scale, or DoRA's variant. Weights are
// float32 masters whatever the base dtype (PEFT's default autocast_adapter_dtype upcasts bf16/fp16
// adapters). LoRA computes in x's dtype through lora_linear; DoRA casts x to float32 for the
// adapter path and the sum back to the base dtype, as PEFT does without autocast.
class LoraAdapter : public LinearAdapter {
 public:
  LoraAdapter(int64_t r, double alpha, double dropout, bool rslora, bool dora);

  at::Tensor forward(const Linear& base, const at::Tensor& x) const override;
  std::vector<at::Tensor> forward_group(const std::vector<const Linear*>& group,
                                        const at::Tensor& x) const override;
  std::vector<std::pair<std::string, at::Tensor*>> parameters() override;

  // The base weight with this adapter folded in, in float32 (out, in): W + scale * B @ A, for
  // DoRA scaled per output row by m / ||W + scale * B @ A|| (PEFT's merge).
  at::Tensor merged_weight(const Linear& base) const;
  // DoRA's ||W + scale * B @ A|| per output row, float32 (out): the magnitude's initial value and,
  // detached, the forward's normaliser. One function for both so that at init m / norm == 1 exactly.
  at::Tensor dora_weight_norm(const at::Tensor& weight) const;

  int64_t r;
  double alpha, dropout;
  bool rslora, dora;
  double scale;
  at::Tensor lora_A;     // (r, in) float32
  at::Tensor lora_B;     // (out, r) float32
  at::Tensor magnitude;  // (out) float32, DoRA only: PEFT's lora_magnitude_vector
};

// LoRA's forward in x's dtype (the compute dtype, bf16 on a GPU): x W^T (+ b) + scale *
// (dropout(x) A^T) B^T with A (r, in) and B (out, r) cast to x's dtype for the products and their
// gradients returned in their own dtype (float32 masters). One custom autograd function with a
// hand-written backward (dx, dA, dB; no dW for the frozen, possibly 4-bit, base); a base weight
// or bias that requires grad takes the same sum composed from autograd ops instead. dropout > 0
// drops x for the adapter path only (pass 0 when not training). x (..., in) -> (..., out).
at::Tensor lora_linear(const Linear& linear, const at::Tensor& x, const at::Tensor& lora_A,
                       const at::Tensor& lora_B, double scale, double dropout);

// The forwards of Linears that read the same x (q/k/v, gate/up): linears[i]->forward(x) each, but
// the down-projections of the plain LoRA adapters among them (enabled, no dropout being drawn,
// frozen base) are one product over their stacked A's, forward and backward, so x is read once
// for all of them. Others (DoRA, dropout while training, no adapter) take their own forward.
std::vector<at::Tensor> lora_linear_group(const std::vector<const Linear*>& linears, const at::Tensor& x);

// Wraps every Linear that `config` targets in a LoraAdapter: A ~ kaiming_uniform(a=sqrt(5)) =
// U(-1/sqrt(in), 1/sqrt(in)) drawn in float32 on CPU from `seed` in checkpoint order, B = 0 (so
// the model's output is unchanged), DoRA magnitude = ||W|| per output row. Freezes every base
// weight (requires_grad false), embeddings and norms included. Fails if the model already has
// adapters or a target matches nothing. Returns the number of Linears adapted.
int64_t lora_apply(Model& model, const LoraConfig& config, uint64_t seed);

// The LoRA settings the model's adapters were applied with (targets as PEFT would list them).
LoraConfig lora_config_of(Model& model);

// Writes `dir`/adapter_config.json and `dir`/adapter_model.safetensors as PEFT saves them
// (tensor names base_model.model.<HF module>.lora_A.weight, ...), each file atomically.
void lora_save(Model& model, const std::string& dir, const std::string& base_model_name_or_path);

// Reads a PEFT LoRA/DoRA adapter directory, applies its config to `model` and loads its weights
// (converted to float32 on the model's device). Every tensor must match an adapter, every adapter
// weight must be present with PEFT's shape. Returns the config read. An ADAPTION_PROMPT directory
// fails with a hint naming adaption_prompt_load (host/adapt/adaption_prompt.h).
LoraConfig lora_load(Model& model, const std::string& dir);

// Folds every adapter into its base weight (in float32, cast back to the base dtype) and removes
// the adapters; base weights stay frozen. model_save then writes a plain HF model. Fails on a model
// with adaption prompts (nothing to fold them into).
void lora_merge(Model& model);

}  // namespace luatune
