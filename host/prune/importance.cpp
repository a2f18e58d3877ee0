// Importance scores for structured pruning: Minitron's activation statistics, block influence and
// layer-removal loss for depth, and LLM-Pruner's first-order Taylor scores of coupled groups. All
// of them leave the model as they found it (weights, requires_grad flags, gradients).
// Facts: docs/pruning.md, "Sources" (Minitron, LLM-Pruner, ShortGPT); choices: the rest of docs/pruning.md.
#include "host/prune/importance.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cstdlib>
#include <functional>
#include <unordered_map>
#include <utility>

#include "host/adapt/qlora.h"
#include "host/core/error.h"
#include "host/train/loss.h"

namespace luatune {

namespace {

constexpr int64_t kLossChunk = 1024;  // rows of float32 logits the calibration loss holds at once

// ============================================================================================
// Calibration batches on the model's device

// Which tokens a statistic counts: those with a target (targets != -100), so padding, prompt
// tokens of chat data and each document's last token are left out; every token when a batch has
// no targets. The same rule for the activation statistics, block influence and the losses.
at::Tensor token_weights(const Batch& b) {  // (B, T) float32, 1 = counted
  if (!b.targets.defined()) return at::ones(b.ids.sizes(), at::kFloat);
  return b.targets.ne(kIgnoreTarget).to(at::kFloat);
}

ForwardOptions batch_options(const Batch& b, c10::Device dev) {
  ForwardOptions fo;
  if (b.positions.defined()) fo.positions = b.positions.to(dev);
  if (b.segments.defined()) fo.segments = b.segments.to(dev);
  return fo;
}

void check_calibration(const std::vector<Batch>& calibration, const char* fn, bool need_targets) {
  LT_CHECK(!calibration.empty(), fn << ": the calibration set is empty; pass a list of batches");
  int64_t counted = 0;
  for (size_t i = 0; i < calibration.size(); i++) {
    const Batch& b = calibration[i];
    LT_CHECK(b.ids.defined() && b.ids.dim() == 2,
             fn << ": calibration batch " << i + 1 << " needs ids of shape (rows, length)");
    LT_CHECK(!need_targets || b.targets.defined(),
             fn << ": calibration batch " << i + 1 << " has no targets");
    counted += static_cast<int64_t>(token_weights(b).sum().item<double>());
  }
  LT_CHECK(counted > 0, fn << ": the calibration batches have no target tokens (every target is -100)");
}

// Summed cross-entropy of hidden states h (B, T, C) before the final norm against b's targets.
double summed_loss(const Model& model, const at::Tensor& h, const Batch& b, const ForwardOptions& fo) {
  at::Tensor targets = b.targets.to(h.device()).reshape({-1});
  at::Tensor keep = targets.ne(kIgnoreTarget).nonzero().squeeze(1);
  if (keep.numel() == 0) return 0.0;
  at::Tensor x = model.final_norm(h, fo);
  x = x.reshape({-1, x.size(-1)}).index_select(0, keep);
  return chunked_cross_entropy(x, model.output_weight(), targets.index_select(0, keep), kLossChunk,
                               model.config.final_logit_softcap)
      .item<double>();
}

// ============================================================================================
// Activation statistics

// Minitron's aggregation for one hook point: acc += sum over rows of (mean over the row's counted
// tokens of |x|)^2. x (B, T, X); w (B, T) token weights; inv_n (B) 1 / counted tokens, 0 for rows
// with none. acc (X) float32.
void accumulate_sample_l2(at::Tensor& acc, const at::Tensor& x, const at::Tensor& w,
                          const at::Tensor& inv_n) {
  at::Tensor mean = (x.to(at::kFloat).abs() * w.unsqueeze(-1)).sum(1) * inv_n.unsqueeze(-1);  // (B, X)
  acc.add_(mean.pow(2).sum(0));
}

// Block influence of one layer on one batch: adds sum over counted tokens of 1 - cos(in, out).
void accumulate_influence(at::Tensor slot, const at::Tensor& in, const at::Tensor& out, const at::Tensor& w) {
  at::Tensor cos = at::cosine_similarity(in.to(at::kFloat), out.to(at::kFloat), -1, 1e-8);  // (B, T)
  slot.add_(((1.0 - cos) * w).sum());
}

}  // namespace

StructureScores activation_importance(Model& model, const std::vector<Batch>& calibration) {
  check_calibration(calibration, "activation_importance", false);
  at::NoGradGuard no_grad;
  const ModelConfig& c = model.config;
  const int64_t L = c.num_layers, H = c.num_heads, D = c.head_dim, C = c.hidden_size, I = c.intermediate_size;
  const c10::Device dev = model.device();
  auto f32 = at::TensorOptions(at::kFloat).device(dev);
  // One accumulator per hook point: hidden[2l] attn_in, hidden[2l + 1] mlp_in.
  std::vector<at::Tensor> hidden(2 * L), ctx(L), act(L);
  for (auto& a : hidden) a = at::zeros({C}, f32);
  for (auto& a : ctx) a = at::zeros({H * D}, f32);
  for (auto& a : act) a = at::zeros({I}, f32);
  at::Tensor influence = at::zeros({L}, f32);
  std::vector<at::Tensor> layer_in(L);
  double counted = 0;

  for (const Batch& b : calibration) {
    at::Tensor w_cpu = token_weights(b);
    counted += w_cpu.sum().item<double>();
    at::Tensor n = w_cpu.sum(1);
    at::Tensor w = w_cpu.to(dev), inv_n = (n.clamp_min(1).reciprocal() * (n > 0)).to(dev);
    ForwardOptions fo = batch_options(b, dev);
    fo.observe = [&](int64_t l, Site site, const at::Tensor& x) {
      switch (site) {
        case Site::layer_in:
          layer_in[l] = x;
          break;
        case Site::attn_in:
          accumulate_sample_l2(hidden[2 * l], x, w, inv_n);
          break;
        case Site::attn_ctx:
          accumulate_sample_l2(ctx[l], x, w, inv_n);
          break;
        case Site::mlp_in:
          accumulate_sample_l2(hidden[2 * l + 1], x, w, inv_n);
          break;
        case Site::mlp_act:
          accumulate_sample_l2(act[l], x, w, inv_n);
          break;
        case Site::layer_out:
          accumulate_influence(influence[l], layer_in[l], x, w);
          layer_in[l] = at::Tensor();
          break;
      }
    };
    model.hidden(b.ids, fo);
  }

  StructureScores s;
  s.hidden = at::zeros({C}, f32);
  for (auto& a : hidden) s.hidden.add_(a.sqrt());
  std::vector<at::Tensor> heads, channels;
  for (int64_t l = 0; l < L; l++) {
    heads.push_back(ctx[l].sqrt().view({H, D}).norm(2, 1));
    channels.push_back(act[l].sqrt());
  }
  s.head = at::stack(heads).cpu();
  s.intermediate = at::stack(channels).cpu();
  s.hidden = s.hidden.cpu();
  s.layer = (influence / counted).cpu();
  return s;
}

at::Tensor block_influence(Model& model, const std::vector<Batch>& calibration) {
  check_calibration(calibration, "block_influence", false);
  at::NoGradGuard no_grad;
  const int64_t L = model.config.num_layers;
  const c10::Device dev = model.device();
  at::Tensor influence = at::zeros({L}, at::TensorOptions(at::kFloat).device(dev));
  std::vector<at::Tensor> layer_in(L);
  double counted = 0;
  for (const Batch& b : calibration) {
    at::Tensor w_cpu = token_weights(b);
    counted += w_cpu.sum().item<double>();
    at::Tensor w = w_cpu.to(dev);
    ForwardOptions fo = batch_options(b, dev);
    // Only the residual stream is watched; run_layer set to the plain call keeps the sites inside
    // a layer quiet (ForwardOptions::observe).
    fo.run_layer = [](int64_t, const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& x) {
      return fn(x);
    };
    fo.observe = [&](int64_t l, Site site, const at::Tensor& x) {
      if (site == Site::layer_in) {
        layer_in[l] = x;
      } else if (site == Site::layer_out) {
        accumulate_influence(influence[l], layer_in[l], x, w);
        layer_in[l] = at::Tensor();
      }
    };
    // The final norm and LM head are not needed: the layers alone.
    model.run_layers(model.embed_input(b.ids, fo), 0, L, fo);
  }
  return (influence / counted).cpu();
}

at::Tensor layer_removal_loss(Model& model, const std::vector<Batch>& calibration) {
  check_calibration(calibration, "layer_removal_loss", true);
  at::NoGradGuard no_grad;
  const int64_t L = model.config.num_layers;
  const c10::Device dev = model.device();
  std::vector<double> skipped(L, 0.0);
  double full = 0, counted = 0;
  for (const Batch& b : calibration) {
    counted += token_weights(b).sum().item<double>();
    ForwardOptions fo = batch_options(b, dev);
    // h is the input of layer l; skipping l feeds it straight to layer l + 1. One stream is kept at
    // a time, at the cost of L (L + 1) / 2 layer evaluations per batch.
    at::Tensor h = model.embed_input(b.ids, fo);
    for (int64_t l = 0; l < L; l++) {
      skipped[l] += summed_loss(model, model.run_layers(h, l + 1, L, fo), b, fo);
      h = model.run_layers(h, l, l + 1, fo);
    }
    full += summed_loss(model, h, b, fo);
  }
  at::Tensor out = at::empty({L}, at::kFloat);
  for (int64_t l = 0; l < L; l++) out.select(0, l).fill_((skipped[l] - full) / counted);
  return out;
}

// ============================================================================================
// Taylor importance

namespace {

// Puts back every weight's requires_grad flag and gradient as they were, however the scoring ends.
class GradStateGuard {
 public:
  explicit GradStateGuard(Model& model) {
    for (auto& list : {model.named_parameters(), model.adapter_parameters()})
      for (auto& [name, t] : list) saved_.push_back({t, t->requires_grad(), t->grad()});
  }
  ~GradStateGuard() {
    for (auto& s : saved_) {
      s.tensor->mutable_grad() = s.grad;
      s.tensor->set_requires_grad(s.flag);  // in place: every handle on the weight sees it
    }
  }
  GradStateGuard(const GradStateGuard&) = delete;
  GradStateGuard& operator=(const GradStateGuard&) = delete;

 private:
  struct Saved {
    at::Tensor* tensor;
    bool flag;
    at::Tensor grad;
  };
  std::vector<Saved> saved_;
};

// The per-structure scores of one member weight's saliency s = w * dL/dw: 2-D weights give one
// score per row (dim 0) or column (dim 1), |s| summed ("param_first") or |sum s| ("vector") over
// the other dimension; vectors (norms, biases) give |s| per entry.
at::Tensor member_scores(const at::Tensor& s, int64_t dim, bool vector) {
  if (s.dim() == 1) return s.abs();
  const int64_t other = 1 - dim;
  return vector ? s.sum(other).abs() : s.abs().sum(other);
}

}  // namespace

StructureScores taylor_importance(Model& model, const std::vector<Batch>& calibration,
                                  const std::string& variant) {
  qlora_require_dense(model, "prune.importance (taylor)");
  LT_CHECK(variant == "param_first" || variant == "vector",
           "taylor_importance: unknown variant '" << variant << "' (expected param_first or vector)");
  const bool vector = variant == "vector";
  check_calibration(calibration, "taylor_importance", true);
  const ModelConfig& c = model.config;
  const int64_t L = c.num_layers, H = c.num_heads, KV = c.num_kv_heads, D = c.head_dim;
  const c10::Device dev = model.device();

  auto params = model.named_parameters();
  for (auto& [name, t] : params)
    LT_CHECK(t->defined() && t->is_floating_point(),
             "taylor_importance: weight "
                 << name << " is not a floating-point tensor; Taylor scores need "
                 << "gradients of every base weight (merge or drop quantized adapters first)");
  double counted = 0;
  for (const Batch& b : calibration) counted += token_weights(b).sum().item<double>();

  // The gradient of the mean cross-entropy per target token over the whole calibration set, summed
  // over batches in float32 (so how the set is split into batches does not change the scores).
  std::unordered_map<const void*, at::Tensor> grad_sum;  // by the weight's TensorImpl
  {
    GradStateGuard restore(model);
    at::AutoGradMode grad_mode(true);
    for (auto& [name, t] : model.adapter_parameters()) t->set_requires_grad(false);
    for (auto& [name, t] : params) {
      t->mutable_grad() = at::Tensor();
      t->set_requires_grad(true);
    }
    for (const Batch& b : calibration) {
      ForwardOptions fo = batch_options(b, dev);
      at::Tensor targets = b.targets.to(dev).reshape({-1});
      at::Tensor keep = targets.ne(kIgnoreTarget).nonzero().squeeze(1);
      if (keep.numel() == 0) continue;
      at::Tensor h = model.hidden(b.ids, fo);
      h = h.reshape({-1, h.size(-1)}).index_select(0, keep);
      at::Tensor loss = chunked_cross_entropy(h, model.output_weight(), targets.index_select(0, keep),
                                              kLossChunk, c.final_logit_softcap);
      (loss / counted).backward();
      for (auto& [name, t] : params) {
        at::Tensor& g = t->mutable_grad();
        if (!g.defined()) continue;
        at::Tensor& acc = grad_sum[t->unsafeGetTensorImpl()];
        if (acc.defined())
          acc.add_(g.to(at::kFloat));
        else
          acc = g.to(at::kFloat).clone();
        g = at::Tensor();
      }
    }
  }  // flags and gradients restored here

  at::NoGradGuard no_grad;
  // s = w * g in float32 for one weight (zeros when the loss never reached it).
  auto saliency = [&](const at::Tensor& w) -> at::Tensor {
    auto it = grad_sum.find(w.unsafeGetTensorImpl());
    at::Tensor wf = w.detach().to(at::kFloat);
    return it == grad_sum.end() ? at::zeros_like(wf) : wf * it->second;
  };
  auto f32 = at::TensorOptions(at::kFloat).device(dev);
  const int64_t group = H / KV;

  StructureScores s;
  at::Tensor hidden =
      member_scores(saliency(model.embed), 1, vector) + member_scores(saliency(model.norm), 0, vector);
  if (model.lm_head.defined()) hidden += member_scores(saliency(model.lm_head), 1, vector);
  std::vector<at::Tensor> heads, channels;
  for (int64_t l = 0; l < L; l++) {
    LayerWeights& w = model.layers[l];
    // Head h: q rows and o_proj columns of h. A KV group's k/v rows are shared by its `group`
    // query heads: each gets an equal share, so a group's summed score includes them and the
    // ranking inside a group is unchanged.
    at::Tensor head =
        member_scores(saliency(w.q.weight), 0, vector) + member_scores(saliency(w.o.weight), 1, vector);
    at::Tensor kv =
        member_scores(saliency(w.k.weight), 0, vector) + member_scores(saliency(w.v.weight), 0, vector);
    if (w.q.bias.defined()) head += member_scores(saliency(w.q.bias), 0, vector);
    if (w.k.bias.defined()) kv += member_scores(saliency(w.k.bias), 0, vector);
    if (w.v.bias.defined()) kv += member_scores(saliency(w.v.bias), 0, vector);
    at::Tensor kv_share = kv.view({KV, D}).sum(1).repeat_interleave(group) / static_cast<double>(group);
    heads.push_back(head.view({H, D}).sum(1) + kv_share);

    // MLP channel j: gate and up rows j, down column j.
    at::Tensor ch = member_scores(saliency(w.gate.weight), 0, vector) +
                    member_scores(saliency(w.up.weight), 0, vector) +
                    member_scores(saliency(w.down.weight), 1, vector);
    if (w.gate.bias.defined()) ch += member_scores(saliency(w.gate.bias), 0, vector);
    if (w.up.bias.defined()) ch += member_scores(saliency(w.up.bias), 0, vector);
    channels.push_back(ch);

    // Hidden channel c: every norm entry, q/k/v/gate/up columns, o/down rows (and their biases).
    for (const at::Tensor* n : {&w.input_norm, &w.post_attn_norm, &w.pre_ff_norm, &w.post_ff_norm})
      if (n->defined()) hidden += member_scores(saliency(*n), 0, vector);
    for (const Linear* in : {&w.q, &w.k, &w.v, &w.gate, &w.up})
      hidden += member_scores(saliency(in->weight), 1, vector);
    for (const Linear* out : {&w.o, &w.down}) {
      hidden += member_scores(saliency(out->weight), 0, vector);
      if (out->bias.defined()) hidden += member_scores(saliency(out->bias), 0, vector);
    }
  }
  s.head = at::stack(heads).cpu();
  s.intermediate = at::stack(channels).cpu();
  s.hidden = hidden.cpu();

  // Layer l: every weight named model.layers.l.*; "vector" takes |sum of w * g| over all of them,
  // the first-order estimate of the loss change when the whole layer is zeroed.
  at::Tensor layer = at::zeros({L}, f32);
  const std::string prefix = "model.layers.";
  for (auto& [name, t] : params) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const int64_t l = std::strtoll(name.c_str() + prefix.size(), nullptr, 10);
    at::Tensor sal = saliency(*t);
    layer.select(0, l).add_(vector ? sal.sum() : sal.abs().sum());
  }
  if (vector) layer = layer.abs();
  s.layer = layer.cpu();
  return s;
}

}  // namespace luatune
