// Memory planner: parameter counts and peak memory by component, as luatune's trainer allocates it
// (host/train/trainer.cpp, loss.cpp, recompute.cpp; host/model/transformer.cpp; host/adapt/lora.cpp).
// Why each term is what it is: docs/hardware.md "Memory planner", with an 8B example worked by hand.
#include "host/hw/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "host/core/error.h"
#include "host/core/strings.h"

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

PlanMethod plan_method_parse(const std::string& name) {
  if (name == "full") return PlanMethod::method_full;
  if (name == "lora") return PlanMethod::method_lora;
  if (name == "qlora") return PlanMethod::method_qlora;
  fail("hw.plan: unknown method '" + name + "'", "expected \"full\", \"lora\" or \"qlora\"");
}

std::string plan_method_name(PlanMethod m) {
  switch (m) {
    case PlanMethod::method_full: return "full";
    case PlanMethod::method_lora: return "lora";
    case PlanMethod::method_qlora: return "qlora";
  }
  return "?";
}

// ============================================================================================
// Memory

namespace {

double dtype_bytes(const std::string& dtype) {
  if (dtype == "bf16" || dtype == "bfloat16" || dtype == "fp16" || dtype == "f16" || dtype == "float16") return 2;
  if (dtype == "fp32" || dtype == "f32" || dtype == "float32" || dtype == "float") return 4;
  fail("hw.plan: unknown dtype '" + dtype + "'", "expected \"bf16\", \"fp16\" or \"fp32\"");
}

// Bytes one decoder layer keeps for backward, per token (what autograd saves in transformer.cpp's
// layer; see docs/hardware.md for the op-by-op list). p = bytes per element of the model dtype.
double layer_bytes_per_token(const ModelConfig& c, const PlanOptions& o, double p) {
  const bool frozen = o.method != PlanMethod::method_full;
  const double C = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
  const double H = static_cast<double>(c.num_heads), HD = H * static_cast<double>(c.head_dim);
  const double KVD = static_cast<double>(c.num_kv_heads * c.head_dim);
  double b = 0;
  // RMSNorm keeps its float32 input, and its normalised output in the dtype when the weight trains.
  b += (c.gemma_norms ? 4 : 2) * C * (4 + (frozen ? 0 : p));
  if (c.qk_norm) b += (HD + KVD) * (4 + (frozen ? 0 : p));
  // Attention keeps q, k and v repeated to H heads (repeat_kv copies), its output, and a float32
  // log-sum-exp per head; o_proj keeps the transposed copy of that output when its weight trains.
  b += 4 * HD * p + 4 * H + (frozen ? 0 : HD * p);
  // The explicit path (Gemma 2's logit softcap, or no fused SDPA) keeps the T x T scores: the tanh
  // output in the dtype, the float32 softmax, and the probabilities in the dtype.
  if (c.attn_logit_softcap > 0 || !o.sdpa)
    b += H * static_cast<double>(o.seq_len) * ((c.attn_logit_softcap > 0 ? 2 * p : p) + 4);
  // MLP: the gate output (for act'), act(gate) and up (for the product), and the product (down's
  // input) when down trains.
  b += (frozen ? 3 : 4) * I * p;
  // LoRA, per adapted projection: the float32 (dropped) input, a byte of dropout mask, and A's output.
  if (frozen)
    for (const Proj& pr : layer_projections(c))
      if (targeted(o.lora_targets, pr.name))
        b += static_cast<double>(pr.in) * (4 + (o.lora_dropout > 0 ? 1 : 0)) + 4.0 * static_cast<double>(o.lora_r);
  return b;
}

}  // namespace

PlanComponents hw_plan_memory(const ModelConfig& c, const PlanOptions& o) {
  LT_CHECK(o.micro_batch > 0, "hw.plan: micro_batch must be positive, got " << o.micro_batch);
  LT_CHECK(o.seq_len > 0, "hw.plan: seq_len must be positive, got " << o.seq_len);
  LT_CHECK(o.gpus > 0, "hw.plan: gpus must be positive, got " << o.gpus);
  LT_CHECK(o.loss_chunk > 0, "hw.plan: loss_chunk must be positive, got " << o.loss_chunk);
  LT_CHECK(o.optimizer == "adamw" || o.optimizer == "sgd",
           "hw.plan: optimizer must be \"adamw\" or \"sgd\", got \"" << o.optimizer << "\"");
  const HwParamCounts n = hw_param_counts(c);
  const double p = dtype_bytes(o.dtype);
  const bool full = o.method == PlanMethod::method_full;
  const double N = static_cast<double>(n.total);
  const double tokens = static_cast<double>(o.micro_batch) * static_cast<double>(o.seq_len);
  const double C = static_cast<double>(c.hidden_size), V = static_cast<double>(c.vocab_size);
  const double L = static_cast<double>(c.num_layers);
  PlanComponents m;

  // Weights. QLoRA: NF4 + double quantisation on the layers' projections, 16-bit for the rest.
  if (o.method == PlanMethod::method_qlora)
    m.weights = static_cast<double>(n.linear) * kHwNf4BytesPerParam + (N - static_cast<double>(n.linear)) * p;
  else
    m.weights = N * p;

  // Trainable weights: the whole model, or float32 adapters (lora.cpp keeps A and B in float32).
  double trainable = full ? N : static_cast<double>(hw_lora_params(c, o.lora_r, o.lora_targets));
  double train_bytes = full ? p : 4;
  if (!full) m.adapters = trainable * 4;
  if (full && o.master_weights && p < 4) m.master_weights = N * 4;
  m.gradients = trainable * train_bytes;  // a parameter's gradient has its dtype
  if (o.optimizer == "adamw") m.optimizer_states = trainable * 8;  // exp_avg, exp_avg_sq: float32
  else if (o.sgd_momentum) m.optimizer_states = trainable * 4;

  // Activations: all layers (or, checkpointed, each layer's input plus a recomputed layer), one
  // layer's backward working set, and the head: the final norm and the hidden rows the loss keeps.
  const double layer = layer_bytes_per_token(c, o, p) * tokens;
  const double head = tokens * (C * (4 + (full ? p : 0)) + C * p + 4);
  double dequant = o.method == PlanMethod::method_qlora ? static_cast<double>(n.largest_linear) * p : 0;
  if (o.checkpointing)
    m.activations = L * tokens * C * p + 2 * layer + head + dequant;
  else
    m.activations = L * layer + layer + head + dequant;

  // Chunked cross-entropy (loss.cpp): one chunk of logits in float32 (+ its dtype matmul output /
  // dtype gradient), the float32 tanh under a final softcap, grad_hidden, and the head's float32
  // gradient (then cast) when the head trains.
  const double rows = std::min(static_cast<double>(o.loss_chunk), tokens);
  m.logits = rows * V * (4 + (p < 4 ? p : 0) + (c.final_logit_softcap > 0 ? 4 : 0)) + tokens * C * p;
  if (full) m.logits += V * C * (4 + p);

  // The optimizer step, after backward (activations freed): per parameter, clip's float32 square
  // and the update's float32 gradient + sqrt temporaries; the largest trainable tensor sets it.
  double largest = full ? static_cast<double>(std::max({n.embedding, n.lm_head, n.largest_linear}))
                        : static_cast<double>(c.intermediate_size + c.hidden_size) * static_cast<double>(o.lora_r);
  m.optimizer_step = largest * (p < 4 || !full ? 12 : 8);

  if (o.gpus > 1) m.ddp_buckets = kHwDdpBucketBytes;
  double allocated = m.weights + m.adapters + m.master_weights + m.gradients + m.optimizer_states +
                     std::max(m.activations + m.logits, m.optimizer_step) + m.ddp_buckets;
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
          {"logits", p.logits},
          {"optimizer_step", p.optimizer_step},
          {"ddp_buckets", p.ddp_buckets},
          {"cuda_context", p.cuda_context},
          {"fragmentation", p.fragmentation}};
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

std::vector<std::string> advise(const ModelConfig& c, const PlanOptions& o, const GpuSpec& g, double peak) {
  std::vector<std::string> out;
  const double mem = g.memory_gb;
  auto total = [&](const PlanOptions& x) { return hw_plan_memory(c, x).total; };
  const std::string now = "peak " + gib(peak) + " GiB";
  bool any = false;
  if (!o.checkpointing) {
    PlanOptions x = o;
    x.checkpointing = true;
    if (total(x) / kGiB <= mem) {
      out.push_back("turn on checkpoint_layers=true (" + now + " -> " + gib(total(x)) + " GiB)");
      any = true;
    }
  }
  if (o.micro_batch > 1) {
    int64_t b = hw_max_micro_batch(c, o, mem);
    if (b > 0) {
      out.push_back("micro_batch " + std::to_string(b) + " fits (batch_size=" + std::to_string(b) +
                    "; raise grad_accum to keep the batch)");
      any = true;
    }
  }
  PlanOptions ck = o;
  ck.checkpointing = true;
  ck.micro_batch = 1;
  // What the LoRA/QLoRA suggestions change besides the method.
  const std::string with_ck = std::string(o.checkpointing ? "" : ", checkpoint_layers=true") +
                              (o.micro_batch > 1 ? ", micro_batch 1" : "");
  if (o.method == PlanMethod::method_full) {
    PlanOptions x = ck;
    x.method = PlanMethod::method_lora;
    if (total(x) / kGiB <= mem) {
      out.push_back("use LoRA (r=" + std::to_string(o.lora_r) + with_ck + ": " + gib(total(x)) + " GiB)");
      any = true;
    }
  }
  if (o.method != PlanMethod::method_qlora) {
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
  for (int64_t b : {o.micro_batch, int64_t{1}}) {
    bool found = false;
    for (int64_t len = o.seq_len / 2; len >= 128 && !found; len /= 2) {
      PlanOptions x = o;
      x.seq_len = len;
      x.micro_batch = b;
      if (fits(c, x, mem)) {
        out.push_back("shorter sequences: max_length " + std::to_string(len) + " fits at micro_batch " +
                      std::to_string(b) + " (" + gib(total(x)) + " GiB)");
        found = any = true;
      }
    }
    if (found || b == 1) break;
  }
  // Large vocabularies (Gemma 2: 256k) make the loss chunk's float32 logits a real share.
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
  out.push_back(
      "more GPUs do not lower per-GPU memory: luatune's data parallelism replicates the model (no FSDP/ZeRO)");
  if (!any) out.push_back("nothing luatune supports fits in " + gib(mem * kGiB) + " GiB at this sequence length");
  return out;
}

}  // namespace

int64_t hw_max_micro_batch(const ModelConfig& c, PlanOptions o, double memory_gb) {
  o.micro_batch = 1;
  if (!fits(c, o, memory_gb)) return 0;
  int64_t lo = 1, hi = 4096;  // lo fits; find the largest that fits (peak grows with the batch)
  o.micro_batch = hi;
  if (fits(c, o, memory_gb)) return hi;
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    o.micro_batch = mid;
    (fits(c, o, memory_gb) ? lo : hi) = mid;
  }
  return lo;
}

Plan hw_plan(const ModelConfig& c, const PlanOptions& o, const std::vector<GpuSpec>& catalog) {
  Plan plan;
  plan.model = c;
  plan.options = o;
  plan.params = hw_param_counts(c);
  plan.trainable = o.method == PlanMethod::method_full ? plan.params.total : hw_lora_params(c, o.lora_r, o.lora_targets);
  LT_CHECK(o.method == PlanMethod::method_full || plan.trainable > 0,
           "hw.plan: the LoRA targets match no projection (got " << str_join(o.lora_targets, ", ")
                                                                 << "; expected q_proj ... down_proj or all-linear)");
  plan.components = hw_plan_memory(c, o);
  const double peak = plan.components.total;
  for (const GpuSpec& g : catalog) {
    GpuFit f;
    f.gpu = g.name;
    f.memory_gb = g.memory_gb;
    f.fits = peak / kGiB <= g.memory_gb;
    f.headroom_gb = g.memory_gb - peak / kGiB;
    f.max_micro_batch = hw_max_micro_batch(c, o, g.memory_gb);
    f.no_bf16 = !g.bf16 && o.dtype == "bf16";
    if (!f.fits) f.advice = advise(c, o, g, peak);
    if (f.no_bf16)
      f.advice.push_back(g.name + " has no bf16 tensor cores: use dtype=fp16 (or fp32), or expect bf16 to run emulated");
    plan.gpus.push_back(std::move(f));
  }
  return plan;
}

// ============================================================================================
// Text

std::string hw_plan_text(const Plan& p) {
  std::ostringstream s;
  char buf[256];
  const PlanOptions& o = p.options;
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
  s << ", " << o.optimizer << "\n";
  s << "shape: micro_batch " << o.micro_batch << " x seq_len " << o.seq_len << ", checkpointing "
    << (o.checkpointing ? "on" : "off") << ", loss chunk " << o.loss_chunk << ", " << o.gpus << " GPU"
    << (o.gpus == 1 ? "" : "s (data parallel, replicated)") << "\n\n";
  s << "predicted peak memory per GPU (GiB)\n";
  for (const auto& [name, bytes] : plan_component_list(p.components)) {
    if (bytes < 0.005 * kGiB) continue;  // below the printed precision
    std::snprintf(buf, sizeof buf, "  %-18s %8.2f%s\n", name.c_str(), bytes / kGiB,
                  name == "optimizer_step" ? "  (transient after backward; the larger of it and activations+logits counts)"
                                           : "");
    s << buf;
  }
  std::snprintf(buf, sizeof buf, "  %-18s %8.2f\n\n", "total", p.components.total / kGiB);
  s << buf;
  std::snprintf(buf, sizeof buf, "%-10s %8s %5s %9s %10s\n", "gpu", "memory", "fits", "headroom", "max_micro");
  s << buf;
  for (const GpuFit& f : p.gpus) {
    std::snprintf(buf, sizeof buf, "%-10s %8.0f %5s %9.1f %10lld\n", f.gpu.c_str(), f.memory_gb,
                  f.fits ? "yes" : "no", f.headroom_gb, static_cast<long long>(f.max_micro_batch));
    s << buf;
    for (const auto& a : f.advice) s << "             - " << a << "\n";
  }
  return s.str();
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
