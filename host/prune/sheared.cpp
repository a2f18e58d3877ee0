// Sheared-LLaMA pruner: hard-concrete masks, their expected sparsity, the Lagrangian, deterministic
// masks and finalisation. The formulas are the reference implementation's (l0_module.py; where each
// comes from: docs/pruning.md "Sources") and explained in docs/pruning.md "Sheared-LLaMA".
//
// Gradient path, and why it is split in two: a training step samples z = f(log_alpha, u) once and
// the model sees detached leaf copies of z (requiring grad). The trainer may run several
// micro-batches and may recompute layers inside backward; each of those backward passes would
// otherwise run through the sampling graph again (and fail the second time, its buffers freed).
// With leaves the model's backward only accumulates dLoss/dz into leaf.grad; after_backward then
// runs z.backward(leaf.grad) once, plus the Lagrangian's backward.
#include "host/prune/sheared.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>

#include "host/adapt/lora.h"
#include "host/core/error.h"

namespace luatune {

namespace {

constexpr double kEps = 1e-6;       // u ~ U(eps, 1 - eps); P(z = 0) clamped to [eps, 1 - eps]
constexpr double kSoftScale = 0.8;  // the reference's factor in the deterministic score
const double kLogAlphaMin = std::log(0.01), kLogAlphaMax = std::log(100.0);

enum MaskKind { kLayers = 0, kHeads, kIntermediate, kHidden, kKinds };
const char* const kKindNames[kKinds] = {"layers", "heads", "intermediate", "hidden"};

int kind_index(const std::string& name) {
  for (int k = 0; k < kKinds; k++)
    if (name == kKindNames[k]) return k;
  fail("prune.sheared: unknown mask kind \"" + name + "\"; expected layers, heads, intermediate or hidden");
}

}  // namespace

// ============================================================================================
// State

struct ShearedPruner::State {
  struct Mask {
    bool active = false;
    // layers (L); heads (L, H) per query head or (L, KV) per KV group (whole_groups);
    // intermediate (L, I); hidden (C). float32 on the model's device, kept in [ln 0.01, ln 100].
    at::Tensor log_alpha;
    at::Tensor lambda1, lambda2;  // () float32, start at 0
    double target = 0;            // final target sparsity of every row: 1 - kept / entries
    int64_t keep = 0;             // entries kept per row (heads per_group mode: per KV group)
    at::Tensor z;                 // this step's sample in the model's shape, with graph to log_alpha
    at::Tensor leaf;              // z detached, requiring grad: what the model multiplies by
  };
  Mask masks[kKinds];
  int64_t group = 1;      // query heads per KV group
  int64_t step = 0;       // optimizer steps taken (the trainer's after_step, also on resume)
  StructureMasks sample;  // the leaves of the current training step
  StructureMasks eval;    // deterministic masks for evaluation
  bool eval_valid = false;
  at::Tensor lagrangian;  // () value at the last training step, detached (read with the other stats)
  int64_t lagrangian_step = 0;
};

ShearedPruner::ShearedPruner(std::shared_ptr<Model> model, ShearedOptions options)
    : model_(std::move(model)), options_(options), state_(std::make_shared<State>()) {
  LT_CHECK(model_ != nullptr, "prune.sheared: no model");
  const ShearedOptions& o = options_;
  LT_CHECK(o.warmup_steps >= 0, "prune.sheared: warmup_steps must be >= 0, got " << o.warmup_steps);
  LT_CHECK(o.mask_lr > 0, "prune.sheared: mask_lr must be positive, got " << o.mask_lr);
  LT_CHECK(o.lambda_lr > 0,
           "prune.sheared: lambda_lr must be positive (it is applied as -lambda_lr), got " << o.lambda_lr);
  LT_CHECK(o.temperature > 0, "prune.sheared: temperature must be positive, got " << o.temperature);
  LT_CHECK(o.limit_l < 0 && o.limit_r > 1,
           "prune.sheared: the stretch interval (limit_l, limit_r) must contain [0, 1], got ("
               << o.limit_l << ", " << o.limit_r << ")");
  LT_CHECK(std::isfinite(o.init_mean) && o.init_std >= 0,
           "prune.sheared: init_mean must be a number and init_std >= 0, got " << o.init_mean << ", "
                                                                               << o.init_std);
  const ModelConfig& c = model_->config;
  target_ = prune_targets(c, o.target);  // fails on a target that cannot be met
  prune_check(*model_, PruneSpec{});     // adapters surgery cannot slice (DoRA) fail here, before any work
  source_ = model_shape(c);

  State& s = *state_;
  s.group = c.num_heads / c.num_kv_heads;
  const ModelShape& t = target_.shape;
  const int64_t L = c.num_layers;
  // (shape, kept per row, entries per row) per kind; a kind that keeps everything gets no mask.
  struct Plan {
    std::vector<int64_t> shape;
    int64_t keep, row;
  };
  Plan plans[kKinds] = {
      {{L}, t.layers, L},
      target_.whole_groups ? Plan{{L, c.num_kv_heads}, t.kv_heads, c.num_kv_heads}
                           : Plan{{L, c.num_heads}, t.heads / c.num_kv_heads, s.group},
      {{L, c.intermediate_size}, t.intermediate, c.intermediate_size},
      {{c.hidden_size}, t.hidden, c.hidden_size},
  };
  // log_alpha drawn in float32 on CPU from the seed, kind by kind, then moved to the model's device.
  at::Generator gen = at::detail::createCPUGenerator(o.seed);
  const auto fopts = at::TensorOptions(at::kFloat).device(model_->device());
  bool any = false;
  for (int k = 0; k < kKinds; k++) {
    State::Mask& m = s.masks[k];
    if (plans[k].keep >= plans[k].row) continue;
    m.active = any = true;
    m.keep = plans[k].keep;
    m.target = 1.0 - static_cast<double>(plans[k].keep) / static_cast<double>(plans[k].row);
    at::Tensor la = at::normal(o.init_mean, o.init_std, plans[k].shape, gen, at::TensorOptions(at::kFloat));
    m.log_alpha = la.clamp(kLogAlphaMin, kLogAlphaMax).to(model_->device()).requires_grad_(true);
    m.lambda1 = at::zeros({}, fopts).requires_grad_(true);
    m.lambda2 = at::zeros({}, fopts).requires_grad_(true);
  }
  LT_CHECK(any, "prune.sheared: the targets keep every layer, head and channel (target "
                    << shape_string(target_.shape) << "); nothing to prune");
}

// ============================================================================================
// Queries

std::vector<std::string> ShearedPruner::kinds() const {
  std::vector<std::string> out;
  for (int k = 0; k < kKinds; k++)
    if (state_->masks[k].active) out.push_back(kKindNames[k]);
  return out;
}

int64_t ShearedPruner::steps() const {
  return state_->step;
}

double ShearedPruner::target_sparsity(const std::string& kind, int64_t step) const {
  const State::Mask& m = state_->masks[kind_index(kind)];
  if (!m.active) return 0;
  const int64_t w = options_.warmup_steps;
  double ramp =
      w > 0 ? std::min(1.0, static_cast<double>(std::max<int64_t>(step, 0)) / static_cast<double>(w)) : 1.0;
  return m.target * ramp;
}

namespace {

// P(z = 0) per entry: sigmoid(logit(-gamma / (zeta - gamma)) * beta - log_alpha), clamped.
at::Tensor prob_zero(const at::Tensor& log_alpha, const ShearedOptions& o) {
  const double x = (0.0 - o.limit_l) / (o.limit_r - o.limit_l);
  const double logit = std::log(x) - std::log(1.0 - x);
  return at::sigmoid(logit * o.temperature - log_alpha).clamp(kEps, 1.0 - kEps);
}

// Expected sparsity per row: 1 - mean(1 - P(z = 0)) over the last dimension ((L) for 2-D masks, () for 1-D).
at::Tensor expected_rows(const at::Tensor& log_alpha, const ShearedOptions& o) {
  return 1.0 - (1.0 - prob_zero(log_alpha, o)).mean(-1);
}

}  // namespace

double ShearedPruner::expected_sparsity(const std::string& kind) const {
  const State::Mask& m = state_->masks[kind_index(kind)];
  if (!m.active) return 0;
  at::NoGradGuard no_grad;
  return expected_rows(m.log_alpha, options_).mean().item<double>();
}

at::Tensor ShearedPruner::lagrangian(int64_t step) const {
  at::Tensor total;
  for (int k = 0; k < kKinds; k++) {
    const State::Mask& m = state_->masks[k];
    if (!m.active) continue;
    at::Tensor gap = expected_rows(m.log_alpha, options_) - target_sparsity(kKindNames[k], step);
    at::Tensor term = (m.lambda1 * gap + m.lambda2 * gap.pow(2)).mean();
    total = total.defined() ? total + term : term;
  }
  return total;
}

// ============================================================================================
// Masks

namespace {

// Heads masks per KV group become per query head, (L, KV) -> (L, H).
at::Tensor model_shaped(int kind, const at::Tensor& z, bool whole_groups, int64_t group) {
  return kind == kHeads && whole_groups && group > 1 ? z.repeat_interleave(group, 1) : z;
}

}  // namespace

StructureMasks ShearedPruner::sample_masks() const {
  LT_CHECK(!spent_, "prune: this Sheared pruner was finalised; make a new one");
  const ShearedOptions& o = options_;
  at::Tensor z[kKinds];
  for (int k = 0; k < kKinds; k++) {
    const State::Mask& m = state_->masks[k];
    if (!m.active) continue;
    // u from the default generator of the device, so a resumed run (which restores it) samples
    // the same masks as a straight one.
    at::Tensor u =
        at::empty(m.log_alpha.sizes(), m.log_alpha.options().requires_grad(false)).uniform_(kEps, 1.0 - kEps);
    at::Tensor s = at::sigmoid((at::log(u) - at::log(1.0 - u) + m.log_alpha) / o.temperature);
    z[k] = model_shaped(k, at::hardtanh(s * (o.limit_r - o.limit_l) + o.limit_l, 0.0, 1.0),
                        target_.whole_groups, state_->group);
  }
  return {z[kLayers], z[kHeads], z[kIntermediate], z[kHidden]};
}

namespace {

// Which entries the deterministic mask keeps, bool on CPU in log_alpha's shape: the `keep`
// highest scores per row (heads in per_group mode: per KV group of `group` entries).
at::Tensor keep_entries(const at::Tensor& score_in, int kind, int64_t keep, bool whole_groups,
                        int64_t group) {
  at::Tensor score = score_in.to(at::kCPU, at::kFloat).reshape({-1});
  at::Tensor kept = at::zeros(score.sizes(), at::kBool);
  // Chunks scored separately: a row, or a KV group's query heads.
  const int64_t chunk = kind == kHeads && !whole_groups ? group : score_in.size(-1);
  bool* out = kept.data_ptr<bool>();
  for (int64_t r0 = 0; r0 < score.numel(); r0 += chunk)
    for (int64_t i : prune_top_k(score.narrow(0, r0, chunk), keep)) out[r0 + i] = true;
  return kept.view(score_in.sizes());
}

}  // namespace

StructureMasks ShearedPruner::deterministic_masks() const {
  LT_CHECK(!spent_, "prune: this Sheared pruner was finalised; make a new one");
  at::NoGradGuard no_grad;
  at::Tensor z[kKinds];
  for (int k = 0; k < kKinds; k++) {
    const State::Mask& m = state_->masks[k];
    if (!m.active) continue;
    at::Tensor soft = at::sigmoid(m.log_alpha.detach() / options_.temperature * kSoftScale);
    at::Tensor kept = keep_entries(soft, k, m.keep, target_.whole_groups, state_->group).to(soft.device());
    z[k] = model_shaped(k, soft * kept.to(soft.scalar_type()), target_.whole_groups, state_->group);
  }
  return {z[kLayers], z[kHeads], z[kIntermediate], z[kHidden]};
}

PruneSpec ShearedPruner::final_spec() const {
  StructureMasks d = deterministic_masks();
  // Kept = non-zero: soft values are sigmoids of clamped log_alpha, never 0.
  auto kept_list = [](const at::Tensor& row) {
    at::Tensor nz = row.ne(0).nonzero().squeeze(1).to(at::kCPU).contiguous();
    return std::vector<int64_t>(nz.data_ptr<int64_t>(), nz.data_ptr<int64_t>() + nz.numel());
  };
  // A learned mask gives its kept units (per layer for the (L, n) masks) and is itself the scale.
  auto take = [&](const at::Tensor& mask, auto& kept, at::Tensor& scale) {
    if (!mask.defined()) return;
    if constexpr (std::is_same<std::decay_t<decltype(kept)>, std::vector<int64_t>>::value) {
      kept = kept_list(mask);
    } else {
      for (int64_t l = 0; l < mask.size(0); l++) kept.push_back(kept_list(mask[l]));
    }
    scale = mask;
  };
  PruneSpec spec;
  take(d.layer, spec.layers, spec.layer_scale);
  take(d.head, spec.heads, spec.head_scale);
  take(d.intermediate, spec.intermediate, spec.intermediate_scale);
  take(d.hidden, spec.hidden, spec.hidden_scale);
  return spec;
}

ModelShape ShearedPruner::finalize() {
  LT_CHECK(!spent_, "prune: this Sheared pruner was finalised; make a new one");
  PruneSpec spec = final_spec();
  ModelShape shape = prune_apply(*model_, spec);
  spent_ = true;
  state_->sample = {};
  state_->eval = {};
  for (auto& m : state_->masks) m.z = m.leaf = at::Tensor();
  return shape;
}

// ============================================================================================
// TrainerHook

std::vector<std::pair<std::string, at::Tensor*>> ShearedPruner::named_tensors() {
  std::vector<std::pair<std::string, at::Tensor*>> out;
  for (int k = 0; k < kKinds; k++)
    if (state_->masks[k].active)
      out.emplace_back("l0." + std::string(kKindNames[k]) + ".log_alpha", &state_->masks[k].log_alpha);
  for (int k = 0; k < kKinds; k++) {
    State::Mask& m = state_->masks[k];
    if (!m.active) continue;
    out.emplace_back("l0." + std::string(kKindNames[k]) + ".lambda1", &m.lambda1);
    out.emplace_back("l0." + std::string(kKindNames[k]) + ".lambda2", &m.lambda2);
  }
  return out;
}

std::vector<ParamGroup> ShearedPruner::parameter_groups() {
  LT_CHECK(!spent_, "prune: this Sheared pruner was finalised; make a new one");
  ParamGroup masks, multipliers;
  for (auto& [name, t] : named_tensors()) {
    bool is_mask = name.size() > 10 && name.compare(name.size() - 10, 10, ".log_alpha") == 0;
    (is_mask ? masks : multipliers).params.emplace_back(name, t);
  }
  masks.lr = options_.mask_lr;
  multipliers.lr = -options_.lambda_lr;  // gradient ascent: the multipliers maximise the Lagrangian
  for (ParamGroup* g : {&masks, &multipliers}) {
    g->follow_schedule = false;
    g->weight_decay = 0;
    g->clip = false;
  }
  return {masks, multipliers};
}

void ShearedPruner::begin(bool training) {
  LT_CHECK(!spent_, "prune: this Sheared pruner was finalised; make a new one");
  State& s = *state_;
  if (!training) {
    s.eval = deterministic_masks();
    s.eval_valid = true;
    return;
  }
  {
    at::NoGradGuard no_grad;  // constrain like the reference: clamp the values, not the gradient
    for (auto& m : s.masks)
      if (m.active) m.log_alpha.clamp_(kLogAlphaMin, kLogAlphaMax);
  }
  at::AutoGradMode grad(true);
  StructureMasks z = sample_masks();
  at::Tensor* zs[kKinds] = {&z.layer, &z.head, &z.intermediate, &z.hidden};
  at::Tensor* leaves[kKinds] = {&s.sample.layer, &s.sample.head, &s.sample.intermediate, &s.sample.hidden};
  for (int k = 0; k < kKinds; k++) {
    State::Mask& m = s.masks[k];
    m.z = *zs[k];
    m.leaf = m.active ? m.z.detach().requires_grad_(true) : at::Tensor();
    *leaves[k] = m.leaf;
  }
}

void ShearedPruner::forward_options(ForwardOptions& fo, bool training) {
  LT_CHECK(!spent_, "prune: this Sheared pruner was finalised; make a new one");
  State& s = *state_;
  if (training) {
    bool sampled = false;
    for (auto& m : s.masks) sampled = sampled || m.leaf.defined();
    if (!sampled) begin(true);  // a forward outside Trainer::step (Trainer::batch_loss)
    fo.masks = &s.sample;
  } else {
    if (!s.eval_valid) begin(false);
    fo.masks = &s.eval;
  }
}

void ShearedPruner::after_backward() {
  LT_CHECK(!spent_, "prune: this Sheared pruner was finalised; make a new one");
  State& s = *state_;
  for (auto& m : s.masks) {
    if (m.active && m.leaf.defined() && m.leaf.grad().defined()) m.z.backward(m.leaf.grad());
    m.z = m.leaf = at::Tensor();
  }
  s.sample = {};
  s.lagrangian_step = steps();
  at::Tensor lag = lagrangian(s.lagrangian_step);
  lag.backward();
  s.lagrangian = lag.detach();
}

void ShearedPruner::after_step(int64_t step) {
  State& s = *state_;
  s.step = step;
  at::NoGradGuard no_grad;
  for (auto& m : s.masks)
    if (m.active) m.log_alpha.clamp_(kLogAlphaMin, kLogAlphaMax);
  s.eval_valid = false;
}

std::vector<std::pair<std::string, double>> ShearedPruner::stats(bool training) {
  std::vector<std::pair<std::string, double>> out;
  if (spent_) return out;
  at::NoGradGuard no_grad;
  const int64_t step = training ? state_->lagrangian_step : steps();
  // Device values are gathered and copied to the host at once: one sync per report, not one each.
  std::vector<size_t> slots;
  std::vector<at::Tensor> values;
  auto later = [&](const std::string& name, const at::Tensor& v) {
    slots.push_back(out.size());
    values.push_back(v.detach().to(at::kDouble).reshape({}));
    out.emplace_back(name, 0.0);
  };
  for (int k = 0; k < kKinds; k++) {
    const State::Mask& m = state_->masks[k];
    if (!m.active) continue;
    const std::string kind = kKindNames[k];
    later("expected_sparsity_" + kind, expected_rows(m.log_alpha, options_).mean());
    out.emplace_back("target_sparsity_" + kind, target_sparsity(kind, step));
    later("lambda1_" + kind, m.lambda1);
  }
  if (state_->lagrangian.defined())
    later("lagrangian", state_->lagrangian);
  else
    out.emplace_back("lagrangian", 0.0);
  at::Tensor host = at::stack(values).to(at::kCPU).contiguous();
  for (size_t i = 0; i < slots.size(); i++) out[slots[i]].second = host.data_ptr<double>()[i];
  return out;
}

}  // namespace luatune
