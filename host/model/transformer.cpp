// The forward pass. One code path for every family; ModelConfig's switches select biases, Qwen3's
// per-head q/k norms, Gemma 2's (1 + w) norms, embedding scale, softcaps and four norms per layer,
// and per-layer sliding windows. Shapes: B batch, T new positions, S key positions (cache + new),
// C hidden, H query heads, KV key/value heads, D head_dim, I intermediate, V vocab.
#include "host/model/transformer.h"

#include <algorithm>

#include <ATen/ATen.h>

#include <cmath>

#include "host/core/error.h"
#include "host/model/attention.h"
#include "host/model/fused.h"
#include "host/model/rope.h"
#include "host/quant/quant.h"

namespace luatune {

at::Tensor Linear::forward(const at::Tensor& x) const {
  if (adapter && adapter->enabled) return adapter->forward(*this, x);
  return base_forward(x);
}

// Linears on one input: together when the first one's adapter serves the group, else one by one.
std::vector<at::Tensor> linear_group(const std::vector<const Linear*>& group, const at::Tensor& x) {
  const Linear& first = *group.front();
  if (first.adapter && first.adapter->enabled)
    if (std::vector<at::Tensor> out = first.adapter->forward_group(group, x); !out.empty()) return out;
  std::vector<at::Tensor> out;
  for (const Linear* l : group) out.push_back(l->forward(x));
  return out;
}

at::Tensor Linear::base_forward(const at::Tensor& x) const {
  if (quant) return linear_4bit(x, weight, *quant, bias);
  return at::linear(x, weight, bias);
}

at::Tensor Linear::dense_weight() const {
  return quant ? dequantize_4bit(weight, *quant) : weight;
}
int64_t Linear::out_features() const {
  return quant ? quant->shape.at(0) : weight.size(0);
}
int64_t Linear::in_features() const {
  return quant ? quant->shape.at(1) : weight.size(1);
}

namespace {

// Which keys each query may see: causal by token order (position ids only feed RoPE, as in HF),
// inside the sliding window when `window` > 0, and inside the same document when segments are
// given. q_idx (T) and k_idx (S) are token indices in the whole sequence (cache included).
// Returns (1 or B, 1, T, S) bool.
at::Tensor attention_mask(const at::Tensor& q_idx, const at::Tensor& k_idx, int64_t window,
                          const at::Tensor& q_seg, const at::Tensor& k_seg) {
  at::Tensor qp = q_idx.unsqueeze(-1), kp = k_idx.unsqueeze(-2);  // (T, 1), (1, S)
  at::Tensor allowed = kp <= qp;
  if (window > 0) allowed = allowed.logical_and(kp > qp - window);
  if (q_seg.defined()) allowed = allowed.logical_and(q_seg.unsqueeze(-1) == k_seg.unsqueeze(-2));
  if (allowed.dim() == 2) allowed = allowed.unsqueeze(0);
  return allowed.unsqueeze(1);
}

}  // namespace

namespace {

// RMSNorm under a hidden-channel mask: statistics over the channels where `hz` != 0 only (the
// channels a pruned model would still have), output multiplied by hz. Without a mask, the fused
// RMSNorm; with one (pruning's mask training, where hz itself takes gradients), the composition.
at::Tensor masked_rms_norm(const at::Tensor& x, const at::Tensor& w, double eps, bool gemma,
                           const at::Tensor& hz) {
  if (!hz.defined()) return rms_norm_fused(x, w, eps, gemma);
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor live = hz.ne(0).to(at::kFloat);
  at::Tensor var = (xf.pow(2) * live).sum(-1, true) / live.sum().clamp_min(1.0);
  at::Tensor normed = xf * at::rsqrt(var + eps);
  at::Tensor hzf = hz.to(at::kFloat);
  if (gemma) return (normed * (1.0 + w.to(at::kFloat)) * hzf).to(x.scalar_type());
  return w * (normed * hzf).to(x.scalar_type());
}

const at::Tensor& mask_of(const ForwardOptions& o, const at::Tensor StructureMasks::*field) {
  static const at::Tensor none;
  return o.masks ? o.masks->*field : none;
}

}  // namespace

at::Tensor Model::embed_input(const at::Tensor& ids_in, const ForwardOptions& opt) const {
  const ModelConfig& c = config;
  LT_CHECK(ids_in.dim() == 2, "model:forward: ids must be (batch, length), got " << ids_in.sizes());
  at::Tensor ids = ids_in.to(embed.device(), at::kLong);
  LT_CHECK(ids.size(1) > 0, "model:forward: ids has no positions");
  if (ids_in.device().is_cpu()) {  // (on a GPU this check would cost a sync per step)
    // Read directly, not through item(): bench/step_ops.sh counts item() as a GPU wait.
    const at::Tensor host = ids_in.to(at::kLong).contiguous();
    const int64_t* p = host.data_ptr<int64_t>();
    int64_t lo = 0, hi = 0;
    if (host.numel() > 0) lo = hi = p[0];
    for (int64_t i = 1; i < host.numel(); i++) {
      lo = std::min(lo, p[i]);
      hi = std::max(hi, p[i]);
    }
    LT_CHECK(lo >= 0 && hi < c.vocab_size, "model:forward: token id " << (lo < 0 ? lo : hi)
                                                                      << " outside the vocabulary [0, "
                                                                      << c.vocab_size << ")");
  }
  at::Tensor h = at::embedding(embed, ids);  // (B, T, C)
  const at::Tensor& hz = mask_of(opt, &StructureMasks::hidden);
  if (c.gemma_norms) {
    // HF rounds the normalizer to the model dtype before multiplying. Under a hidden mask it is
    // sqrt(live channels), what the model with those channels removed will use.
    at::Tensor normalizer =
        at::scalar_tensor(std::sqrt(static_cast<double>(c.hidden_size)), h.options().requires_grad(false));
    if (hz.defined()) normalizer = hz.detach().ne(0).sum().to(at::kDouble).sqrt().to(h.scalar_type());
    h = h * normalizer;
  }
  if (hz.defined() && !c.tie_word_embeddings) h = h * hz.to(h.scalar_type());
  return h;
}

at::Tensor Model::final_norm(const at::Tensor& h, const ForwardOptions& opt) const {
  return masked_rms_norm(h, norm, config.rms_norm_eps, config.gemma_norms,
                         mask_of(opt, &StructureMasks::hidden));
}

at::Tensor Model::hidden(const at::Tensor& ids, const ForwardOptions& opt) const {
  at::Tensor h = run_layers(embed_input(ids, opt), 0, static_cast<int64_t>(layers.size()), opt);
  if (opt.last_only) h = h.narrow(1, h.size(1) - 1, 1);
  return final_norm(h, opt);
}

at::Tensor Model::run_layers(const at::Tensor& h_start, int64_t begin, int64_t end,
                             const ForwardOptions& opt) const {
  const ModelConfig& c = config;
  LT_CHECK(h_start.dim() == 3 && h_start.size(2) == c.hidden_size,
           "model: layer input must be (batch, length, " << c.hidden_size << "), got " << h_start.sizes());
  LT_CHECK(0 <= begin && begin <= end && end <= static_cast<int64_t>(layers.size()),
           "model: layers [" << begin << ", " << end << ") outside [0, " << layers.size() << ")");
  if (!opt.run_layer_gathers) ensure_full_weights();
  at::Tensor h = h_start;
  const int64_t B = h.size(0), T = h.size(1);
  const auto iopts = at::TensorOptions(at::kLong).device(h.device());
  KVCache* cache = opt.cache;
  const int64_t past = cache ? cache->length : 0;
  if (cache) {
    LT_CHECK(begin == 0 && end == static_cast<int64_t>(layers.size()), "model: a KV cache needs every layer");
    LT_CHECK(past + T <= cache->capacity, "model:forward: KV cache full ("
                                              << past << " + " << T << " > capacity " << cache->capacity
                                              << ")");
    LT_CHECK(!opt.segments.defined(), "model:forward: segments cannot be combined with a KV cache");
  }
  at::Tensor positions = opt.positions.defined()
                             ? opt.positions.to(h.device(), at::kLong)
                             : (at::arange(past, past + T, iopts).unsqueeze(0).expand({B, T}));
  LT_CHECK(positions.size(0) == B && positions.size(1) == T,
           "model:forward: positions must have the shape of ids");

  const at::ScalarType dtype = h.scalar_type();
  // (B, T, D) each, shared by every layer.
  auto cos_sin = rope_cos_sin(rope_inv_freq_on(c, h.device()), positions,
                              c.rope.type == RopeType::rope_yarn ? c.rope.attention_factor : 1.0, dtype);
  at::Tensor cos = cos_sin.first, sin = cos_sin.second;

  // Token indices for the masks: the new tokens follow the cached ones.
  at::Tensor q_idx = at::arange(past, past + T, iopts);
  at::Tensor k_idx = at::arange(0, past + T, iopts);
  const bool plain_causal = !cache && !opt.segments.defined();
  at::Tensor mask_full, mask_sliding;
  auto mask_for = [&](bool sliding) -> const at::Tensor& {
    at::Tensor& m = sliding ? mask_sliding : mask_full;
    if (!m.defined())
      m = attention_mask(q_idx, k_idx, sliding ? c.sliding_window : 0, opt.segments, opt.segments);
    return m;
  };

  const int64_t H = c.num_heads, KV = c.num_kv_heads, D = c.head_dim;
  const at::Tensor hz = mask_of(opt, &StructureMasks::hidden);
  const at::Tensor& lz_all = mask_of(opt, &StructureMasks::layer);
  const at::Tensor& headz_all = mask_of(opt, &StructureMasks::head);
  const at::Tensor& iz_all = mask_of(opt, &StructureMasks::intermediate);
  const auto observe = opt.observe;
  // Inside a layer only when layers are not recomputed (a recomputed layer would report twice).
  const bool watch = observe && !opt.run_layer;
  for (int64_t l = begin; l < end; l++) {
    const bool sliding = c.layer_sliding[l] && (past + T > c.sliding_window);
    at::Tensor mask = plain_causal && !sliding ? at::Tensor() : mask_for(sliding);
    at::Tensor lz = lz_all.defined() ? lz_all[l] : at::Tensor();
    at::Tensor headz = headz_all.defined() ? headz_all[l] : at::Tensor();
    at::Tensor iz = iz_all.defined() ? iz_all[l] : at::Tensor();
    if (observe) observe(l, Site::layer_in, h);
    // One decoder layer, (B, T, C) -> (B, T, C); a function so the trainer can recompute it in the
    // backward pass instead of keeping its activations (ForwardOptions::run_layer).
    // Captures by value: the trainer may call it again after hidden() has returned.
    auto layer = [this, l, cos, sin, mask, B, T, H, KV, D, past, cache, hz, lz, headz, iz, observe,
                  watch](const at::Tensor& h_in) -> at::Tensor {
      const ModelConfig& c = config;
      const LayerWeights& L = layers[l];
      at::Tensor x = masked_rms_norm(h_in, L.input_norm, c.rms_norm_eps, c.gemma_norms, hz);
      if (watch) observe(l, Site::attn_in, x);
      const std::vector<at::Tensor> qkv = linear_group({&L.q, &L.k, &L.v}, x);
      at::Tensor q = qkv[0].view({B, T, H, D});
      at::Tensor k = qkv[1].view({B, T, KV, D});
      at::Tensor v = qkv[2].view({B, T, KV, D}).transpose(1, 2);
      if (c.qk_norm) {
        q = rms_norm_fused(q, L.q_norm, c.rms_norm_eps, false);
        k = rms_norm_fused(k, L.k_norm, c.rms_norm_eps, false);
      }
      // RoPE on the projections' own layout; the transposes are views (SDPA's flash kernels want
      // (B, T, heads, D) memory anyway).
      q = rope_fused(q, cos, sin).transpose(1, 2);  // (B, H, T, D)
      k = rope_fused(k, cos, sin).transpose(1, 2);  // (B, KV, T, D)
      if (cache) {
        cache->k[l].narrow(2, past, T).copy_(k);
        cache->v[l].narrow(2, past, T).copy_(v);
        k = cache->k[l].narrow(2, 0, past + T);
        v = cache->v[l].narrow(2, 0, past + T);
      }
      at::Tensor a =
          attention_forward(q, k, v, mask, c.softmax_scale(), c.attn_logit_softcap);  // (B, H, T, D)
      if (headz.defined()) a = a * headz.to(a.scalar_type()).view({1, H, 1, 1});
      a = a.transpose(1, 2).reshape({B, T, H * D});
      if (watch) observe(l, Site::attn_ctx, a);
      a = L.o.forward(a);  // (B, T, C)
      if (L.attn_branch && L.attn_branch->enabled)
        a = a + L.attn_branch->forward(L, c, q);  // e.g. LLaMA-Adapter
      // The branch output: Gemma 2's post-norm carries the hidden mask, otherwise multiply by it.
      if (c.gemma_norms)
        a = masked_rms_norm(a, L.post_attn_norm, c.rms_norm_eps, true, hz);
      else if (hz.defined())
        a = a * hz.to(a.scalar_type());
      if (lz.defined()) a = a * lz.to(a.scalar_type());
      at::Tensor h1 = h_in + a;
      x = masked_rms_norm(h1, c.gemma_norms ? L.pre_ff_norm : L.post_attn_norm, c.rms_norm_eps, c.gemma_norms,
                          hz);
      if (watch) observe(l, Site::mlp_in, x);
      // up before gate: the order their adapters draw dropout in when each computes alone.
      const std::vector<at::Tensor> ug = linear_group({&L.up, &L.gate}, x);
      at::Tensor up = ug[0];
      if (iz.defined()) up = up * iz.to(up.scalar_type());
      at::Tensor act = glu_fused(ug[1], up, c.act);
      if (watch) observe(l, Site::mlp_act, act);
      at::Tensor m = L.down.forward(act);
      if (c.gemma_norms)
        m = masked_rms_norm(m, L.post_ff_norm, c.rms_norm_eps, true, hz);
      else if (hz.defined())
        m = m * hz.to(m.scalar_type());
      if (lz.defined()) m = m * lz.to(m.scalar_type());
      return h1 + m;
    };
    h = opt.run_layer && !cache ? opt.run_layer(l, layer, h) : layer(h);
    if (observe) observe(l, Site::layer_out, h);
  }
  if (cache) cache->length = past + T;
  return h;
}

void Model::ensure_full_weights() const {
  if (residency) residency->acquire_all();
}

at::Tensor Model::logits(const at::Tensor& hidden) const {
  at::Tensor out = at::linear(hidden, output_weight());
  if (config.final_logit_softcap > 0)
    out = at::tanh(out / config.final_logit_softcap) * config.final_logit_softcap;
  return out;
}

at::Tensor Model::forward(const at::Tensor& ids, const ForwardOptions& options) const {
  return logits(hidden(ids, options));
}

std::vector<ParamSlot> model_slots(Model& m) {
  const ModelConfig& c = m.config;
  const int64_t C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, D = c.head_dim;
  const int64_t HD = c.num_heads * D, KVD = c.num_kv_heads * D;
  if (m.layers.size() != static_cast<size_t>(c.num_layers)) m.layers.resize(c.num_layers);
  std::vector<ParamSlot> out;
  auto add = [&](std::string name, at::Tensor& t, std::vector<int64_t> shape, bool present = true,
                 Linear* lin = nullptr) {
    if (present) out.push_back({std::move(name), &t, std::move(shape), lin});
  };
  // A Linear's weight (out, in) and, when the config gives it one, its bias (out).
  auto linear = [&](const std::string& name, Linear& lin, int64_t n_out, int64_t n_in, bool bias) {
    add(name + ".weight", lin.weight, {n_out, n_in}, true, &lin);
    add(name + ".bias", lin.bias, {n_out}, bias, &lin);
  };
  add("model.embed_tokens.weight", m.embed, {V, C});
  for (int64_t i = 0; i < c.num_layers; i++) {
    LayerWeights& L = m.layers[i];
    std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", L.input_norm, {C});
    linear(p + "self_attn.q_proj", L.q, HD, C, c.attention_bias);
    linear(p + "self_attn.k_proj", L.k, KVD, C, c.attention_bias);
    linear(p + "self_attn.v_proj", L.v, KVD, C, c.attention_bias);
    linear(p + "self_attn.o_proj", L.o, C, HD, c.o_bias);
    add(p + "self_attn.q_norm.weight", L.q_norm, {D}, c.qk_norm);
    add(p + "self_attn.k_norm.weight", L.k_norm, {D}, c.qk_norm);
    add(p + "post_attention_layernorm.weight", L.post_attn_norm, {C});
    add(p + "pre_feedforward_layernorm.weight", L.pre_ff_norm, {C}, c.gemma_norms);
    add(p + "post_feedforward_layernorm.weight", L.post_ff_norm, {C}, c.gemma_norms);
    linear(p + "mlp.gate_proj", L.gate, I, C, c.mlp_bias);
    linear(p + "mlp.up_proj", L.up, I, C, c.mlp_bias);
    linear(p + "mlp.down_proj", L.down, C, I, c.mlp_bias);
  }
  add("model.norm.weight", m.norm, {C});
  add("lm_head.weight", m.lm_head, {V, C},
      !c.tie_word_embeddings && !c.score_head);  // a reward model has none
  return out;
}

std::vector<std::pair<std::string, at::Tensor*>> Model::named_parameters() {
  ensure_full_weights();  // ZeRO-3: whoever reads the weights gets them whole
  std::vector<std::pair<std::string, at::Tensor*>> out;
  for (const ParamSlot& s : model_slots(*this))
    if (s.tensor->defined()) out.emplace_back(s.name, s.tensor);
  return out;
}

std::vector<std::pair<std::string, at::Tensor*>> Model::adapter_parameters() {
  ensure_full_weights();  // ZeRO-3: whoever reads the weights gets them whole
  std::vector<std::pair<std::string, at::Tensor*>> out;
  for (const ParamSlot& s : model_slots(*this)) {
    const std::string suffix = ".weight";
    if (!s.linear || !s.linear->adapter ||
        s.name.compare(s.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    std::string base = s.name.substr(0, s.name.size() - suffix.size());
    for (auto& [name, t] : s.linear->adapter->parameters()) out.emplace_back(base + "." + name, t);
  }
  for (size_t i = 0; i < layers.size(); i++) {
    if (!layers[i].attn_branch) continue;
    std::string p = "model.layers." + std::to_string(i) + ".self_attn.";
    for (auto& [name, t] : layers[i].attn_branch->parameters()) out.emplace_back(p + name, t);
  }
  return out;
}

std::vector<std::pair<std::string, at::Tensor*>> Model::trainable_parameters() {
  std::vector<std::pair<std::string, at::Tensor*>> out;
  for (auto& p : named_parameters())
    if (p.second->requires_grad()) out.push_back(p);
  for (auto& p : adapter_parameters()) out.push_back(p);
  return out;
}

void Model::set_training(bool training) {
  for (const ParamSlot& s : model_slots(*this))
    if (s.linear && s.linear->adapter) s.linear->adapter->training = training;
  for (LayerWeights& L : layers)
    if (L.attn_branch) L.attn_branch->training = training;
}

void Model::set_adapters_enabled(bool enabled) {
  for (const ParamSlot& s : model_slots(*this))
    if (s.linear && s.linear->adapter) s.linear->adapter->enabled = enabled;
  for (LayerWeights& L : layers)
    if (L.attn_branch) L.attn_branch->enabled = enabled;
}

std::vector<std::pair<std::string, at::Tensor>> Model::state() const {
  ensure_full_weights();  // ZeRO-3: whoever reads the weights gets them whole
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const ParamSlot& s : model_slots(const_cast<Model&>(*this))) {
    if (!s.tensor->defined()) continue;
    if (s.is_4bit()) {
      for (auto& e : quant_state_tensors(s.name, *s.tensor, *s.linear->quant)) out.push_back(std::move(e));
      continue;
    }
    out.emplace_back(s.name, *s.tensor);
  }
  return out;
}

ParamCounts Model::count_parameters() const {
  ensure_full_weights();  // ZeRO-3: whoever reads the weights gets them whole
  ParamCounts n;
  for (const ParamSlot& s : model_slots(const_cast<Model&>(*this))) {
    if (!s.tensor->defined()) continue;
    const std::string& name = s.name;
    const at::Tensor& t = *s.tensor;
    // A 4-bit weight counts its logical elements, as transformers' num_parameters does.
    int64_t k = s.is_4bit() ? s.linear->quant->numel() : t.numel();
    n.total += k;
    if (t.requires_grad()) n.trainable += k;
    if (name == "model.embed_tokens.weight")
      n.embedding += k;
    else if (name == "lm_head.weight")
      n.lm_head += k;
    else if (name.find("norm") != std::string::npos)
      n.norm += k;
    else if (name.find(".self_attn.") != std::string::npos)
      n.attention += k;
    else if (name.find(".mlp.") != std::string::npos)
      n.mlp += k;
  }
  for (auto& [name, t] : const_cast<Model*>(this)->adapter_parameters()) {
    n.adapter += t->numel();
    n.total += t->numel();
    n.trainable += t->numel();
  }
  return n;
}

KVCache Model::new_cache(int64_t batch, int64_t capacity) const {
  KVCache cache;
  cache.capacity = capacity;
  auto opts = embed.options().requires_grad(false);
  for (size_t l = 0; l < layers.size(); l++) {
    cache.k.push_back(at::empty({batch, config.num_kv_heads, capacity, config.head_dim}, opts));
    cache.v.push_back(at::empty({batch, config.num_kv_heads, capacity, config.head_dim}, opts));
  }
  return cache;
}

at::ScalarType Model::dtype() const {
  return embed.scalar_type();
}
c10::Device Model::device() const {
  return embed.device();
}

void Model::to(c10::Device device, at::ScalarType dtype) {
  for (const ParamSlot& s : model_slots(*this)) {
    at::Tensor* t = s.tensor;
    if (!t->defined()) continue;
    bool grad = t->requires_grad();
    if (s.is_4bit()) s.linear->quant->to(device);  // 4-bit codes move but keep their dtype (uint8)
    at::Tensor moved = s.is_4bit() ? t->to(device) : t->to(device, dtype);
    *t = moved.is_same(*t) ? *t : moved.detach().requires_grad_(grad);
  }
  for (auto& [name, t] : adapter_parameters()) {
    bool grad = t->requires_grad();
    at::Tensor moved = t->to(device);
    *t = moved.is_same(*t) ? *t : moved.detach().requires_grad_(grad);
  }
}

std::vector<std::pair<std::string, std::vector<int64_t>>> model_expected_tensors(const ModelConfig& c) {
  Model blank;
  blank.config = c;
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (ParamSlot& s : model_slots(blank)) out.emplace_back(std::move(s.name), std::move(s.shape));
  return out;
}

}  // namespace luatune
