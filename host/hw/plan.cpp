// Memory planner: parameter counts and peak memory by component, as luatune's trainer allocates it
// (host/train/trainer.cpp, loss.cpp, recompute.cpp; host/model/transformer.cpp; host/adapt/lora.cpp),
// with ZeRO sharding over the data-parallel ranks, 8-bit AdamW moments and CPU offload of the
// optimizer state. Why each term is what it is: docs/hardware.md "Memory planner", with an 8B example
// worked by hand.
#include "host/hw/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "host/core/enum_names.h"
#include "host/core/error.h"
#include "host/core/strings.h"
#include "host/dist/shard_stage.h"
#include "host/hw/profile.h"

namespace luatune {

// ============================================================================================
// Parameter counts

namespace {

struct Proj {
  const char* name;
  int64_t in, out;
  bool bias;
};

// The seven projections of one layer with their (in, out) sizes.
std::vector<Proj> layer_projections(const ModelConfig& c) {
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  const int64_t HD = c.num_heads * c.head_dim, KVD = c.num_kv_heads * c.head_dim;
  return {{"q_proj", C, HD, c.attention_bias},  {"k_proj", C, KVD, c.attention_bias},
          {"v_proj", C, KVD, c.attention_bias}, {"o_proj", HD, C, c.o_bias},
          {"gate_proj", C, I, c.mlp_bias},      {"up_proj", C, I, c.mlp_bias},
          {"down_proj", I, C, c.mlp_bias}};
}

bool targeted(const std::vector<std::string>& targets, const std::string& name) {
  for (const auto& t : targets)
    if (t == name || t == "all-linear" || str_ends_with(t, "." + name)) return true;
  return false;
}

}  // namespace

HwParamCounts hw_param_counts(const ModelConfig& c) {
  LT_CHECK(c.hidden_size > 0 && c.num_layers > 0 && c.vocab_size > 0 && c.head_dim > 0,
           "hw: the model config has no sizes (hidden_size, num_hidden_layers, vocab_size, head_dim)");
  HwParamCounts n;
  const int64_t C = c.hidden_size, V = c.vocab_size;
  int64_t per_layer_linear = 0;
  for (const Proj& p : layer_projections(c)) {
    per_layer_linear += p.in * p.out + (p.bias ? p.out : 0);
    n.largest_linear = std::max(n.largest_linear, p.in * p.out);
  }
  const int64_t per_layer_norms = (c.gemma_norms ? 4 : 2) * C + (c.qk_norm ? 2 * c.head_dim : 0);
  n.embedding = V * C;
  n.lm_head = c.tie_word_embeddings ? 0 : V * C;
  n.linear = per_layer_linear * c.num_layers;
  n.norms = per_layer_norms * c.num_layers + C;  // + the final norm
  n.total = n.embedding + n.lm_head + n.linear + n.norms;
  // The LM head's matmul uses V*C weights either way (torchtitan keeps tied embeddings in N).
  n.matmul = n.total - n.embedding + (c.tie_word_embeddings ? V * C : 0);
  return n;
}

int64_t hw_lora_params(const ModelConfig& c, int64_t r, const std::vector<std::string>& targets) {
  int64_t per_layer = 0;
  for (const Proj& p : layer_projections(c))
    if (targeted(targets, p.name)) per_layer += r * (p.in + p.out);
  return per_layer * c.num_layers;
}

const EnumName<PlanMethod> kPlanMethods[] = {{PlanMethod::method_full, "full"},
                                             {PlanMethod::method_lora, "lora"},
                                             {PlanMethod::method_qlora, "qlora"}};

PlanMethod plan_method_parse(const std::string& name) {
  if (const auto* row = enum_row(kPlanMethods, name)) return row->value;
  fail("hw.plan: unknown method '" + name + "'", "expected " + enum_names_list(kPlanMethods, "\""));
}

std::string plan_method_name(PlanMethod m) {
  return enum_name(kPlanMethods, m);
}

// The stage names are the trainer's (host/dist/shard_stage.h); PlanShard lists them in the same order.
PlanShard plan_shard_parse(const std::string& name) {
  ShardStage stage;
  if (!shard_stage_lookup(name, &stage))
    fail("hw.plan: unknown shard '" + name + "'",
         "expected \"none\", \"optimizer\", \"gradients\" or \"full\" (or NO_SHARD, SHARD_GRAD_OP, "
         "FULL_SHARD, "
         "0-3)");
  return static_cast<PlanShard>(static_cast<int>(stage));
}

std::string plan_shard_name(PlanShard s) {
  return shard_stage_name(static_cast<ShardStage>(static_cast<int>(s)));
}

// ============================================================================================
// Memory

namespace {

double dtype_bytes(const std::string& dtype) {
  if (dtype == "bf16" || dtype == "bfloat16" || dtype == "fp16" || dtype == "f16" || dtype == "float16")
    return 2;
  if (dtype == "fp32" || dtype == "f32" || dtype == "float32" || dtype == "float") return 4;
  fail("hw.plan: unknown dtype '" + dtype + "'", "expected \"bf16\", \"fp16\" or \"fp32\"");
}

// Bytes one decoder layer keeps for backward, per token: what autograd saves in transformer.cpp's
// layer with the CUDA step's fused kernels (host/model/fused.cpp, host/adapt/lora.cpp; see
// docs/hardware.md for the op-by-op list). p = bytes per element of the model dtype.
double layer_bytes_per_token(const ModelConfig& c, const PlanOptions& o, double p) {
  const bool frozen = o.method != PlanMethod::method_full;
  const double C = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
  const double H = static_cast<double>(c.num_heads), HD = H * static_cast<double>(c.head_dim);
  const double KVD = static_cast<double>(c.num_kv_heads * c.head_dim);
  double b = 0;
  // The fused RMSNorm keeps its input in the dtype and one float32 reciprocal RMS per row.
  b += (c.gemma_norms ? 4 : 2) * (C * p + 4);
  if (c.qk_norm) b += (HD + KVD) * p + 4 * (H + static_cast<double>(c.num_kv_heads));
  // SDPA keeps q, k and v (grouped: k and v at their own heads), its output and a float32
  // log-sum-exp per head.
  b += (2 * HD + 2 * KVD) * p + 4 * H;
  // The explicit path (Gemma 2's logit softcap, or no fused SDPA) keeps the T x T scores: the tanh
  // output in the dtype, the float32 softmax, and the probabilities in the dtype.
  if (c.attn_logit_softcap > 0 || !o.sdpa)
    b += H * static_cast<double>(o.max_length) * ((c.attn_logit_softcap > 0 ? 2 * p : p) + 4);
  // The fused gated activation keeps gate and up.
  b += 2 * I * p;
  // Structure masks (transformer.cpp's masked layer): the head-masked attention output, the
  // intermediate-masked up, the hidden- and layer-masked attention and MLP outputs (two each), and
  // the masked norms' float32 inputs.
  if (o.structure_masks) b += (HD + I + 4 * C) * p + (c.gemma_norms ? 4 : 2) * C * 4;
  // A Linear whose weight trains keeps its input, and so does a LoRA adapter (for A's gradient):
  // once per distinct input, which q/k/v share (the attention norm's output), and gate/up share.
  // LoRA adds A's output (r per projection, in the dtype) and, with dropout, a byte of mask per input
  // element per projection.
  const std::vector<Proj> projs = layer_projections(c);
  auto takes = [&](const std::string& name) { return !frozen || targeted(o.lora_targets, name); };
  const bool qkv = takes("q_proj") || takes("k_proj") || takes("v_proj");
  const bool gate_up = takes("gate_proj") || takes("up_proj");
  b += ((qkv ? C : 0) + (takes("o_proj") ? HD : 0) + (gate_up ? C : 0) + (takes("down_proj") ? I : 0)) * p;
  if (frozen)
    for (const Proj& pr : projs)
      if (targeted(o.lora_targets, pr.name))
        b += static_cast<double>(o.lora_r) * p + (o.lora_dropout > 0 ? static_cast<double>(pr.in) : 0);
  return b;
}

// Per token, what one layer's backward allocates beside the saved tensors: the incoming and outgoing
// gradient of the hidden state, and the MLP's gradients (of down's input, then of gate and up).
double layer_backward_bytes_per_token(const ModelConfig& c, double p) {
  return (2 * static_cast<double>(c.hidden_size) + 3 * static_cast<double>(c.intermediate_size)) * p;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The trainable tensors as the sharded trainer (host/dist/zero.cpp) flattens them: one group per
// decoder layer and one for everything outside the layers (embedding, untied head, final norm: full
// fine-tuning only). Every group is padded to a multiple of N ranks; each rank owns one 1/N slice.
struct TrainableGroups {
  int64_t layers = 0;
  std::vector<int64_t> layer_tensors;    // element counts of one decoder layer's trainable tensors
  std::vector<int64_t> outside_tensors;  // those outside the layers
  int64_t per_layer = 0, outside = 0;    // their sums
  int64_t total() const { return layers * per_layer + outside; }
  int64_t layers_shard(int64_t n) const { return layers * ceil_div(per_layer, n); }
  int64_t shard(int64_t n) const { return layers_shard(n) + ceil_div(outside, n); }
};

TrainableGroups trainable_groups(const ModelConfig& c, const PlanOptions& o) {
  TrainableGroups g;
  g.layers = c.num_layers;
  if (o.method == PlanMethod::method_full) {
    for (const Proj& p : layer_projections(c)) {
      g.layer_tensors.push_back(p.in * p.out);
      if (p.bias) g.layer_tensors.push_back(p.out);
    }
    for (int i = 0; i < (c.gemma_norms ? 4 : 2); i++) g.layer_tensors.push_back(c.hidden_size);
    if (c.qk_norm) g.layer_tensors.insert(g.layer_tensors.end(), {c.head_dim, c.head_dim});
    const HwParamCounts n = hw_param_counts(c);
    g.outside_tensors = {n.embedding, c.hidden_size};
    if (n.lm_head > 0) g.outside_tensors.push_back(n.lm_head);
  } else {
    for (const Proj& p : layer_projections(c))
      if (targeted(o.lora_targets, p.name))
        g.layer_tensors.insert(g.layer_tensors.end(), {o.lora_r * p.in, o.lora_r * p.out});
  }
  for (int64_t t : g.layer_tensors) g.per_layer += t;
  for (int64_t t : g.outside_tensors) g.outside += t;
  return g;
}

// Optimizer state of one flat tensor (or one group's slice) of n elements (host/train/optim.cpp).
double moment_bytes_of(const PlanOptions& o, int64_t n) {
  if (o.optimizer == "adamw") return 8.0 * n;  // exp_avg, exp_avg_sq: float32
  if (o.optimizer == "sgd") return o.sgd_momentum ? 4.0 * n : 0;
  // adamw8bit: a byte per element per moment + a float32 absmax per block per moment; as
  // bitsandbytes, a tensor under kHw8bitMinElements keeps float32 moments.
  if (n < kHw8bitMinElements) return 8.0 * n;
  return 2.0 * n + 8.0 * ceil_div(n, kHw8bitBlock);
}

// The optimizer state this rank keeps: per tensor unsharded, per group slice under ZeRO.
double moment_bytes(const PlanOptions& o, const TrainableGroups& g, bool sharded, int64_t ranks) {
  double b = 0;
  if (!sharded) {
    for (int64_t t : g.layer_tensors) b += moment_bytes_of(o, t) * g.layers;
    for (int64_t t : g.outside_tensors) b += moment_bytes_of(o, t);
  } else {
    if (g.per_layer > 0) b += moment_bytes_of(o, ceil_div(g.per_layer, ranks)) * g.layers;
    if (g.outside > 0) b += moment_bytes_of(o, ceil_div(g.outside, ranks));
  }
  return b;
}

}  // namespace

PlanComponents hw_plan_memory(const ModelConfig& c, const PlanOptions& o_in) {
  LT_CHECK(o_in.batch_size > 0, "hw.plan: batch_size must be positive, got " << o_in.batch_size);
  LT_CHECK(o_in.max_length > 0, "hw.plan: seq_len must be positive, got " << o_in.max_length);
  LT_CHECK(o_in.gpus > 0, "hw.plan: gpus must be positive, got " << o_in.gpus);
  LT_CHECK(o_in.gpus_per_node >= 0, "hw.plan: gpus_per_node must be >= 0, got " << o_in.gpus_per_node);
  LT_CHECK(o_in.loss_chunk > 0, "hw.plan: loss_chunk must be positive, got " << o_in.loss_chunk);
  LT_CHECK(
      o_in.optimizer == "adamw" || o_in.optimizer == "adamw8bit" || o_in.optimizer == "sgd",
      "hw.plan: optimizer must be \"adamw\", \"adamw8bit\" or \"sgd\", got \"" << o_in.optimizer << "\"");
  LT_CHECK(
      o_in.optimizer_offload == "none" || o_in.optimizer_offload == "cpu",
      "hw.plan: optimizer_offload must be \"none\" or \"cpu\", got \"" << o_in.optimizer_offload << "\"");
  PlanOptions o = o_in;
  // The trainer shards the model's own trainable weights; LoRA/QLoRA adapters stay replicated
  // (faster at their size) and the frozen base is never sharded: shard= changes nothing there.
  if (o.method != PlanMethod::method_full) o.shard = PlanShard::shard_none;
  const bool zero3 = o.shard == PlanShard::shard_full;
  if (zero3) o.gradient_checkpointing = true;  // ZeRO-3 always recomputes each layer in backward
  const HwParamCounts n = hw_param_counts(c);
  const double p = dtype_bytes(o.dtype);
  const bool full = o.method == PlanMethod::method_full;
  const double N = static_cast<double>(n.total);
  const double tokens = static_cast<double>(o.batch_size) * static_cast<double>(o.max_length);
  const double C = static_cast<double>(c.hidden_size), V = static_cast<double>(c.vocab_size);
  const double L = static_cast<double>(c.num_layers);
  PlanComponents m;

  // What sharding splits: the trainable parameters (a frozen LoRA/QLoRA base stays replicated).
  // `own`: how many of them this rank keeps the optimizer state of (all, or its padded slices).
  const TrainableGroups g = trainable_groups(c, o);
  const bool sharded = o.shard != PlanShard::shard_none;
  const int64_t ranks = sharded ? o.gpus : 1;
  const double own = static_cast<double>(g.shard(ranks));
  const bool offload = o.optimizer_offload == "cpu";
  // Layers reduce-scattered as backward leaves them (ZeRO-2/3 with recomputed layers), not at the end.
  const bool per_layer_reduce = o.shard >= PlanShard::shard_gradients && o.gradient_checkpointing;

  // Weights. QLoRA: NF4 + double quantisation on the layers' projections, 16-bit for the rest.
  // ZeRO-3 keeps the decoder layers' trainable weights sharded at rest; the embedding, head and
  // final norm stay whole on every rank.
  if (o.method == PlanMethod::method_qlora)
    m.weights = static_cast<double>(n.linear) * kHwNf4BytesPerParam + (N - static_cast<double>(n.linear)) * p;
  else if (full && zero3)
    m.weights = static_cast<double>(g.layers_shard(o.gpus) + g.outside) * p;
  else
    m.weights = N * p;

  // Trainable weights: the whole model, or float32 adapters (lora.cpp keeps A and B in float32).
  const double trainable = static_cast<double>(g.total());
  const double train_bytes = full ? p : 4;
  const double layer_train = static_cast<double>(g.per_layer) * train_bytes;  // one layer's, whole
  if (!full) m.adapters = (zero3 ? static_cast<double>(g.layers_shard(o.gpus)) : trainable) * 4;
  // The copy the update runs on: float32 masters of bf16/fp16 weights; under ZeRO (and offloaded)
  // the owned slice is copied even without masters (ZeRO-3's layer slices are the weights themselves).
  const bool fp32_masters = full && o.master_weights && p < 4;
  const double w_bytes = fp32_masters ? 4 : train_bytes;
  double masters = 0;
  if (fp32_masters || offload)
    masters = own * w_bytes;
  else if (sharded)
    masters = (zero3 ? static_cast<double>(ceil_div(g.outside, ranks)) : own) * w_bytes;
  // Gradients: each has its parameter's dtype and lives through backward; ZeRO adds the float32 slice
  // the reduce-scatter sums into (every stage), and from ZeRO-2 with recomputed layers only one
  // layer's gradients are whole at a time. Offloaded, the float32 slice is in host RAM.
  const double grad_shard = sharded ? own * 4 : 0;
  m.gradients = (per_layer_reduce ? layer_train : trainable * train_bytes) + (offload ? 0 : grad_shard);
  double moments = moment_bytes(o, g, sharded, ranks);
  if (offload) {
    m.host_master_weights = masters;
    m.host_optimizer_states = moments;
    // ZeRO: the pinned float32 gradient slice; unsharded: each gradient copied down in turn.
    int64_t largest_tensor = 0;
    for (int64_t t : g.layer_tensors) largest_tensor = std::max(largest_tensor, t);
    for (int64_t t : g.outside_tensors) largest_tensor = std::max(largest_tensor, t);
    m.host_grad_staging = sharded ? grad_shard : static_cast<double>(largest_tensor) * train_bytes;
  } else {
    m.master_weights = masters;
    m.optimizer_states = moments;
  }
  m.ranks_per_node = std::min(o.gpus, o.gpus_per_node > 0 ? o.gpus_per_node : kHwGpusPerNode);
  m.host_per_node = (m.host_master_weights + m.host_optimizer_states + m.host_grad_staging) *
                    static_cast<double>(m.ranks_per_node);

  // Activations held at the loss: every layer's saved tensors (checkpointed: each layer's input),
  // and the head's (the final norm's input and the hidden rows the loss reads). One layer's backward
  // adds its recomputed saved tensors (checkpointed) and its gradients in flight; QLoRA dequantises
  // one projection at a time.
  const double layer = layer_bytes_per_token(c, o, p) * tokens;
  const double head = tokens * (C * p + 4 + C * p);
  m.activations = (o.gradient_checkpointing ? L * tokens * C * p : L * layer) + head;
  m.layer_backward = (o.gradient_checkpointing ? layer : 0) + layer_backward_bytes_per_token(c, p) * tokens +
                     (o.method == PlanMethod::method_qlora ? static_cast<double>(n.largest_linear) * p : 0);

  // Fused cross-entropy (loss.cpp): one chunk of logits in the model dtype (the matmul's output,
  // overwritten by its gradient), float32 working blocks of 1/16 of the vocabulary (two for a 16-bit
  // model under a final softcap, none for fp32 logits without one; the CUDA kernel needs none, so
  // this is the safe side), and the gradients it forms in the forward pass and holds until
  // backward: grad_hidden of the kept rows and, when the head trains, the head's (fp16: float32).
  // loss_logit_bytes replaces the chunk's bytes per logit (a step that held more, for its peaks).
  const double rows = std::min(static_cast<double>(o.loss_chunk), tokens);
  const double block = std::min(V, std::max(4096.0, std::ceil(V / 16)));
  const bool softcap = c.final_logit_softcap > 0;
  const double blocks = p < 4 ? (softcap ? 2 : 1) : (softcap ? 1 : 0);
  m.logits = (o.loss_logit_bytes > 0 ? rows * V * o.loss_logit_bytes : rows * (V * p + blocks * block * 4)) +
             tokens * C * p;
  const bool fp16 = o.dtype == "fp16" || o.dtype == "f16" || o.dtype == "float16";
  if (full) m.logits += V * C * (fp16 ? 4 : p);

  // After backward (activations freed), the largest of what the step allocates for a moment.
  if (!sharded) {
    // Per tensor, the AdamW update's float32 temporaries: the sqrt denominator, with the float32
    // gradient copy for fp32 masters of 16-bit weights (and the 16-bit casts without masters).
    // Clipping takes one norm per gradient (no squared copy); the 8-bit update works in small
    // chunks and an offloaded one on the CPU.
    double largest =
        full ? static_cast<double>(std::max({n.embedding, n.lm_head, n.largest_linear}))
             : static_cast<double>(c.intermediate_size + c.hidden_size) * static_cast<double>(o.lora_r);
    const double update = !full || p == 4 ? 4 : o.master_weights ? 8 : 12;
    m.optimizer_step = offload || o.optimizer == "adamw8bit" ? 0 : largest * update;
  } else {
    // Per group, in turn: the reduce-scatter's whole flat buffer (with the outside group's whole
    // gradients when the layers went during backward), the update's float32 temporaries on the
    // slice (none on the GPU offloaded; small chunks for 8-bit; clip's norm needs no square), then
    // the all-gather of the updated slice back into whole weights (ZeRO-3: the outside group only).
    const double biggest = static_cast<double>(std::max(g.per_layer, g.outside));
    const double slice =
        static_cast<double>(std::max(ceil_div(g.per_layer, ranks), ceil_div(g.outside, ranks)));
    const double outside = static_cast<double>(g.outside);
    const double reduce = per_layer_reduce ? 2 * outside * train_bytes : biggest * train_bytes;
    const double update = offload || o.optimizer == "adamw8bit" ? 0 : slice * (w_bytes == 4 ? 4 : 8);
    const double gather =
        zero3 ? (outside > 0 ? (outside + static_cast<double>(ceil_div(g.outside, ranks))) * train_bytes : 0)
              : (biggest + slice) * train_bytes;
    m.optimizer_step = std::max({reduce, update, gather});
  }

  // ZeRO-3 gathers a layer's weights whole before using it, and prefetches the next.
  if (zero3) m.gather_buffers = 2 * layer_train;
  // Communication: DDP's gradient buckets; sharded, one layer's flat buffer (reduce-scatter, gather).
  if (sharded)
    m.comm_buckets = layer_train;
  else if (o.gpus > 1)
    m.comm_buckets = kHwDdpBucketBytes;

  if (o.teacher.present && o.teacher.cache_k > 0) {
    // Cached: the micro-batch's top-k entries (values, int32 indices, a float32 log-sum-exp per
    // token) and the student's KD logits chunk in float32; no teacher weights.
    const double rows = static_cast<double>(o.batch_size * o.max_length);
    m.teacher_forward =
        rows * (static_cast<double>(o.teacher.cache_k) * (dtype_bytes(o.teacher.cache_dtype) + 4) + 4) +
        static_cast<double>(std::min<int64_t>(o.teacher.kd_chunk, o.batch_size * o.max_length)) *
            static_cast<double>(o.teacher.config.vocab_size) * 4;
  } else if (o.teacher.present) {
    const ModelConfig& t = o.teacher.config;
    const HwParamCounts tn = hw_param_counts(t);
    const double tp = dtype_bytes(o.teacher.dtype);
    const double layers = static_cast<double>(tn.linear + tn.norms - t.hidden_size);  // less the final norm
    const double per_layer = layers / static_cast<double>(std::max<int64_t>(t.num_layers, 1));
    const double outside = static_cast<double>(tn.total) - layers;  // embedding, head, final norm
    if (o.teacher.sharded && o.gpus > 1)
      m.teacher = (std::ceil(layers / static_cast<double>(o.gpus)) + outside + 2 * per_layer) * tp;
    else
      m.teacher = static_cast<double>(tn.total) * tp;
    const double rows = static_cast<double>(o.batch_size * o.max_length);
    m.teacher_forward =
        rows * static_cast<double>(t.hidden_size) * tp +
        2.0 * static_cast<double>(std::min<int64_t>(o.teacher.kd_chunk, o.batch_size * o.max_length)) *
            static_cast<double>(t.vocab_size) * 4;
  }
  // The peak is the largest of three moments (the trainer frees every gradient after its step, so
  // a micro-batch without accumulated ones starts with none): the loss (all saved activations, the
  // loss's chunk and the gradients it forms, the teacher's outputs; accumulated gradients from the
  // second micro-batch), one layer's backward (all gradients, conservatively, with the saved
  // activations), and the optimizer step (gradients and the update's temporaries). ZeRO's float32
  // gradient slice stays allocated between steps.
  const double grads_kept = sharded && !offload ? grad_shard : 0;
  const double grads = m.gradients - grads_kept;
  const double at_loss =
      m.activations + m.logits + m.teacher_forward + (o.gradient_accumulation_steps > 1 ? grads : 0);
  const double at_backward = grads + m.activations + m.layer_backward;
  const double at_step = grads + m.optimizer_step;
  m.peak_at = at_loss >= at_backward && at_loss >= at_step ? "loss"
              : at_backward >= at_step                     ? "backward"
                                                           : "step";
  double allocated = m.weights + m.adapters + m.master_weights + grads_kept + m.optimizer_states + m.teacher +
                     std::max({at_loss, at_backward, at_step}) + m.gather_buffers + m.comm_buckets;
  m.fragmentation = allocated * kHwFragmentation;
  m.cuda_context = kHwCudaContextBytes;
  m.total = allocated + m.fragmentation + m.cuda_context;
  return m;
}

std::vector<std::pair<std::string, double>> plan_component_list(const PlanComponents& p) {
  return {{"weights", p.weights},
          {"adapters", p.adapters},
          {"master_weights", p.master_weights},
          {"gradients", p.gradients},
          {"optimizer_states", p.optimizer_states},
          {"activations", p.activations},
          {"layer_backward", p.layer_backward},
          {"logits", p.logits},
          {"optimizer_step", p.optimizer_step},
          {"gather_buffers", p.gather_buffers},
          {"comm_buckets", p.comm_buckets},
          {"teacher", p.teacher},
          {"teacher_forward", p.teacher_forward},
          {"cuda_context", p.cuda_context},
          {"fragmentation", p.fragmentation}};
}

std::string plan_component_note(const PlanOptions& o, const std::string& name) {
  const bool full = o.method == PlanMethod::method_full;
  if (!full && o.shard != PlanShard::shard_none) {  // hw_plan_memory: nothing of LoRA/QLoRA is sharded
    if (name == "weights") return "frozen base: replicated on every rank (not sharded)";
    if (name == "adapters") return "replicated: adapters are not sharded (faster at their size)";
    if (name == "master_weights" || name == "optimizer_states")
      return o.optimizer_offload == "cpu" ? "in host RAM: optimizer_offload=cpu" : "";
    return "";
  }
  const bool offload = o.optimizer_offload == "cpu";
  const std::string slice = o.shard == PlanShard::shard_none ? "" : "sharded 1/" + std::to_string(o.gpus);
  if (name == "weights" && o.shard == PlanShard::shard_full)
    return full ? "decoder layers " + slice + "; embedding, lm_head, final norm whole on every rank"
                : "frozen base: replicated on every rank (not sharded)";
  if (name == "weights" && !full && o.shard != PlanShard::shard_none)
    return "frozen base: replicated (not sharded)";
  if (name == "adapters" && o.shard == PlanShard::shard_full) return slice;
  if (name == "master_weights") return offload ? "in host RAM: optimizer_offload=cpu" : slice;
  if (name == "gradients" && o.shard != PlanShard::shard_none) {
    const bool per_layer = o.shard >= PlanShard::shard_gradients &&
                           (o.gradient_checkpointing || o.shard == PlanShard::shard_full);
    return std::string(per_layer ? "one decoder layer's whole at a time" : "whole until reduce-scattered") +
           " + the fp32 slice, " + slice + (offload ? ", in host RAM" : "");
  }
  if (name == "optimizer_states") {
    if (offload) return "in host RAM: optimizer_offload=cpu";
    std::string what =
        o.optimizer == "adamw8bit" ? "8-bit moments + fp32 absmax per " + std::to_string(kHw8bitBlock) : "";
    if (!slice.empty()) what += (what.empty() ? "" : ", ") + slice;
    return what;
  }
  if (name == "activations" && o.shard == PlanShard::shard_full && !o.gradient_checkpointing)
    return "layers recomputed: shard=full always checkpoints";
  if (name == "optimizer_step") return "transient after backward, with the gradients";
  if (name == "layer_backward") return "transient, one layer at a time, with the gradients";
  if (name == "logits") return "transient at the loss";
  if (name == "gather_buffers")
    return "two decoder layers' whole weights: the current one and the prefetched next";
  if (name == "comm_buckets")
    return o.shard == PlanShard::shard_none ? "DDP: 2 x 25 MiB" : "one decoder layer's flat buffer, whole";
  if (name == "teacher")
    return "frozen " + o.teacher.dtype + " teacher, " +
           (o.teacher.sharded && o.gpus > 1 ? "decoder layers sharded 1/" + std::to_string(o.gpus) +
                                                  " + two layers gathered (shard_teacher)"
                                            : "whole on every rank");
  if (name == "teacher_forward")
    return o.teacher.cache_k > 0
               ? "cached teacher: the micro-batch's top-" + std::to_string(o.teacher.cache_k) + " " +
                     o.teacher.cache_dtype + " logits + int32 indices, and " +
                     std::to_string(o.teacher.kd_chunk) + " rows of the student's KD logits, float32"
               : "its hidden states for the micro-batch + " + std::to_string(o.teacher.kd_chunk) +
                     " rows of KD logits per side, float32";
  return "";
}

// ============================================================================================
// Fits, max micro-batch, advice

namespace {

bool fits(const ModelConfig& c, const PlanOptions& o, double memory_gb) {
  return hw_plan_memory(c, o).total / kGiB <= memory_gb;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", bytes / kGiB);
  return buf;
}

// The smallest change of sharding, optimizer, offload or GPU count that fits in `mem` GiB, as the
// keys to add, in this order of preference: shard=optimizer, shard=gradients, shard=full,
// optimizer=adamw8bit, optimizer_offload=cpu, more GPUs (nproc=, with sharding). Each later lever
// is tried with the earlier ones; "" when none fits.
std::string advise_sharding(const ModelConfig& c, const PlanOptions& o, double mem) {
  const int now = static_cast<int>(o.shard);
  const bool can_8bit = o.optimizer == "adamw";
  const PlanComponents base = hw_plan_memory(c, o);
  const bool can_offload = o.optimizer_offload != "cpu" && base.master_weights + base.optimizer_states > 0;
  std::string found;
  // At `gpus` ranks: shard levels from `lowest` up, then with 8-bit moments, then offloaded.
  auto first_fit = [&](int64_t gpus, int lowest) {
    for (int off = 0; off <= (can_offload ? 1 : 0); off++)
      for (int eight = 0; eight <= (can_8bit ? 1 : 0); eight++)
        for (int s = lowest; s <= static_cast<int>(PlanShard::shard_full); s++) {
          if (gpus == o.gpus && s == now && !off && !eight) continue;  // that is the plan itself
          if (gpus == 1 && s != now) continue;                         // one rank has nothing to shard over
          PlanOptions x = o;
          x.gpus = gpus;
          x.shard = static_cast<PlanShard>(s);
          if (eight) x.optimizer = "adamw8bit";
          if (off) x.optimizer_offload = "cpu";
          const PlanComponents m = hw_plan_memory(c, x);
          if (m.total / kGiB > mem) continue;
          std::string keys;
          if (gpus != o.gpus) keys += " nproc=" + std::to_string(gpus);
          if (s != now) keys += " shard=" + plan_shard_name(x.shard);
          if (eight) keys += " optimizer=adamw8bit";
          if (off) keys += " optimizer_offload=cpu";
          found = "add" + keys + " (" + gib(m.total) + " GiB per GPU";
          if (s > 0) found += ", ZeRO-" + std::to_string(s) + " over " + std::to_string(gpus) + " GPUs";
          if (off) found += "; " + gib(m.host_per_node) + " GiB of pinned host RAM per node";
          if (gpus != o.gpus) found += "; runner --nproc " + std::to_string(gpus) + " or torchrun";
          found += ")";
          return true;
        }
    return false;
  };
  if (first_fit(o.gpus, now)) return found;
  // More GPUs lower per-GPU memory only through sharding.
  for (int64_t gpus : {2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512})
    if (gpus > o.gpus && first_fit(gpus, std::max(now, static_cast<int>(PlanShard::shard_optimizer))))
      return found;
  return "";
}

std::vector<std::string> advise(const ModelConfig& c, const PlanOptions& o, const GpuSpec& g, double peak) {
  std::vector<std::string> out;
  const double mem = g.memory_gb;
  auto total = [&](const PlanOptions& x) { return hw_plan_memory(c, x).total; };
  const std::string now = "peak " + gib(peak) + " GiB";
  bool any = false;
  if (!o.gradient_checkpointing && o.shard != PlanShard::shard_full) {  // ZeRO-3 checkpoints already
    PlanOptions x = o;
    x.gradient_checkpointing = true;
    if (total(x) / kGiB <= mem) {
      out.push_back("turn on gradient_checkpointing=true (" + now + " -> " + gib(total(x)) + " GiB)");
      any = true;
    }
  }
  if (o.batch_size > 1) {
    int64_t b = hw_max_micro_batch(c, o, mem);
    if (b > 0) {
      out.push_back("batch_size=" + std::to_string(b) +
                    " fits (raise gradient_accumulation_steps to keep the batch)");
      any = true;
    }
  }
  // Keep the method: shard, 8-bit moments, offload, or more GPUs with sharding.
  // Distillation: the teacher sharded over the ranks there are, or not on the GPU at all (cached).
  if (o.teacher.present && o.teacher.cache_k == 0) {
    if (o.gpus > 1 && !o.teacher.sharded) {
      PlanOptions x = o;
      x.teacher.sharded = true;
      if (total(x) / kGiB <= mem) {
        out.push_back("shard the teacher: teacher_shard=true (" + gib(total(x)) + " GiB per GPU)");
        any = true;
      }
    }
    PlanOptions x = o;
    x.teacher.cache_k = 64;
    x.teacher.sharded = false;
    if (total(x) / kGiB <= mem) {
      out.push_back("cache the teacher's top-64 logits first: teacher_cache=DIR (" + gib(total(x)) +
                    " GiB per GPU; docs/distill.md \"Cached teacher\")");
      any = true;
    }
  }
  const std::string zero = advise_sharding(c, o, mem);
  if (!zero.empty()) {
    out.push_back(zero);
    any = true;
  }
  PlanOptions ck = o;
  ck.gradient_checkpointing = true;
  ck.batch_size = 1;
  // What the LoRA/QLoRA suggestions change besides the method.
  const std::string with_ck = std::string(o.gradient_checkpointing ? "" : ", gradient_checkpointing=true") +
                              (o.batch_size > 1 ? ", batch_size 1" : "");
  if (o.method == PlanMethod::method_full && o.adapters_ok) {
    PlanOptions x = ck;
    x.method = PlanMethod::method_lora;
    if (total(x) / kGiB <= mem) {
      out.push_back("use LoRA (r=" + std::to_string(o.lora_r) + with_ck + ": " + gib(total(x)) + " GiB)");
      any = true;
    }
  }
  if (o.method != PlanMethod::method_qlora && o.adapters_ok) {
    PlanOptions x = ck;
    x.method = PlanMethod::method_qlora;
    x.dtype = "bf16";
    if (total(x) / kGiB <= mem) {
      out.push_back("use QLoRA (NF4 base" + with_ck + ": " + gib(total(x)) +
                    " GiB: recipes/qlora_finetune.lua, or quantize=nf4)");
      any = true;
    }
  }
  // Shorter sequences at this micro-batch (or at 1 when this one fits at no length).
  for (int64_t b : {o.batch_size, int64_t{1}}) {
    bool found = false;
    for (int64_t len = o.max_length / 2; len >= 128 && !found; len /= 2) {
      PlanOptions x = o;
      x.max_length = len;
      x.batch_size = b;
      if (fits(c, x, mem)) {
        out.push_back("shorter sequences: max_length " + std::to_string(len) + " fits at batch_size " +
                      std::to_string(b) + " (" + gib(total(x)) + " GiB)");
        found = any = true;
      }
    }
    if (found || b == 1) break;
  }
  // Large vocabularies (Gemma 2: 256k) make the loss chunk's logits a real share.
  if (o.loss_chunk > 512 && hw_plan_memory(c, o).logits > 0.1 * peak) {
    PlanOptions x = o;
    x.loss_chunk = 512;
    if (fits(c, x, mem)) {
      out.push_back("a smaller loss chunk (train.new{loss_chunk = 512}: " + gib(total(x)) + " GiB)");
      any = true;
    }
  }
  if (o.method == PlanMethod::method_full && o.dtype != "bf16" && o.dtype != "fp16") {
    PlanOptions x = o;
    x.dtype = g.bf16 ? "bf16" : "fp16";
    if (fits(c, x, mem)) {
      out.push_back("16-bit weights (dtype=" + x.dtype + ", fp32 master copies: " + gib(total(x)) + " GiB)");
      any = true;
    }
  }
  if (!any)
    out.push_back("nothing luatune supports fits in " + gib(mem * kGiB) + " GiB at this sequence length");
  return out;
}

}  // namespace

int64_t hw_max_micro_batch(const ModelConfig& c, PlanOptions o, double memory_gb) {
  o.batch_size = 1;
  if (!fits(c, o, memory_gb)) return 0;
  int64_t lo = 1, hi = 4096;  // lo fits; find the largest that fits (peak grows with the batch)
  o.batch_size = hi;
  if (fits(c, o, memory_gb)) return hi;
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    o.batch_size = mid;
    (fits(c, o, memory_gb) ? lo : hi) = mid;
  }
  return lo;
}

Plan hw_plan(const ModelConfig& c, const PlanOptions& o, const std::vector<GpuSpec>& catalog) {
  Plan plan;
  plan.model = c;
  plan.options = o;
  plan.params = hw_param_counts(c);
  plan.trainable =
      o.method == PlanMethod::method_full ? plan.params.total : hw_lora_params(c, o.lora_r, o.lora_targets);
  LT_CHECK(o.method == PlanMethod::method_full || plan.trainable > 0,
           "hw.plan: the LoRA targets match no projection (got "
               << str_join(o.lora_targets, ", ") << "; expected q_proj ... down_proj or all-linear)");
  plan.components = hw_plan_memory(c, o);
  const double peak = plan.components.total;
  // Time: the run's tokens x FLOPs per token at the assumed MFU of each GPU's dense peak.
  const FlopsPerToken fpt =
      hw_flops_per_token(c, o.method, o.method == PlanMethod::method_full ? 0 : plan.trainable, o.max_length,
                         o.gradient_checkpointing);
  plan.flops_per_token = fpt.model;
  plan.flops_convention = fpt.convention;
  if (o.teacher.present && o.teacher.cache_k == 0) {  // the teacher's forward: 2 N_t + 4 L H Q T more
    const ModelConfig& t = o.teacher.config;
    plan.flops_per_token += 2 * static_cast<double>(hw_param_counts(t).matmul) +
                            4.0 * static_cast<double>(t.num_layers * t.num_heads * t.head_dim * o.max_length);
    plan.flops_convention += " + the teacher's forward, 2N_t+4L_tH_tQ_tT";
  }
  plan.efficiency = hw_plan_efficiency(o.method, plan.params.total);
  plan.step_tokens =
      static_cast<double>(o.batch_size * std::max<int64_t>(o.gradient_accumulation_steps, 1) * o.max_length);
  plan.run_tokens = o.max_steps > 0
                        ? static_cast<double>(o.max_steps) * plan.step_tokens * static_cast<double>(o.gpus)
                        : o.run_tokens;
  for (const GpuSpec& g : catalog) {
    GpuFit f;
    f.gpu = g.name;
    f.memory_gb = g.memory_gb;
    f.fits = peak / kGiB <= g.memory_gb;
    f.headroom_gb = g.memory_gb - peak / kGiB;
    f.max_micro_batch = hw_max_micro_batch(c, o, g.memory_gb);
    f.no_bf16 = !g.bf16 && o.dtype == "bf16";
    const double flops_s = g.peak_tflops(o.dtype) * 1e12 * plan.efficiency.mfu;  // per GPU
    if (f.fits && flops_s > 0 && plan.flops_per_token > 0) {  // a GPU it does not fit: its advice first
      f.step_s = plan.step_tokens * plan.flops_per_token / flops_s;
      if (plan.run_tokens > 0) {
        f.run_hours = plan.run_tokens / static_cast<double>(o.gpus) * plan.flops_per_token / flops_s / 3600;
        if (g.price_per_hour > 0) f.cost_usd = f.run_hours * static_cast<double>(o.gpus) * g.price_per_hour;
      }
    }
    if (!f.fits) f.advice = advise(c, o, g, peak);
    if (f.no_bf16)
      f.advice.push_back(
          g.name + " has no bf16 tensor cores: use dtype=fp16 (or fp32), or expect bf16 to run emulated");
    plan.gpus.push_back(std::move(f));
  }
  return plan;
}

// luatune's MFU as measured on the latest GPU run (docs/gpu-report-2026-11-26.md, one H200, bf16,
// seq 2048, batch 4, layers recomputed), by method and size: Llama 3.2 1B full 0.204 and LoRA 0.137,
// Llama 3.1 8B LoRA 0.207 and QLoRA 0.206. A kind not measured takes the nearest measured one
// (full at 8B: 1B's 0.204; QLoRA at 1B: LoRA's 0.137). Replace these when a GPU run measures again.
PlanEfficiency hw_plan_efficiency(PlanMethod method, int64_t params) {
  const bool large = params >= 3'000'000'000;  // between the measured 1.2 B and 8.0 B shapes
  const std::string run = " measured 2026-11-26 (H200, docs/gpu-report-2026-11-26.md)";
  switch (method) {
    case PlanMethod::method_full:
      return {0.204, "MFU 0.204: luatune's Llama 3.2 1B full fine-tuning" + run +
                         (large ? "; no larger full run measured yet" : "")};
    case PlanMethod::method_lora:
      return large ? PlanEfficiency{0.207, "MFU 0.207: luatune's Llama 3.1 8B LoRA" + run}
                   : PlanEfficiency{0.137, "MFU 0.137: luatune's Llama 3.2 1B LoRA" + run};
    case PlanMethod::method_qlora:
      return large ? PlanEfficiency{0.206, "MFU 0.206: luatune's Llama 3.1 8B QLoRA" + run}
                   : PlanEfficiency{0.137, "MFU 0.137: luatune's Llama 3.2 1B LoRA" + run +
                                               " (QLoRA at this size not measured yet)"};
  }
  return {};
}

// ============================================================================================
// Text

std::string hw_plan_text(const Plan& p) {
  std::ostringstream s;
  char buf[512];
  const PlanOptions& o = p.options;
  const PlanComponents& m = p.components;
  std::snprintf(buf, sizeof buf, "model: %s, %.2f B parameters (%.2f B in matmuls), %s trainable\n",
                p.model.model_type().c_str(), p.params.total / 1e9, p.params.matmul / 1e9,
                p.trainable >= 1e9 ? (str_from_number(std::round(p.trainable / 1e7) / 100) + " B").c_str()
                                   : (str_from_number(std::round(p.trainable / 1e4) / 100) + " M").c_str());
  s << buf;
  s << "method: " << plan_method_name(o.method) << ", dtype " << o.dtype;
  if (o.method == PlanMethod::method_full)
    s << (o.master_weights && o.dtype != "fp32" ? " with fp32 master weights" : "");
  else
    s << ", LoRA r=" << o.lora_r << " on " << str_join(o.lora_targets, ",");
  s << ", " << o.optimizer << (o.optimizer_offload == "cpu" ? " offloaded to the CPU" : "") << "\n";
  const bool zero3 = o.shard == PlanShard::shard_full && o.method == PlanMethod::method_full;
  s << "shape: batch_size " << o.batch_size << " x max_length " << o.max_length << ", gradient_checkpointing "
    << (o.gradient_checkpointing || zero3 ? "on" : "off")
    << (zero3 && !o.gradient_checkpointing ? " (shard=full recomputes layers)" : "") << ", loss chunk "
    << o.loss_chunk << ", " << o.gpus << " GPU";
  if (o.shard != PlanShard::shard_none)
    s << (o.gpus == 1 ? "" : "s") << " (data parallel, shard=" << plan_shard_name(o.shard) << ": ZeRO-"
      << static_cast<int>(o.shard) << ")";
  else
    s << (o.gpus == 1 ? "" : "s (data parallel, replicated)");
  s << "\n\n";
  s << "predicted peak memory per GPU (GiB)\n";
  for (const auto& [name, bytes] : plan_component_list(p.components)) {
    // Below the printed precision: left out, unless it went to host RAM (shown as 0 with where it went).
    const bool moved = (name == "master_weights" && m.host_master_weights > 0) ||
                       (name == "optimizer_states" && m.host_optimizer_states > 0);
    if (bytes < 0.005 * kGiB && !moved) continue;
    const std::string note = plan_component_note(o, name);
    std::snprintf(buf, sizeof buf, "  %-18s %8.2f%s\n", name.c_str(), bytes / kGiB,
                  note.empty() ? "" : ("  (" + note + ")").c_str());
    s << buf;
  }
  std::snprintf(buf, sizeof buf, "  %-18s %8.2f  (peak at %s)\n", "total", p.components.total / kGiB,
                p.components.peak_at == "loss"       ? "the loss: saved activations + the loss's chunk"
                : p.components.peak_at == "backward" ? "a layer's backward: gradients + activations"
                                                     : "the optimizer step: gradients + its temporaries");
  s << buf;
  if (o.optimizer_offload == "cpu") {
    const double rank = m.host_master_weights + m.host_optimizer_states + m.host_grad_staging;
    std::snprintf(
        buf, sizeof buf,
        "host RAM (pinned, optimizer_offload=cpu): per rank %.2f GiB (fp32 masters %.2f + optimizer "
        "moments %.2f + fp32 gradient staging %.2f); per node %lld rank%s x %.2f = %.2f GiB\n\n",
        rank / kGiB, m.host_master_weights / kGiB, m.host_optimizer_states / kGiB, m.host_grad_staging / kGiB,
        static_cast<long long>(m.ranks_per_node), m.ranks_per_node == 1 ? "" : "s", rank / kGiB,
        m.host_per_node / kGiB);
    s << buf;
  } else {
    s << "host RAM: no optimizer state offloaded (optimizer_offload=none)\n\n";
  }
  // Time and cost: what they assume, then one row per GPU.
  std::snprintf(
      buf, sizeof buf,
      "time: %.3g tokens a step per GPU (batch_size %lld x %lld micro-batches x max_length %lld) x %.3g "
      "GFLOP a token (%s)\n",
      p.step_tokens, static_cast<long long>(o.batch_size),
      static_cast<long long>(std::max<int64_t>(o.gradient_accumulation_steps, 1)),
      static_cast<long long>(o.max_length), p.flops_per_token / 1e9, p.flops_convention.c_str());
  s << buf;
  s << "      at each GPU's dense " << (o.dtype == "fp16" ? "fp16" : "bf16") << " peak x "
    << p.efficiency.source << "\n";
  if (p.run_tokens > 0) {
    std::snprintf(buf, sizeof buf,
                  "      the run: %.4g tokens (%s); cost = hours x %lld GPU%s x price_per_hour\n",
                  p.run_tokens,
                  o.max_steps > 0 ? (std::to_string(o.max_steps) + " steps x " + std::to_string(o.gpus) +
                                     " GPU" + (o.gpus == 1 ? "" : "s"))
                                        .c_str()
                                  : o.run_tokens_source.c_str(),
                  static_cast<long long>(o.gpus), o.gpus == 1 ? "" : "s");
    s << buf;
  } else {
    s << "      the run's length is unknown (no max_steps, and no data to count): step time only\n";
  }
  s << "      data-parallel communication and data loading are not counted\n\n";
  std::snprintf(buf, sizeof buf, "%-10s %8s %5s %9s %10s %9s %9s %10s\n", "gpu", "memory", "fits", "headroom",
                "max_micro", "step_s", "run_h", "cost_usd");
  s << buf;
  auto cell = [](double v, const char* fmt) {
    char b[32];
    if (v < 0) return std::string("-");
    std::snprintf(b, sizeof b, fmt, v);
    return std::string(b);
  };
  for (const GpuFit& f : p.gpus) {
    std::snprintf(buf, sizeof buf, "%-10s %8.0f %5s %9.1f %10lld %9s %9s %10s\n", f.gpu.c_str(), f.memory_gb,
                  f.fits ? "yes" : "no", f.headroom_gb, static_cast<long long>(f.max_micro_batch),
                  cell(f.step_s, "%.3g").c_str(), cell(f.run_hours, "%.3g").c_str(),
                  cell(f.cost_usd, "%.2f").c_str());
    s << buf;
    for (const auto& a : f.advice) s << "             - " << a << "\n";
  }
  return s.str();
}

std::string hw_plan_formula(const PlanOptions& o) {
  std::string f =
      "weights + master + optimizer + max(activations + logits (the loss), gradients + activations + "
      "layer backward, gradients + optimizer step)";
  if (o.shard == PlanShard::shard_full) f += " + gather buffers";
  if (o.shard != PlanShard::shard_none || o.gpus > 1) f += " + communication buckets";
  f += " + 5 % allocator overhead + 1 GiB CUDA context, per GPU";
  if (o.shard != PlanShard::shard_none)
    f += "; shard=" + plan_shard_name(o.shard) + " (ZeRO-" + std::to_string(static_cast<int>(o.shard)) +
         ") over " + std::to_string(o.gpus) + " GPUs";
  if (o.optimizer != "adamw") f += "; optimizer=" + o.optimizer;
  if (o.optimizer_offload == "cpu") f += "; masters and optimizer states in host RAM (optimizer_offload=cpu)";
  return f + " (docs/hardware.md)";
}

// ============================================================================================
// Presets: the published config.json shapes, so a plan needs no download.

namespace {

struct Preset {
  const char* name;
  const char* arch;
  const char* fields;
};

const Preset kPresets[] = {
    {"llama3.1-8b", "llama",
     R"({"vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 131072,
         "rope_theta": 500000.0, "tie_word_embeddings": false})"},
    {"mistral-7b", "mistral",
     R"({"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 32768,
         "tie_word_embeddings": false})"},
    {"gemma2-9b", "gemma2",
     R"({"vocab_size": 256000, "hidden_size": 3584, "intermediate_size": 14336, "num_hidden_layers": 42,
         "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "query_pre_attn_scalar": 256,
         "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
         "tie_word_embeddings": true})"},
};

}  // namespace

std::vector<std::string> hw_model_presets() {
  std::vector<std::string> out;
  for (const Preset& p : kPresets) out.push_back(p.name);
  return out;
}

bool hw_model_preset(const std::string& name, ModelConfig* out) {
  for (const Preset& p : kPresets)
    if (name == p.name) {
      *out = model_config_with(p.arch, p.fields, std::string("preset ") + p.name);
      return true;
    }
  return false;
}

}  // namespace luatune
