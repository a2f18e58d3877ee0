// The memory planner: exact parameter counts from a ModelConfig, and the peak GPU memory of a
// training configuration as luatune's trainer allocates it (weights by dtype, fp32 master copies,
// gradients, fp32 AdamW moments, LoRA/QLoRA, activations with and without checkpointing, the
// chunked cross-entropy's logits, DDP buckets, CUDA context and allocator overhead); per catalog GPU:
// fits or not, the largest micro-batch that fits, and what to change. Formulas: docs/hardware.md.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "host/hw/catalog.h"
#include "host/model/config.h"

namespace luatune {

struct HwParamCounts {
  int64_t total = 0;      // every parameter once (a tied LM head is the embedding)
  int64_t embedding = 0;  // input embedding table, V * C
  int64_t lm_head = 0;    // untied output projection, V * C (0 when tied)
  int64_t linear = 0;     // all layers' q/k/v/o/gate/up/down weights and biases
  int64_t norms = 0;      // RMSNorm weights (and Qwen3's q/k norms)
  int64_t matmul = 0;     // parameters in matmuls (MFU's N): total - embedding, + V*C when tied
  int64_t largest_linear = 0;  // the biggest single projection (QLoRA dequantises one at a time)
};
HwParamCounts hw_param_counts(const ModelConfig& c);
// Adapter parameters of LoRA rank r on `targets` (HF projection names or "all-linear"): r * (in + out) each.
int64_t hw_lora_params(const ModelConfig& c, int64_t r, const std::vector<std::string>& targets);

enum class PlanMethod { method_full, method_lora, method_qlora };
PlanMethod plan_method_parse(const std::string& name);  // "full", "lora", "qlora"
std::string plan_method_name(PlanMethod m);

struct PlanOptions {
  PlanMethod method = PlanMethod::method_full;
  std::string dtype = "bf16";      // the model's weights: "bf16", "fp16" or "fp32"
  bool master_weights = true;      // fp32 master copies of low-precision trainable weights (the trainer's default)
  std::string optimizer = "adamw";  // "adamw" (two fp32 moments) or "sgd" (fp32 momentum when momentum > 0)
  bool sgd_momentum = false;
  int64_t lora_r = 16;
  double lora_dropout = 0.05;      // > 0: the adapter keeps its dropped input and a mask
  std::vector<std::string> lora_targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  int64_t micro_batch = 1;         // rows per forward/backward (the trainer's micro_batch_size)
  int64_t seq_len = 2048;          // tokens per row (max_length)
  bool checkpointing = false;      // checkpoint_layers: recompute each layer in backward
  int64_t loss_chunk = 4096;       // rows of logits the chunked cross-entropy materialises at once
  int64_t gpus = 1;                // data-parallel replicas (everything is replicated per GPU)
  bool sdpa = true;                // fused attention (no T x T scores) unless the model softcaps its attention logits
};

// Bytes, per GPU.
struct PlanComponents {
  double weights = 0;           // the model's weights (QLoRA: NF4 linears + 16-bit embeddings, norms, head)
  double adapters = 0;          // LoRA A/B, float32
  double master_weights = 0;    // fp32 copies of bf16/fp16 trainable weights
  double gradients = 0;         // in the trainable weights' dtype
  double optimizer_states = 0;  // AdamW exp_avg + exp_avg_sq, float32
  double activations = 0;       // saved for backward, all layers + one layer's working set
  double logits = 0;            // one loss chunk of logits (+ the head's fp32 gradient when it trains)
  double optimizer_step = 0;    // transient during the update (after backward: max'd with activations + logits)
  double ddp_buckets = 0;       // gradient buckets when gpus > 1
  double cuda_context = 0;
  double fragmentation = 0;     // allocator overhead on everything allocated
  double total = 0;
};
// (name, bytes) in display order.
std::vector<std::pair<std::string, double>> plan_component_list(const PlanComponents& p);

struct GpuFit {
  std::string gpu;
  double memory_gb = 0;
  bool fits = false;
  double headroom_gb = 0;       // memory - predicted peak (negative when it does not fit)
  int64_t max_micro_batch = 0;  // largest micro-batch that fits at this seq_len; 0 when 1 does not
  std::vector<std::string> advice;
  bool no_bf16 = false;         // the GPU has no bf16 (T4): bf16 runs fall back to fp16 or fp32
};

struct Plan {
  ModelConfig model;
  PlanOptions options;
  HwParamCounts params;
  int64_t trainable = 0;
  PlanComponents components;
  std::vector<GpuFit> gpus;
};

// Constants (docs/hardware.md "Memory planner"; hardware.md sections 3 and 7.3).
constexpr double kHwCudaContextBytes = 1.0 * (1 << 30);  // CUDA context + kernels: 0.3-2 GiB reported
constexpr double kHwFragmentation = 0.05;                // allocator overhead on allocated bytes (Megatron's 5 %)
constexpr double kHwNf4BytesPerParam = 0.516;            // NF4 + double quantisation: 4.127 bits
constexpr double kHwDdpBucketBytes = 2 * 25.0 * (1 << 20);  // two 25 MiB gradient buckets

PlanComponents hw_plan_memory(const ModelConfig& c, const PlanOptions& o);
// The memory plan and, for each GPU of `catalog`, the fit, max micro-batch and advice.
Plan hw_plan(const ModelConfig& c, const PlanOptions& o, const std::vector<GpuSpec>& catalog);
// Largest micro-batch (<= 4096) whose peak fits in memory_gb; 0 when 1 does not.
int64_t hw_max_micro_batch(const ModelConfig& c, PlanOptions o, double memory_gb);
// The plan as a printable table: components, totals, one line per GPU.
std::string hw_plan_text(const Plan& p);

// Built-in model shapes for planning without weights: "llama3.1-8b", "mistral-7b", "gemma2-9b".
std::vector<std::string> hw_model_presets();
bool hw_model_preset(const std::string& name, ModelConfig* out);

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace luatune
