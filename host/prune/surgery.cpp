// Structured surgery: check everything first, then fold soft mask values into the weights they
// multiply (following StructureMasks in transformer.h term by term), then slice. Folding rules,
// for a branch output r = hidden_scale * layer_scale (C):
//   Llama-style: o_proj and down_proj rows (and biases, and LoRA B rows) *= r;
//   Gemma 2: the post-attention / post-feedforward norms carry it: (1 + w') = (1 + w) * r;
//   every other norm: w' = w * hidden_scale (Gemma 2: (1 + w') = (1 + w) * hidden_scale);
//   untied embedding columns *= hidden_scale (a tied one would scale the LM head too, so the masked
//   forward leaves a tied embedding unmasked and so does this);
//   head_scale: o_proj input columns of the head (and LoRA A columns);
//   intermediate_scale: up_proj rows (bias, LoRA B rows).
#include "host/prune/surgery.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "host/adapt/lora.h"
#include "host/adapt/qlora.h"
#include "host/core/error.h"

namespace luatune {

ModelShape model_shape(const ModelConfig& c) {
  ModelShape s;
  s.layers = c.num_layers;
  s.heads = c.num_heads;
  s.kv_heads = c.num_kv_heads;
  s.head_dim = c.head_dim;
  s.hidden = c.hidden_size;
  s.intermediate = c.intermediate_size;
  return s;
}

std::string shape_string(const ModelShape& s) {
  std::ostringstream o;
  o << "layers " << s.layers << ", heads " << s.heads << " (kv " << s.kv_heads << "), head_dim " << s.head_dim
    << ", hidden " << s.hidden << ", intermediate " << s.intermediate;
  return o.str();
}

namespace {

void check_list(const std::vector<int64_t>& v, int64_t n, const std::string& what) {
  LT_CHECK(!v.empty(), "prune: " << what << " keeps nothing; at least one must stay");
  for (size_t i = 0; i < v.size(); i++) {
    LT_CHECK(v[i] >= 0 && v[i] < n, "prune: " << what << " number " << v[i] << " outside [0, " << n << ")");
    LT_CHECK(i == 0 || v[i] > v[i - 1],
             "prune: " << what << " must be strictly ascending (" << v[i - 1] << " then " << v[i] << ")");
  }
}

std::vector<int64_t> all_of(int64_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

void check_scale(const at::Tensor& t, std::vector<int64_t> shape, const char* what) {
  if (!t.defined()) return;
  LT_CHECK(t.sizes().vec() == shape,
           "prune: " << what << " must have shape " << c10::IntArrayRef(shape) << ", got " << t.sizes());
}

// Kept query heads of one layer -> (kept KV groups, heads per kept group), enforcing the GQA rule.
std::pair<std::vector<int64_t>, int64_t> head_groups(const std::vector<int64_t>& heads, int64_t H, int64_t KV,
                                                     int64_t layer) {
  const int64_t g = H / KV;
  std::vector<int64_t> per(KV, 0);
  for (int64_t h : heads) per[h / g]++;
  std::vector<int64_t> groups;
  int64_t count = -1;
  for (int64_t k = 0; k < KV; k++) {
    if (per[k] == 0) continue;
    if (count >= 0 && per[k] != count)
      fail("prune: layer " + std::to_string(layer) + " keeps " + std::to_string(per[k]) +
           " query heads in KV group " + std::to_string(k) + " and " + std::to_string(count) + " in group " +
           std::to_string(groups.front()) +
           "; every kept group must keep the same number (docs/pruning.md, grouped-query attention)");
    count = per[k];
    groups.push_back(k);
  }
  return {groups, count};
}

struct Plan {
  std::vector<int64_t> layers, hidden;
  std::vector<std::vector<int64_t>> heads, groups, intermediate;  // per original layer
  int64_t per_group = 0, kv = 0, inter = 0;
};

Plan make_plan(const Model& model, const PruneSpec& spec) {
  const ModelConfig& c = model.config;
  const int64_t L = c.num_layers, H = c.num_heads, KV = c.num_kv_heads, C = c.hidden_size,
                I = c.intermediate_size;
  Plan p;
  p.layers = spec.layers.empty() ? all_of(L) : spec.layers;
  check_list(p.layers, L, "layers");
  p.hidden = spec.hidden.empty() ? all_of(C) : spec.hidden;
  check_list(p.hidden, C, "hidden channels");
  LT_CHECK(spec.heads.empty() || static_cast<int64_t>(spec.heads.size()) == L,
           "prune: heads must list the kept heads of every one of the " << L << " layers, got "
                                                                        << spec.heads.size());
  LT_CHECK(spec.intermediate.empty() || static_cast<int64_t>(spec.intermediate.size()) == L,
           "prune: intermediate must list the kept channels of every one of the "
               << L << " layers, got " << spec.intermediate.size());
  p.heads.resize(L);
  p.groups.resize(L);
  p.intermediate.resize(L);
  int64_t first = -1;
  for (int64_t l : p.layers) {
    std::vector<int64_t> heads = spec.heads.empty() || spec.heads[l].empty() ? all_of(H) : spec.heads[l];
    check_list(heads, H, "layer " + std::to_string(l) + " heads");
    auto [groups, count] = head_groups(heads, H, KV, l);
    std::vector<int64_t> inter =
        spec.intermediate.empty() || spec.intermediate[l].empty() ? all_of(I) : spec.intermediate[l];
    check_list(inter, I, "layer " + std::to_string(l) + " intermediate channels");
    if (first < 0) {
      first = l;
      p.per_group = count;
      p.kv = static_cast<int64_t>(groups.size());
      p.inter = static_cast<int64_t>(inter.size());
    } else {
      LT_CHECK(count == p.per_group && static_cast<int64_t>(groups.size()) == p.kv,
               "prune: layer " << l << " keeps " << groups.size() << " KV groups of " << count
                               << " query heads, layer " << first << " keeps " << p.kv << " of "
                               << p.per_group << "; every layer must keep the same shape");
      LT_CHECK(static_cast<int64_t>(inter.size()) == p.inter,
               "prune: layer " << l << " keeps " << inter.size() << " intermediate channels, layer " << first
                               << " keeps " << p.inter << "; every layer must keep the same number");
    }
    p.heads[l] = heads;
    p.groups[l] = groups;
    p.intermediate[l] = inter;
  }
  check_scale(spec.layer_scale, {L}, "layer_scale");
  check_scale(spec.head_scale, {L, H}, "head_scale");
  check_scale(spec.intermediate_scale, {L, I}, "intermediate_scale");
  check_scale(spec.hidden_scale, {C}, "hidden_scale");
  return p;
}

LoraAdapter* lora_of(const Linear& lin, const std::string& name) {
  if (!lin.adapter) return nullptr;
  auto* a = dynamic_cast<LoraAdapter*>(lin.adapter.get());
  LT_CHECK(a != nullptr, "prune: " << name << " has an adapter that cannot be pruned; merge it first");
  LT_CHECK(!a->dora, "prune: " << name
                               << " has a DoRA adapter, whose magnitude normalisation slicing would change; "
                                  "merge it first (lora.merge)");
  return a;
}

// Replaces t by v, keeping t's requires_grad (a fresh leaf).
void assign(at::Tensor& t, const at::Tensor& v) {
  bool grad = t.requires_grad();
  t = v.contiguous().detach().requires_grad_(grad);
}

// In float32, then back to t's dtype.
void scale_rows(at::Tensor& t, const at::Tensor& s) {  // t (out, ...) *= s (out)
  if (!t.defined() || !s.defined()) return;
  at::Tensor f = t.to(at::kFloat);
  at::Tensor sf = s.to(f.device(), at::kFloat);
  if (f.dim() == 2) sf = sf.unsqueeze(1);
  assign(t, (f * sf).to(t.scalar_type()));
}
void scale_cols(at::Tensor& t, const at::Tensor& s) {  // t (out, in) *= s (in)
  if (!t.defined() || !s.defined()) return;
  at::Tensor f = t.to(at::kFloat);
  assign(t, (f * s.to(f.device(), at::kFloat).unsqueeze(0)).to(t.scalar_type()));
}
void scale_norm(at::Tensor& w, const at::Tensor& s, bool gemma) {  // the norm's effective weight *= s
  if (!w.defined() || !s.defined()) return;
  at::Tensor f = w.to(at::kFloat), sf = s.to(f.device(), at::kFloat);
  assign(w, (gemma ? (1.0 + f) * sf - 1.0 : f * sf).to(w.scalar_type()));
}
// A Linear's output dims scaled: weight rows, bias, LoRA B rows.
void scale_out(Linear& lin, const at::Tensor& s, const std::string& name) {
  if (!s.defined()) return;
  scale_rows(lin.weight, s);
  scale_rows(lin.bias, s);
  if (LoraAdapter* a = lora_of(lin, name)) scale_rows(a->lora_B, s);
}
// A Linear's input dims scaled: weight columns, LoRA A columns.
void scale_in(Linear& lin, const at::Tensor& s, const std::string& name) {
  if (!s.defined()) return;
  scale_cols(lin.weight, s);
  if (LoraAdapter* a = lora_of(lin, name)) scale_cols(a->lora_A, s);
}

at::Tensor index_tensor(const std::vector<int64_t>& v, const at::Tensor& like) {
  return at::tensor(v, at::TensorOptions(at::kLong)).to(like.device());
}
void take(at::Tensor& t, int64_t dim, const std::vector<int64_t>& keep) {
  if (!t.defined() || static_cast<int64_t>(keep.size()) == t.size(dim)) return;
  assign(t, t.index_select(dim, index_tensor(keep, t)));
}
void slice_out(Linear& lin, const std::vector<int64_t>& keep, const std::string& name) {
  take(lin.weight, 0, keep);
  take(lin.bias, 0, keep);
  if (LoraAdapter* a = lora_of(lin, name)) take(a->lora_B, 0, keep);
}
void slice_in(Linear& lin, const std::vector<int64_t>& keep, const std::string& name) {
  take(lin.weight, 1, keep);
  if (LoraAdapter* a = lora_of(lin, name)) take(a->lora_A, 1, keep);
}

// Rows of heads `heads` (each head_dim rows) in a (n * D, ...) projection.
std::vector<int64_t> head_rows(const std::vector<int64_t>& heads, int64_t D) {
  std::vector<int64_t> rows;
  for (int64_t h : heads)
    for (int64_t d = 0; d < D; d++) rows.push_back(h * D + d);
  return rows;
}

}  // namespace

void prune_check(const Model& model, const PruneSpec& spec) {
  qlora_require_dense(model, "prune");
  make_plan(model, spec);
  Model& m = const_cast<Model&>(model);
  for (const ParamSlot& s : model_slots(m))
    if (s.linear) lora_of(*s.linear, s.name);
}

ModelShape prune_apply(Model& model, const PruneSpec& spec) {
  prune_check(model, spec);
  Plan p = make_plan(model, spec);
  at::NoGradGuard no_grad;
  ModelConfig& c = model.config;
  const int64_t H = c.num_heads, KV = c.num_kv_heads, D = c.head_dim, C = c.hidden_size;
  const bool gemma = c.gemma_norms;
  const at::Tensor& hz = spec.hidden_scale;
  auto lname = [](int64_t l, const char* what) { return "model.layers." + std::to_string(l) + "." + what; };

  // 1. Fold the soft values (every layer that stays).
  for (int64_t l : p.layers) {
    LayerWeights& L = model.layers[l];
    at::Tensor r = hz.defined() ? hz.to(at::kFloat) : at::Tensor();
    if (spec.layer_scale.defined()) {
      at::Tensor lz = spec.layer_scale[l].to(at::kFloat);
      r = r.defined() ? r * lz : lz.expand({C});
    }
    if (spec.head_scale.defined())
      scale_in(L.o, spec.head_scale[l].to(at::kFloat).repeat_interleave(D), lname(l, "self_attn.o_proj"));
    if (spec.intermediate_scale.defined())
      scale_out(L.up, spec.intermediate_scale[l], lname(l, "mlp.up_proj"));
    if (gemma) {
      scale_norm(L.post_attn_norm, r, true);
      scale_norm(L.post_ff_norm, r, true);
      scale_norm(L.input_norm, hz, true);
      scale_norm(L.pre_ff_norm, hz, true);
    } else {
      scale_out(L.o, r, lname(l, "self_attn.o_proj"));
      scale_out(L.down, r, lname(l, "mlp.down_proj"));
      scale_norm(L.input_norm, hz, false);
      scale_norm(L.post_attn_norm, hz, false);
    }
  }
  scale_norm(model.norm, hz, gemma);
  if (!c.tie_word_embeddings) scale_cols(model.embed, hz);

  // 2. Slice.
  for (int64_t l : p.layers) {
    LayerWeights& L = model.layers[l];
    const std::vector<int64_t>& heads = p.heads[l];
    if (static_cast<int64_t>(heads.size()) != H) {
      std::vector<int64_t> q_rows = head_rows(heads, D), kv_rows = head_rows(p.groups[l], D);
      slice_out(L.q, q_rows, lname(l, "self_attn.q_proj"));
      slice_out(L.k, kv_rows, lname(l, "self_attn.k_proj"));
      slice_out(L.v, kv_rows, lname(l, "self_attn.v_proj"));
      slice_in(L.o, q_rows, lname(l, "self_attn.o_proj"));
    }
    const std::vector<int64_t>& inter = p.intermediate[l];
    slice_out(L.gate, inter, lname(l, "mlp.gate_proj"));
    slice_out(L.up, inter, lname(l, "mlp.up_proj"));
    slice_in(L.down, inter, lname(l, "mlp.down_proj"));
    if (static_cast<int64_t>(p.hidden.size()) != C) {
      for (at::Tensor* n : {&L.input_norm, &L.post_attn_norm, &L.pre_ff_norm, &L.post_ff_norm})
        take(*n, 0, p.hidden);
      slice_in(L.q, p.hidden, lname(l, "self_attn.q_proj"));
      slice_in(L.k, p.hidden, lname(l, "self_attn.k_proj"));
      slice_in(L.v, p.hidden, lname(l, "self_attn.v_proj"));
      slice_out(L.o, p.hidden, lname(l, "self_attn.o_proj"));
      slice_in(L.gate, p.hidden, lname(l, "mlp.gate_proj"));
      slice_in(L.up, p.hidden, lname(l, "mlp.up_proj"));
      slice_out(L.down, p.hidden, lname(l, "mlp.down_proj"));
    }
  }
  take(model.norm, 0, p.hidden);
  take(model.embed, 1, p.hidden);
  take(model.lm_head, 1, p.hidden);

  // 3. Drop layers and rewrite the config.
  std::vector<LayerWeights> kept;
  std::vector<bool> sliding;
  for (int64_t l : p.layers) {
    kept.push_back(std::move(model.layers[l]));
    sliding.push_back(c.layer_sliding[l]);
  }
  model.layers = std::move(kept);
  c.layer_sliding = sliding;
  c.num_layers = static_cast<int64_t>(p.layers.size());
  c.num_kv_heads = p.kv;
  c.num_heads = p.kv * p.per_group;
  c.hidden_size = static_cast<int64_t>(p.hidden.size());
  c.intermediate_size = p.inter;
  if (c.head_dim * c.num_heads != c.hidden_size) c.head_dim_explicit = true;
  if (c.max_window_layers > c.num_layers) c.max_window_layers = c.num_layers;
  (void)KV;
  return model_shape(c);
}

// ---------------------------------------------------------------------------------------------

namespace {

double check_sparsity(double s, const char* kind) {
  LT_CHECK(std::isfinite(s) && s >= 0 && s < 1,
           "prune: target " << kind << " sparsity " << s << " outside [0, 1)");
  return s;
}

int64_t round_width(int64_t n, double s, int64_t round_to) {
  double want = static_cast<double>(n) * (1.0 - s);
  int64_t k;
  if (round_to > 1 && n >= 8 * round_to)
    k = static_cast<int64_t>(std::llround(want / static_cast<double>(round_to))) * round_to;
  else
    k = static_cast<int64_t>(std::llround(want));
  return std::clamp<int64_t>(k, 1, n);
}

}  // namespace

TargetShape prune_targets(const ModelConfig& c, const TargetSparsity& t) {
  check_sparsity(t.layers, "layer");
  check_sparsity(t.heads, "head");
  check_sparsity(t.hidden, "hidden");
  check_sparsity(t.intermediate, "intermediate");
  LT_CHECK(t.round_to >= 1, "prune: round_to must be at least 1, got " << t.round_to);
  TargetShape out;
  ModelShape& s = out.shape;
  s = model_shape(c);
  s.layers = std::clamp<int64_t>(std::llround(static_cast<double>(c.num_layers) * (1.0 - t.layers)), 1,
                                 c.num_layers);
  s.hidden = round_width(c.hidden_size, t.hidden, t.round_to);
  s.intermediate = round_width(c.intermediate_size, t.intermediate, t.round_to);
  const int64_t g = c.num_heads / c.num_kv_heads;
  if (t.heads > 0) {
    int64_t per_group = std::llround(static_cast<double>(g) * (1.0 - t.heads));
    if (g > 1 && per_group >= 1) {
      s.heads = c.num_kv_heads * std::min(per_group, g);
    } else {
      out.whole_groups = true;
      s.kv_heads = std::clamp<int64_t>(std::llround(static_cast<double>(c.num_kv_heads) * (1.0 - t.heads)), 1,
                                       c.num_kv_heads);
      s.heads = s.kv_heads * g;
    }
  }
  return out;
}

TargetShape prune_targets_counts(const ModelConfig& c, const ModelShape& want) {
  const ModelShape src = model_shape(c);
  TargetShape out;
  ModelShape& s = out.shape;
  s = src;
  auto pick = [](int64_t w, int64_t n, const char* what) {
    if (w == 0) return n;
    LT_CHECK(w >= 1 && w <= n,
             "prune: target " << what << " " << w << " outside [1, " << n << "] (the model has " << n << ")");
    return w;
  };
  s.layers = pick(want.layers, src.layers, "layers");
  s.hidden = pick(want.hidden, src.hidden, "hidden size");
  s.intermediate = pick(want.intermediate, src.intermediate, "intermediate size");
  LT_CHECK(want.head_dim == 0 || want.head_dim == src.head_dim,
           "prune: head_dim cannot change (RoPE); the model has " << src.head_dim << ", the target says "
                                                                  << want.head_dim);
  const int64_t g = src.heads / src.kv_heads;
  int64_t kv = pick(want.kv_heads, src.kv_heads, "key/value heads");
  int64_t heads = pick(want.heads, src.heads, "attention heads");
  if (kv == src.kv_heads && heads % kv == 0 && heads / kv <= g) {
    s.kv_heads = kv;
    s.heads = heads;
  } else if (heads == kv * g) {
    out.whole_groups = true;
    s.kv_heads = kv;
    s.heads = heads;
  } else {
    fail("prune: " + std::to_string(heads) + " attention heads with " + std::to_string(kv) +
         " key/value heads is not reachable from " + std::to_string(src.heads) + " heads in " +
         std::to_string(src.kv_heads) +
         " groups: keep every group with the same number of heads (a multiple of " +
         std::to_string(src.kv_heads) + "), or whole groups (" + std::to_string(g) +
         " heads per kept group)");
  }
  return out;
}

namespace {

void need(const at::Tensor& t, std::vector<int64_t> shape, const char* what) {
  LT_CHECK(t.defined(), "prune: " << what << " scores are needed to prune " << what);
  LT_CHECK(t.sizes().vec() == shape, "prune: " << what << " scores must have shape "
                                               << c10::IntArrayRef(shape) << ", got " << t.sizes());
}

}  // namespace

std::vector<int64_t> prune_top_k(const at::Tensor& scores, int64_t k) {
  at::Tensor s = scores.detach().to(at::kCPU, at::kDouble).contiguous();
  const double* v = s.data_ptr<double>();
  const int64_t n = s.numel();
  std::vector<int64_t> idx = all_of(n);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
    double x = std::isnan(v[a]) ? -INFINITY : v[a], y = std::isnan(v[b]) ? -INFINITY : v[b];
    return x > y;
  });
  idx.resize(std::min(k, n));
  std::sort(idx.begin(), idx.end());
  return idx;
}

PruneSpec prune_select(const ModelConfig& c, const StructureScores& sc, const TargetShape& target) {
  const ModelShape& t = target.shape;
  const int64_t L = c.num_layers, H = c.num_heads, KV = c.num_kv_heads, C = c.hidden_size,
                I = c.intermediate_size;
  PruneSpec spec;
  if (t.layers < L) {
    need(sc.layer, {L}, "layer");
    spec.layers = prune_top_k(sc.layer, t.layers);
  }
  if (t.hidden < C) {
    need(sc.hidden, {C}, "hidden");
    spec.hidden = prune_top_k(sc.hidden, t.hidden);
  }
  if (t.intermediate < I) {
    need(sc.intermediate, {L, I}, "intermediate");
    for (int64_t l = 0; l < L; l++)
      spec.intermediate.push_back(prune_top_k(sc.intermediate[l], t.intermediate));
  }
  if (t.heads < H) {
    need(sc.head, {L, H}, "head");
    const int64_t g = H / KV;
    for (int64_t l = 0; l < L; l++) {
      std::vector<int64_t> heads;
      if (target.whole_groups) {
        at::Tensor group_scores = sc.head[l].to(at::kDouble).view({KV, g}).sum(1);
        for (int64_t k : prune_top_k(group_scores, t.kv_heads))
          for (int64_t j = 0; j < g; j++) heads.push_back(k * g + j);
      } else {
        const int64_t per = t.heads / KV;
        for (int64_t k = 0; k < KV; k++)
          for (int64_t j : prune_top_k(sc.head[l].narrow(0, k * g, g), per)) heads.push_back(k * g + j);
      }
      spec.heads.push_back(heads);
    }
  }
  return spec;
}

}  // namespace luatune
