// Unstructured and N:M sparsity (magnitude, Wanda, SparseGPT), applied layer by layer as the Wanda
// and SparseGPT reference code does: calibration inputs of layer l are what the already pruned
// layers 0..l-1 produce. Facts and defaults: docs/pruning.md, "Sources" (Wanda, SparseGPT);
// the protocol and our choices: docs/pruning.md "Unstructured and N:M sparsity".
#include "host/prune/unstructured.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <sstream>

#include "host/adapt/qlora.h"
#include "host/core/error.h"

namespace luatune {

namespace {

// ============================================================================================
// The seven linears of a decoder layer and where their inputs are observed

constexpr std::array<const char*, 7> kLinearNames = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                     "gate_proj", "up_proj", "down_proj"};

// q/k/v share the attention norm output, gate/up the MLP norm output: one statistic per site.
Site input_site(const std::string& name) {
  if (name == "q_proj" || name == "k_proj" || name == "v_proj") return Site::attn_in;
  if (name == "o_proj") return Site::attn_ctx;
  if (name == "gate_proj" || name == "up_proj") return Site::mlp_in;
  return Site::mlp_act;
}

template <class Layer>
auto& layer_linear(Layer& L, const std::string& name) {
  if (name == "q_proj") return L.q;
  if (name == "k_proj") return L.k;
  if (name == "v_proj") return L.v;
  if (name == "o_proj") return L.o;
  if (name == "gate_proj") return L.gate;
  if (name == "up_proj") return L.up;
  return L.down;
}

std::string weight_name(int64_t layer, const std::string& name) {
  bool attn = name == "q_proj" || name == "k_proj" || name == "v_proj" || name == "o_proj";
  return "model.layers." + std::to_string(layer) + (attn ? ".self_attn." : ".mlp.") + name + ".weight";
}

std::vector<std::string> target_names(const SparsityOptions& o) {
  if (o.targets.empty()) return {kLinearNames.begin(), kLinearNames.end()};
  return o.targets;
}

std::string pattern_str(const SparsityOptions& o) {
  return std::to_string(o.n) + ":" + std::to_string(o.m);
}

bool nm(const SparsityOptions& o) {
  return o.n != 0 || o.m != 0;
}

// How many of `count` weights a sparsity zeroes: the reference's int(count * sparsity), with a
// little slack so 0.29 * 100 gives 29 and not 28.
int64_t prune_count(int64_t count, double sparsity) {
  return static_cast<int64_t>(std::floor(static_cast<double>(count) * sparsity + 1e-9));
}

LinearSparsity count_zeros(const std::string& name, const at::Tensor& w) {
  LinearSparsity s;
  s.name = name;
  s.total = w.numel();
  s.zeros = w.eq(0).sum().item<int64_t>();
  return s;
}

// ============================================================================================
// Masks: true where a weight is zeroed

// n:m: the n lowest scores of every m consecutive inputs in each row. score (out, in), in % m == 0.
at::Tensor mask_nm(const at::Tensor& score, int64_t n, int64_t m) {
  const int64_t out = score.size(0), in = score.size(1);
  at::Tensor groups = score.reshape({out, in / m, m});
  at::Tensor idx = std::get<1>(groups.topk(n, 2, /*largest=*/false, /*sorted=*/false));
  return at::zeros_like(groups, groups.options().dtype(at::kBool)).scatter_(2, idx, true).reshape({out, in});
}

// The k lowest scores of each row (k = floor(in * sparsity)); stable, so ties go to the lower input.
at::Tensor mask_per_row(const at::Tensor& score, double sparsity) {
  at::Tensor mask = at::zeros_like(score, score.options().dtype(at::kBool));
  int64_t k = prune_count(score.size(1), sparsity);
  if (k == 0) return mask;
  at::Tensor idx = std::get<1>(at::sort(score, c10::optional<bool>(true), 1)).narrow(1, 0, k);
  return mask.scatter_(1, idx, true);
}

// The k lowest scores of the whole tensor (k = floor(numel * sparsity)).
at::Tensor mask_whole(const at::Tensor& score, double sparsity) {
  at::Tensor mask = at::zeros({score.numel()}, score.options().dtype(at::kBool));
  int64_t k = prune_count(score.numel(), sparsity);
  if (k > 0) {
    at::Tensor idx = std::get<1>(at::sort(score.flatten(), c10::optional<bool>(true), 0)).narrow(0, 0, k);
    mask.index_fill_(0, idx, true);
  }
  return mask.view(score.sizes());
}

void check_weight(const at::Tensor& w, const char* what) {
  LT_CHECK(w.defined() && w.dim() == 2, what << ": weight must be (out, in)");
}

}  // namespace

// ============================================================================================
// One weight

void prune_weight_magnitude(at::Tensor& weight, const SparsityOptions& o) {
  at::NoGradGuard no_grad;
  check_weight(weight, "prune_weight_magnitude");
  at::Tensor score = weight.abs();
  at::Tensor mask = nm(o) ? mask_nm(score, o.n, o.m) : mask_whole(score, o.sparsity);
  weight.masked_fill_(mask, 0);
}

void prune_weight_wanda(at::Tensor& weight, const at::Tensor& sum_sq, const SparsityOptions& o) {
  at::NoGradGuard no_grad;
  check_weight(weight, "prune_weight_wanda");
  LT_CHECK(sum_sq.dim() == 1 && sum_sq.size(0) == weight.size(1),
           "prune_weight_wanda: sum_sq must be (" << weight.size(1) << "), got " << sum_sq.sizes());
  // (out, in): |W| times the input channel's activation norm.
  at::Tensor score = weight.to(at::kFloat).abs() * sum_sq.to(weight.device(), at::kFloat).sqrt().unsqueeze(0);
  at::Tensor mask = nm(o) ? mask_nm(score, o.n, o.m) : mask_per_row(score, o.sparsity);
  weight.masked_fill_(mask, 0);
}

void prune_weight_sparsegpt(at::Tensor& weight, const at::Tensor& hessian, const SparsityOptions& o) {
  at::NoGradGuard no_grad;
  check_weight(weight, "prune_weight_sparsegpt");
  const int64_t cols = weight.size(1);
  LT_CHECK(
      hessian.dim() == 2 && hessian.size(0) == cols && hessian.size(1) == cols,
      "prune_weight_sparsegpt: hessian must be (" << cols << ", " << cols << "), got " << hessian.sizes());
  const bool is_nm = nm(o);
  LT_CHECK(o.blocksize >= 1 && (!is_nm || o.blocksize % o.m == 0),
           "prune_weight_sparsegpt: blocksize " << o.blocksize << " must be a positive multiple of m");
  at::Tensor W = weight.to(at::kFloat).clone();                    // (rows, cols)
  at::Tensor H = hessian.to(weight.device(), at::kFloat).clone();  // (cols, cols)

  // Inputs never seen (diag 0) carry no information: zero their weights, keep H invertible.
  at::Tensor dead = H.diagonal().eq(0);
  H.diagonal().masked_fill_(dead, 1);
  W.masked_fill_(dead.unsqueeze(0), 0);
  double damp = o.dampening * H.diagonal().mean().item<double>();
  H.diagonal().add_(damp);

  // Hinv: the upper Cholesky factor of H^-1 (its rows give the OBS updates in sweep order).
  auto [L, info] = at::linalg_cholesky_ex(H);
  LT_CHECK(info.item<int64_t>() == 0,
           "prune.unstructured: sparsegpt: the Hessian is not positive definite even "
           "after dampening "
               << o.dampening << "; raise dampening");
  at::Tensor Hinv = at::cholesky_inverse(L);
  std::tie(L, info) = at::linalg_cholesky_ex(Hinv, /*upper=*/true);
  LT_CHECK(info.item<int64_t>() == 0,
           "prune.unstructured: sparsegpt: the inverse Hessian is not positive "
           "definite; raise dampening (now "
               << o.dampening << ")");
  Hinv = L;  // upper

  for (int64_t i1 = 0; i1 < cols; i1 += o.blocksize) {
    const int64_t i2 = std::min(i1 + o.blocksize, cols), count = i2 - i1;
    at::Tensor W1 = W.narrow(1, i1, count).clone();  // (rows, count), updated column by column
    at::Tensor Q1 = at::zeros_like(W1);              // the pruned, final columns
    at::Tensor Err1 = at::zeros_like(W1);            // scaled errors, for the lazy update
    at::Tensor Hinv1 = Hinv.narrow(0, i1, count).narrow(1, i1, count);
    at::Tensor d1 = Hinv1.diagonal();  // (count)
    std::vector<float> d1_host(count);
    {
      at::Tensor dc = d1.to(at::kCPU).contiguous();
      std::copy(dc.data_ptr<float>(), dc.data_ptr<float>() + count, d1_host.begin());
    }
    // Adaptive mask: the lowest W^2 / Hinv_ii^2 over the whole rows x block (not per row).
    at::Tensor mask1 = is_nm ? at::zeros_like(W1, W1.options().dtype(at::kBool))
                             : mask_whole(W1.square() / d1.square().unsqueeze(0), o.sparsity);
    for (int64_t i = 0; i < count; i++) {
      if (is_nm && i % o.m == 0) {
        at::Tensor score = W1.narrow(1, i, o.m).square() / d1.narrow(0, i, o.m).square().unsqueeze(0);
        mask1.narrow(1, i, o.m).copy_(mask_nm(score, o.n, o.m));
      }
      at::Tensor w = W1.select(1, i);
      at::Tensor q = w.masked_fill(mask1.select(1, i), 0);
      Q1.select(1, i).copy_(q);
      at::Tensor err = (w - q) / d1_host[i];  // (rows)
      // OBS: the remaining columns of the block absorb the error of zeroing column i.
      W1.narrow(1, i, count - i).addr_(err, Hinv1[i].narrow(0, i, count - i), 1, -1);
      Err1.select(1, i).copy_(err);
    }
    W.narrow(1, i1, count).copy_(Q1);
    if (i2 < cols)
      W.narrow(1, i2, cols - i2).addmm_(Err1, Hinv.narrow(0, i1, count).narrow(1, i2, cols - i2), 1, -1);
  }
  weight.copy_(W.to(weight.scalar_type()));
}

// ============================================================================================
// Checks

void sparsity_check(const Model& model, const SparsityOptions& o, bool have_calibration) {
  const char* p = "prune.unstructured: ";
  qlora_require_dense(model, "prune.unstructured");
  LT_CHECK(o.method == "magnitude" || o.method == "wanda" || o.method == "sparsegpt",
           p << "unknown method \"" << o.method << "\" (magnitude, wanda, sparsegpt)");
  if (nm(o)) {
    LT_CHECK(o.m > 0 && o.n > 0 && o.n < o.m,
             p << "pattern " << pattern_str(o) << " needs 0 < n < m (2:4, 4:8)");
  } else {
    LT_CHECK(o.sparsity >= 0 && o.sparsity < 1, p << "sparsity " << o.sparsity << " outside [0, 1)");
  }
  if (o.method == "sparsegpt") {
    LT_CHECK(o.blocksize >= 1, p << "blocksize " << o.blocksize << " must be at least 1");
    LT_CHECK(!nm(o) || o.blocksize % o.m == 0, p << "blocksize " << o.blocksize
                                                 << " must be a multiple of m (" << o.m << ") for pattern "
                                                 << pattern_str(o));
    LT_CHECK(o.dampening >= 0, p << "dampening " << o.dampening << " must be >= 0");
  }
  for (const std::string& t : o.targets) {
    LT_CHECK(std::find(kLinearNames.begin(), kLinearNames.end(), t) != kLinearNames.end(),
             p << "unknown target \"" << t
               << "\" (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)");
  }
  LT_CHECK(o.method == "magnitude" || have_calibration,
           p << "method " << o.method << " needs calibration batches (only magnitude works without)");
  std::vector<std::string> targets = target_names(o);
  for (size_t l = 0; l < model.layers.size(); l++) {
    for (const std::string& t : targets) {
      const Linear& lin = layer_linear(model.layers[l], t);
      std::string name = weight_name(static_cast<int64_t>(l), t);
      LT_CHECK(!lin.adapter, p << name << " has an adapter; merge the adapters first (lora.merge)");
      LT_CHECK(lin.weight.defined() && lin.weight.dim() == 2 && lin.weight.is_floating_point(),
               p << name << " has no floating-point weight to prune");
      LT_CHECK(!nm(o) || lin.weight.size(1) % o.m == 0, p << "pattern " << pattern_str(o)
                                                          << " needs input widths divisible by " << o.m
                                                          << "; " << name << " has " << lin.weight.size(1));
    }
  }
}

// ============================================================================================
// Layer by layer

std::vector<LinearSparsity> prune_unstructured(Model& model, const std::vector<Batch>& calibration,
                                               const SparsityOptions& o) {
  sparsity_check(model, o, !calibration.empty());
  at::NoGradGuard no_grad;
  const std::vector<std::string> targets = target_names(o);
  const int64_t n_layers = static_cast<int64_t>(model.layers.size());
  std::vector<LinearSparsity> report;

  if (o.method == "magnitude") {  // no data: every weight on its own
    for (int64_t l = 0; l < n_layers; l++) {
      for (const std::string& t : targets) {
        at::Tensor& w = layer_linear(model.layers[l], t).weight;
        prune_weight_magnitude(w, o);
        report.push_back(count_zeros(weight_name(l, t), w));
      }
    }
    return report;
  }

  // Layer 0's inputs: the embeddings of every calibration batch, kept on the model's device with
  // each batch's positions and segments (packed rows keep their documents apart).
  const c10::Device device = model.device();
  std::vector<at::Tensor> hs;  // (B, T, C) per batch: the residual stream entering layer l
  std::vector<ForwardOptions> fos(calibration.size());
  for (size_t b = 0; b < calibration.size(); b++) {
    const Batch& batch = calibration[b];
    LT_CHECK(batch.ids.defined() && batch.ids.dim() == 2,
             "prune.unstructured: calibration batch " << b + 1 << " has no (rows, length) ids");
    if (batch.positions.defined()) fos[b].positions = batch.positions.to(device, at::kLong);
    if (batch.segments.defined()) fos[b].segments = batch.segments.to(device, at::kLong);
    hs.push_back(model.embed_input(batch.ids, fos[b]));
  }

  const bool wanda = o.method == "wanda";
  std::map<Site, bool> needed;
  for (const std::string& t : targets) needed[input_site(t)] = true;

  for (int64_t l = 0; l < n_layers; l++) {
    // Statistics of layer l's linear inputs over every calibration token (padding included: the
    // batches are the caller's, see docs/pruning.md). Wanda: sum of x^2 per input channel (in);
    // SparseGPT: sum of x x^T (in, in), both float32; rows counts sequences for H's 2/n scale.
    std::map<Site, at::Tensor> stats;
    int64_t rows = 0;
    for (size_t b = 0; b < calibration.size(); b++) {
      ForwardOptions fo = fos[b];
      fo.observe = [&](int64_t layer, Site site, const at::Tensor& x) {
        if (layer != l || !needed.count(site)) return;
        at::Tensor X = x.reshape({-1, x.size(-1)}).to(at::kFloat);  // (tokens, in)
        at::Tensor& s = stats[site];
        if (wanda) {
          at::Tensor add = X.square().sum(0);
          s = s.defined() ? s.add_(add) : add;
        } else {
          if (!s.defined()) s = at::zeros({X.size(1), X.size(1)}, X.options());
          s.addmm_(X.t(), X);
        }
      };
      model.run_layers(hs[b], l, l + 1, fo);
      rows += hs[b].size(0);
    }
    for (const std::string& t : targets) {
      at::Tensor& w = layer_linear(model.layers[l], t).weight;
      const at::Tensor& s = stats.at(input_site(t));
      if (wanda) {
        prune_weight_wanda(w, s, o);
      } else {
        prune_weight_sparsegpt(w, s * (2.0 / static_cast<double>(rows)), o);  // H = 2/n X X^T
      }
      report.push_back(count_zeros(weight_name(l, t), w));
    }
    // The next layer calibrates on what this pruned layer produces.
    if (l + 1 < n_layers) {
      for (size_t b = 0; b < calibration.size(); b++) hs[b] = model.run_layers(hs[b], l, l + 1, fos[b]);
    }
  }
  return report;
}

std::vector<LinearSparsity> measure_sparsity(const Model& model) {
  qlora_require_dense(model, "prune.sparsity");
  std::vector<LinearSparsity> out;
  for (size_t l = 0; l < model.layers.size(); l++) {
    for (const char* t : kLinearNames) {
      const at::Tensor& w = layer_linear(model.layers[l], t).weight;
      if (w.defined()) out.push_back(count_zeros(weight_name(static_cast<int64_t>(l), t), w));
    }
  }
  return out;
}

}  // namespace luatune
