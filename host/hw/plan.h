// The memory planner: exact parameter counts from a ModelConfig, and the peak GPU memory of a
// training configuration as luatune's trainer allocates it (weights by dtype, fp32 master copies,
// gradients, AdamW moments in fp32 or 8 bits, LoRA/QLoRA, activations with and without checkpointing,
// the chunked cross-entropy's logits, ZeRO sharding over the data-parallel ranks, CPU offload of the
// optimizer state, communication buffers, CUDA context and allocator overhead); per catalog GPU:
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
  int64_t total = 0;           // every parameter once (a tied LM head is the embedding)
  int64_t embedding = 0;       // input embedding table, V * C
  int64_t lm_head = 0;         // untied output projection, V * C (0 when tied)
  int64_t linear = 0;          // all layers' q/k/v/o/gate/up/down weights and biases
  int64_t norms = 0;           // RMSNorm weights (and Qwen3's q/k norms)
  int64_t matmul = 0;          // parameters in matmuls (MFU's N): total - embedding, + V*C when tied
  int64_t largest_linear = 0;  // the biggest single projection (QLoRA dequantises one at a time)
};
HwParamCounts hw_param_counts(const ModelConfig& c);
// Adapter parameters of LoRA rank r on `targets` (HF projection names or "all-linear"): r * (in + out) each.
int64_t hw_lora_params(const ModelConfig& c, int64_t r, const std::vector<std::string>& targets);

enum class PlanMethod { method_full, method_lora, method_qlora };
PlanMethod plan_method_parse(const std::string& name);  // "full", "lora", "qlora"
std::string plan_method_name(PlanMethod m);

// ZeRO stage over the data-parallel ranks (the trainer's shard=): which of the trainable parameters'
// fp32 masters + optimizer moments (optimizer), + gradients (gradients), + layer weights (full) each
// rank keeps only a 1/N slice of.
enum class PlanShard { shard_none, shard_optimizer, shard_gradients, shard_full };
// "none"|"optimizer"|"gradients"|"full", FSDP's NO_SHARD|SHARD_GRAD_OP|FULL_SHARD, or the stage "0".."3".
PlanShard plan_shard_parse(const std::string& name);
std::string plan_shard_name(PlanShard s);  // "none", "optimizer", "gradients", "full"

// The planned run, its fields under the recipes' (and train.new's) names where they share one.
struct PlanOptions {
  PlanMethod method = PlanMethod::method_full;
  std::string dtype = "bf16";  // the model's weights: "bf16", "fp16" or "fp32"
  bool master_weights =
      true;  // fp32 master copies of low-precision trainable weights (the trainer's default)
  std::string optimizer = "adamw";  // "adamw" (two fp32 moments), "adamw8bit" (two 8-bit moments) or "sgd"
  bool sgd_momentum = false;        // sgd keeps an fp32 momentum buffer only when momentum > 0
  std::string optimizer_offload =
      "none";  // "cpu": fp32 masters and moments in pinned host RAM, updated there
  PlanShard shard = PlanShard::shard_none;
  int64_t lora_r = 16;
  double lora_dropout = 0.05;  // > 0: the adapter keeps its dropped input and a mask
  std::vector<std::string> lora_targets = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                           "gate_proj", "up_proj", "down_proj"};
  int64_t batch_size = 1;               // rows per forward/backward (the micro-batch), as in train.new
  int64_t max_length = 2048;            // tokens per row
  bool gradient_checkpointing = false;  // recompute each layer in backward
  int64_t loss_chunk = 4096;            // rows of logits the chunked cross-entropy materialises at once
  // Bytes per logit the loss's chunk holds at its peak; 0: today's fused loss (the model dtype + float32
  // blocks). 8 reproduces the step measured on 2026-11-26 (a float32 copy of the 16-bit chunk and
  // logsumexp's float32 temporary), which the planner's unit test fits against.
  double loss_logit_bytes = 0;
  int64_t gpus = 1;           // data-parallel ranks (runner --nproc N); replicas unless shard= says otherwise
  int64_t gpus_per_node = 0;  // ranks sharing one host's RAM (offload); 0 = min(gpus, 8)
  // Sheared-LLaMA's pruning phase (host/prune/sheared.cpp): the structure masks multiply the attention
  // heads, the intermediate channels, the hidden channels and each layer's outputs, and each product
  // keeps its input for the mask's gradient; the masked norms take the unfused path.
  bool structure_masks = false;
  bool sdpa = true;  // fused attention (no T x T scores) unless the model softcaps its attention logits
  // Distillation: a frozen teacher beside the student (the Distiller hook): its weights in its dtype,
  // whole on every rank or sharded 1/N (distill's shard_teacher: decoder layers sliced, a layer
  // gathered at a time), and what its forward holds while the KD loss is formed.
  struct Teacher {
    bool present = false;
    ModelConfig config;
    std::string dtype = "bf16";
    bool sharded = false;     // only with gpus > 1
    int64_t kd_chunk = 1024;  // DistillOptions::chunk: rows of logits per side at a time
    // Cached teacher outputs (distill.write_cache, then distill.cached): no teacher on the GPU, only
    // the micro-batch's cached top-k values (cache_dtype), int32 indices and a float32 log-sum-exp.
    int64_t cache_k = 0;  // 0: the teacher runs live
    std::string cache_dtype = "bf16";
  } teacher;
  // False for a job that must train every weight (pruning, distillation into a pruned student): the
  // advice then never suggests LoRA or QLoRA, which would not do that job.
  bool adapters_ok = true;
  // The run's length, for its time and cost: optimizer steps, micro-batches per step
  // (gradient_accumulation_steps), or, without steps, its tokens (all ranks); both 0: no time.
  int64_t max_steps = 0;
  int64_t gradient_accumulation_steps = 1;
  double run_tokens = 0;
  std::string run_tokens_source;  // how run_tokens was found, printed beside the time
};

// The MFU `runner plan` assumes for its times: luatune's own measured MFU for this kind of run
// (method, model size) on the latest GPU run, with where it comes from (docs/hardware.md).
struct PlanEfficiency {
  double mfu = 0;
  std::string source;
};
PlanEfficiency hw_plan_efficiency(PlanMethod method, int64_t params);

// Bytes, per GPU (and, offloaded, per rank in host RAM). "Sharded" = this rank's padded 1/N slice.
struct PlanComponents {
  double weights = 0;         // the model's weights (QLoRA: NF4 linears + 16-bit embeddings, norms, head);
                              // shard=full: the layers' trainable weights sharded, the rest full
  double adapters = 0;        // LoRA A/B, float32 (sharded under shard=full)
  double master_weights = 0;  // fp32 copies of bf16/fp16 trainable weights (sharded from shard=optimizer)
  double gradients = 0;       // in the trainable weights' dtype; from shard=gradients: an fp32 shard +
                              // one decoder layer's full gradients in flight
  double optimizer_states =
      0;  // AdamW exp_avg + exp_avg_sq: float32, or 8-bit + absmax (sharded from shard=optimizer)
  double activations =
      0;  // saved for backward at the loss: every layer's (checkpointed: its input) + the head's
  double layer_backward = 0;  // one layer's backward: its recomputed saved tensors (checkpointed), the
                              // gradients in flight, QLoRA's dequantised projection
  double logits =
      0;  // the fused loss: one chunk of logits + its float32 block, grad_hidden, the head's gradient
  double optimizer_step = 0;  // transient during the update, after backward
  std::string peak_at;        // the moment that peaks: "loss", "backward" or "step"
  double gather_buffers = 0;  // shard=full: two decoder layers' full trainable weights (current + prefetched)
  double comm_buckets = 0;  // shard none: DDP's gradient buckets when gpus > 1; else one layer's flat buffer
  double teacher = 0;       // distillation: the frozen teacher's weights (sharded: 1/N of its layers
                            // + two gathered layers)
  double teacher_forward = 0;  // its output hidden states for the micro-batch + the KD loss's logits
                               // chunks (both sides, float32), held during the student's forward
  double cuda_context = 0;
  double fragmentation = 0;  // allocator overhead on everything allocated
  double total = 0;          // per GPU
  // Host RAM (pinned), optimizer_offload=cpu: per rank, and for every rank on one node.
  double host_master_weights = 0;    // the fp32 masters (this rank's shard)
  double host_optimizer_states = 0;  // the moments (this rank's shard)
  double host_grad_staging = 0;      // fp32 copy of this rank's gradient shard, for the CPU update
  int64_t ranks_per_node = 1;
  double host_per_node = 0;  // (the three above) * ranks_per_node
};
// (name, bytes) in display order: the GPU terms that make up `total`.
std::vector<std::pair<std::string, double>> plan_component_list(const PlanComponents& p);
// What a term is under these options when sharding, 8-bit moments or offload change it ("" otherwise),
// e.g. "sharded 1/8" for master_weights under shard=optimizer over 8 ranks.
std::string plan_component_note(const PlanOptions& o, const std::string& name);

struct GpuFit {
  std::string gpu;
  double memory_gb = 0;
  bool fits = false;
  double headroom_gb = 0;       // memory - predicted peak (negative when it does not fit)
  int64_t max_micro_batch = 0;  // largest micro-batch that fits at this seq_len; 0 when 1 does not
  std::vector<std::string> advice;
  bool no_bf16 = false;  // the GPU has no bf16 (T4): bf16 runs fall back to fp16 or fp32
  // Time and cost at the assumed MFU on this GPU's dense peak (< 0 when unknown, or when the run
  // does not fit): one optimizer step, the whole run (hours, every GPU at once) and its price
  // (GPU-hours x price_per_hour).
  double step_s = -1, run_hours = -1, cost_usd = -1;
};

struct Plan {
  ModelConfig model;
  PlanOptions options;
  HwParamCounts params;
  int64_t trainable = 0;
  PlanComponents components;
  std::vector<GpuFit> gpus;
  double flops_per_token = 0;  // MFU's convention (host/hw/profile.h)
  std::string flops_convention;
  PlanEfficiency efficiency;
  double step_tokens = 0;  // tokens one rank processes per optimizer step
  double run_tokens = 0;   // all ranks, the whole run (0: unknown)
};

// Constants (docs/hardware.md "Memory planner"; hardware.md sections 3 and 7.3).
constexpr double kHwCudaContextBytes = 1.0 * (1 << 30);  // CUDA context + kernels: 0.3-2 GiB reported
constexpr double kHwFragmentation = 0.05;      // allocator overhead on allocated bytes (Megatron's 5 %)
constexpr double kHwNf4BytesPerParam = 0.516;  // NF4 + double quantisation: 4.127 bits
constexpr double kHwDdpBucketBytes = 2 * 25.0 * (1 << 20);  // two 25 MiB gradient buckets
constexpr int64_t kHw8bitBlock =
    256;  // adamw8bit: one fp32 absmax per 256 elements per moment (train/adamw8bit.h)
constexpr int64_t kHw8bitMinElements = 4096;  // adamw8bit keeps tensors under this many elements in fp32
constexpr int64_t kHwGpusPerNode = 8;         // ranks sharing a host's RAM when gpus_per_node is not given

PlanComponents hw_plan_memory(const ModelConfig& c, const PlanOptions& o);
// The memory plan and, for each GPU of `catalog`, the fit, max micro-batch and advice.
Plan hw_plan(const ModelConfig& c, const PlanOptions& o, const std::vector<GpuSpec>& catalog);
// Largest micro-batch (<= 4096) whose peak fits in memory_gb; 0 when 1 does not.
int64_t hw_max_micro_batch(const ModelConfig& c, PlanOptions o, double memory_gb);
// The plan as a printable table: components, totals, one line per GPU.
std::string hw_plan_text(const Plan& p);
// One line naming the terms summed under these options, for reports (hw_compare's "Memory model").
std::string hw_plan_formula(const PlanOptions& o);

// Built-in model shapes for planning without weights: "llama3.1-8b", "mistral-7b", "gemma2-9b".
std::vector<std::string> hw_model_presets();
bool hw_model_preset(const std::string& name, ModelConfig* out);

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace luatune
