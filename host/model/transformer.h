// One decoder-only transformer for Llama, Mistral, Qwen2, Qwen3 and Gemma 2, with weights held as
// plain tensors under their Hugging Face names (so checkpoints, LoRA and pruning address them the
// same way), a KV cache for generation, and forward options for packed sequences.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/model/config.h"

namespace luatune {

struct Linear;
struct LayerWeights;
struct QuantState;  // host/quant/quant.h

// Replaces a Linear's computation (LoRA, QLoRA): given the base layer and x (..., in), returns
// (..., out). The base weight may be frozen, quantized or absent, as the adapter decides.
class LinearAdapter {
 public:
  virtual ~LinearAdapter() = default;
  virtual at::Tensor forward(const Linear& base, const at::Tensor& x) const = 0;
  // The adapter's own weights, named relative to the Linear ("lora_A.weight", ...): trained,
  // checkpointed and synchronised like any parameter.
  virtual std::vector<std::pair<std::string, at::Tensor*>> parameters() = 0;
  // Several Linears reading the same x (q/k/v, gate/up), this adapter on the first: their outputs
  // in order, computed together where the adapter can (LoRA reads x once for all down-projections),
  // or {} to have each Linear compute alone. The model knows no adapter by name; this is the hook.
  virtual std::vector<at::Tensor> forward_group(const std::vector<const Linear*>& group,
                                                const at::Tensor& x) const {
    return {};
  }
  bool training = false;  // dropout and the like apply only while training (Model::set_training)
  bool enabled = true;    // false: the Linear computes its base output (Model::set_adapters_enabled)
};

// An extra branch of a layer's attention whose output is added to o_proj's (LLaMA-Adapter's gated
// prompt, host/adapt/adaption_prompt.h). The model knows no branch by name: it runs, lists and
// switches branches through this interface, as it does Linears' adapters.
class AttentionBranch {
 public:
  virtual ~AttentionBranch() = default;
  // q (B, H, T, D): the layer's queries after RoPE. Returns (B, T, C) in q's dtype.
  virtual at::Tensor forward(const LayerWeights& layer, const ModelConfig& c, const at::Tensor& q) const = 0;
  // The branch's own weights, named relative to the layer's attention ("adaption_prompt", ...):
  // model.layers.{i}.self_attn.<name> in the model's adapter parameters.
  virtual std::vector<std::pair<std::string, at::Tensor*>> parameters() = 0;
  bool training = false;  // as LinearAdapter::training (Model::set_training)
  bool enabled = true;    // false: the layer computes its base output (Model::set_adapters_enabled)
};

struct Linear {
  at::Tensor weight;  // (out, in), as nn.Linear; 4-bit: the packed codes, uint8 ((out*in + 1) / 2, 1)
  at::Tensor bias;    // (out) or undefined
  std::shared_ptr<LinearAdapter> adapter;
  std::shared_ptr<QuantState> quant;  // set when the weight is 4-bit (QLoRA): its scales and shape
  at::Tensor forward(const at::Tensor& x) const;       // the adapter's forward when there is one
  at::Tensor base_forward(const at::Tensor& x) const;  // x W^T + b, dequantizing a 4-bit W on the fly
  at::Tensor dense_weight() const;  // W (out, in): the weight itself, or a 4-bit one dequantized
  int64_t out_features() const;
  int64_t in_features() const;
};

struct LayerWeights {         // model.layers.{i}.*
  at::Tensor input_norm;      // (C) input_layernorm
  Linear q, k, v, o;          // (H*D, C) (KV*D, C) (KV*D, C) (C, H*D) self_attn.{q,k,v,o}_proj
  at::Tensor q_norm, k_norm;  // (D) Qwen3 self_attn.{q,k}_norm
  at::Tensor post_attn_norm;  // (C) post_attention_layernorm
  at::Tensor pre_ff_norm;     // (C) Gemma 2 pre_feedforward_layernorm
  at::Tensor post_ff_norm;    // (C) Gemma 2 post_feedforward_layernorm
  Linear gate, up, down;      // (I, C) (I, C) (C, I) mlp.{gate,up,down}_proj
  // An adapter's extra attention branch (LLaMA-Adapter's prompt and gate), or null.
  std::shared_ptr<AttentionBranch> attn_branch;
};

// Keys and values of every layer for the positions seen so far: k[l], v[l] are (B, KV, capacity, D);
// positions [0, length) are filled.
struct KVCache {
  std::vector<at::Tensor> k, v;
  int64_t length = 0;
  int64_t capacity = 0;
};

// Soft or hard multipliers on structures, for training pruning masks (Sheared-LLaMA's masked
// forward; docs/pruning.md, "Masks" and "Sources"). Each is optional (undefined = 1):
//   layer (L): multiplies layer l's attention and MLP branch outputs (0 removes the layer);
//   head (L, H): multiplies each query head's attention output before o_proj;
//   intermediate (L, I): multiplies up_proj's output (MLP channel j);
//   hidden (C): multiplies the embedding output (untied models only: a tied lm_head would see it
//     twice), every branch output and every RMSNorm output; RMSNorm statistics then cover only the
//     channels where hidden != 0 (and Gemma 2's embedding scale is sqrt of their number), so the
//     masked model equals the model with those channels removed.
// Masks may require grad; they are captured by value, so recomputed layers see the same tensors.
struct StructureMasks {
  at::Tensor layer, head, intermediate, hidden;
};

// Where ForwardOptions::observe sees activations of decoder layer l (all (B, T, *)):
enum class Site {
  layer_in,   // (C) the residual stream entering the layer
  attn_in,    // (C) input_layernorm output: the input of q/k/v_proj
  attn_ctx,   // (H*D) attention output per head: the input of o_proj
  mlp_in,     // (C) the MLP's norm output: the input of gate/up_proj
  mlp_act,    // (I) act(gate) * up: the input of down_proj
  layer_out,  // (C) the residual stream leaving the layer (differentiable when training)
};

struct ForwardOptions {
  KVCache* cache = nullptr;  // when set: keys/values appended, positions continue from cache->length
  // (B, T) int64 positions; default arange from the cache length. Packed rows restart per document.
  at::Tensor positions;
  // (B, T) int64 document ids for packed rows: attention stays inside a document. Undefined = one.
  at::Tensor segments;
  bool last_only = false;  // logits for the last position only: (B, 1, V)
  // When set, decoder layer l runs as run_layer(l, layer, h) instead of layer(h): the trainer's
  // activation checkpointing (recompute in backward) and ZeRO-3 gathers plug in here. Ignored with a
  // KV cache.
  std::function<at::Tensor(int64_t, const std::function<at::Tensor(const at::Tensor&)>&, const at::Tensor&)>
      run_layer;
  // True when run_layer itself gathers each layer's sharded weights (a ZeRO-3 trainer); otherwise a
  // forward first makes every weight full (Model::ensure_full_weights).
  bool run_layer_gathers = false;
  const StructureMasks* masks = nullptr;  // see StructureMasks
  // Called with activations as they are computed (calibration statistics, hidden-state
  // distillation). Sites inside a layer (attn_in .. mlp_act) are reported only when run_layer is
  // unset (a recomputed layer would report twice); layer_in and layer_out always.
  std::function<void(int64_t layer, Site site, const at::Tensor& x)> observe;
};

// Where a model's decoder-layer weights live when a ZeRO-3 trainer shards them (host/dist/zero.h):
// between uses each rank holds only its slice, and the full tensors exist while acquired. Every
// call is collective (all ranks, same order).
class LayerResidency {
 public:
  virtual ~LayerResidency() = default;
  // Every layer's weights full until the trainer's next step (forward, generation, saving and
  // counting outside the trainer call this first; no-op when they already are).
  virtual void acquire_all() = 0;
};

// total = embedding + attention + mlp + norm + lm_head + adapter; trainable = base weights with
// requires_grad plus every adapter weight (what trainable_parameters() returns).
struct ParamCounts {
  int64_t total = 0, trainable = 0, embedding = 0, attention = 0, mlp = 0, norm = 0, lm_head = 0, adapter = 0;
};

class Model {
 public:
  ModelConfig config;
  at::Tensor embed;  // (V, C) model.embed_tokens
  std::vector<LayerWeights> layers;
  at::Tensor norm;         // (C) model.norm
  at::Tensor lm_head;      // (V, C); undefined when tie_word_embeddings
  std::string source_dir;  // where it was loaded from ("" for models.init)
  // Set by a ZeRO trainer; kept by the model too, so the weights can be gathered after the trainer is gone.
  std::shared_ptr<LayerResidency> residency;
  // Makes every weight full where a ZeRO-3 trainer sharded them (collective; no-op otherwise).
  void ensure_full_weights() const;

  // ids (B, T) int64 -> logits (B, T, V) in the model's dtype.
  at::Tensor forward(const at::Tensor& ids, const ForwardOptions& options = {}) const;
  // Hidden states after the final norm, (B, T, C); the trainer computes chunked losses from these.
  at::Tensor hidden(const at::Tensor& ids, const ForwardOptions& options = {}) const;
  at::Tensor logits(const at::Tensor& hidden) const;  // lm_head (+ Gemma 2 final softcap)
  // The three stages of hidden(), for layer-by-layer calibration: token embeddings (scaled,
  // masked) (B, T, C); decoder layers [begin, end) on a residual stream h (positions from
  // options.positions, else 0..T-1; no KV cache); the final norm.
  at::Tensor embed_input(const at::Tensor& ids, const ForwardOptions& options = {}) const;
  at::Tensor run_layers(const at::Tensor& h, int64_t begin, int64_t end,
                        const ForwardOptions& options = {}) const;
  at::Tensor final_norm(const at::Tensor& h, const ForwardOptions& options = {}) const;
  const at::Tensor& output_weight() const { return lm_head.defined() ? lm_head : embed; }

  // Every weight under its HF name, in checkpoint order (lm_head omitted when tied).
  std::vector<std::pair<std::string, at::Tensor*>> named_parameters();
  // Adapter weights under "<linear name>.<adapter param>", e.g.
  // "model.layers.0.self_attn.q_proj.lora_A.weight", then attention branches' under
  // "model.layers.{i}.self_attn.<branch param>" (LLaMA-Adapter: adaption_prompt, adaption_gate).
  std::vector<std::pair<std::string, at::Tensor*>> adapter_parameters();
  // What an optimizer updates: base weights with requires_grad, then every adapter weight.
  std::vector<std::pair<std::string, at::Tensor*>> trainable_parameters();
  void set_training(bool training);  // forwarded to every adapter
  // Turns every adapter off (the base model's outputs, e.g. DPO's reference without a second copy)
  // or back on; adapter weights are kept either way.
  void set_adapters_enabled(bool enabled);
  // The same, as tensors sharing storage with the weights (for saving and counting).
  std::vector<std::pair<std::string, at::Tensor>> state() const;
  ParamCounts count_parameters() const;

  KVCache new_cache(int64_t batch, int64_t capacity) const;
  at::ScalarType dtype() const;
  c10::Device device() const;
  // Moves and casts every base weight; adapter weights follow the device and keep their dtype
  // (LoRA keeps float32 adapters on a bf16 model, as PEFT does).
  void to(c10::Device device, at::ScalarType dtype);
};

// One weight the config implies: its HF name, where it lives in the model, its shape.
struct ParamSlot {
  std::string name;
  at::Tensor* tensor;
  std::vector<int64_t> shape;
  Linear* linear = nullptr;  // the Linear a weight/bias belongs to (adapters hang there)
  bool is_linear_weight() const { return linear && tensor == &linear->weight; }
  bool is_4bit() const { return is_linear_weight() && linear->quant; }  // packed codes (QLoRA)
};
// Every weight of m.config in checkpoint order (lm_head only when untied), sizing m.layers first.
// The single list of HF names: loading, saving, init and parameter access all walk it.
std::vector<ParamSlot> model_slots(Model& m);
// The expected HF tensor names and shapes for a config, in checkpoint order.
std::vector<std::pair<std::string, std::vector<int64_t>>> model_expected_tensors(const ModelConfig& c);

}  // namespace luatune
