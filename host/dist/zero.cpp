// ZeRO shards (zero.h). One flat buffer per group, padded to N slices; the slice arithmetic is the
// only layout there is: rank r owns elements [r * shard, (r + 1) * shard) of the group's flat
// buffer, where a member parameter occupies [offset, offset + numel) in checkpoint order.
#include "host/dist/zero.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "host/core/error.h"
#include "host/dist/dist.h"
#include "host/train/recompute.h"

namespace luatune {

using json = nlohmann::json;

ShardStage shard_stage_parse(const std::string& s) {
  ShardStage stage;
  if (!shard_stage_lookup(s, &stage))
    fail(
        "train.new: shard must be \"none\", \"optimizer\", \"gradients\" or \"full\" (ZeRO stage 0-3; FSDP's "
        "NO_SHARD, SHARD_GRAD_OP, FULL_SHARD also accepted), got \"" +
        s + "\"");
  return stage;
}

int64_t zero_layer_of(const std::string& name) {
  const std::string prefix = "model.layers.";
  if (name.compare(0, prefix.size(), prefix) != 0) return -1;
  size_t end = name.find('.', prefix.size());
  if (end == std::string::npos || end == prefix.size()) return -1;
  for (size_t i = prefix.size(); i < end; i++)
    if (name[i] < '0' || name[i] > '9') return -1;
  return std::stoll(name.substr(prefix.size(), end - prefix.size()));
}

namespace {

bool is_low_precision(at::ScalarType t) {
  return t == at::kBFloat16 || t == at::kHalf;
}

int64_t nbytes(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

// Zeros in host memory, page-locked when a GPU will copy to and from it.
at::Tensor host_zeros(int64_t n, at::ScalarType dtype, bool pinned) {
  return at::zeros({n}, at::TensorOptions(dtype).device(c10::kCPU).pinned_memory(pinned));
}

// What the unsharded trainer would hold for one parameter of `numel` elements (optim.h's states).
int64_t optimizer_bytes(const std::string& optimizer, double momentum, int64_t numel) {
  if (optimizer == "adamw") return 8 * numel;
  if (optimizer == "adamw8bit") {
    if (numel < kAdam8bitMinSize) return 8 * numel;
    const int64_t blocks = (numel + kAdam8bitBlock - 1) / kAdam8bitBlock;
    return 2 * numel + 8 * blocks;
  }
  return momentum > 0 ? 4 * numel : 0;
}

}  // namespace

ZeroShards::ZeroShards(std::vector<std::pair<std::string, at::Tensor*>> params, int64_t num_layers,
                       ZeroOptions options)
    : params_(std::move(params)), options_(std::move(options)) {
  world_ = dist_world_size();
  rank_ = dist_rank();
  at::NoGradGuard no_grad;
  // Groups in order of first appearance, keyed by (layer, dtype, device): a layer's weights are
  // gathered and reduced together.
  std::map<std::tuple<int64_t, int, std::string>, size_t> index;
  layer_groups_.assign(static_cast<size_t>(std::max<int64_t>(num_layers, 0)), {});
  for (size_t k = 0; k < params_.size(); k++) {
    const at::Tensor& p = *params_[k].second;
    const int64_t layer = zero_layer_of(params_[k].first);
    LT_ASSERT(layer < num_layers, params_[k].first << " names a layer beyond the model's " << num_layers);
    auto key = std::make_tuple(layer, static_cast<int>(p.scalar_type()), p.device().str());
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, groups_.size()).first;
      Group g;
      g.layer = layer;
      g.dtype = p.scalar_type();
      g.device = p.device();
      groups_.push_back(std::move(g));
      if (layer >= 0) layer_groups_[static_cast<size_t>(layer)].push_back(it->second);
    }
    Group& g = groups_[it->second];
    g.members.push_back(Member{k, g.numel, p.numel(), p.sizes().vec()});
    g.numel += p.numel();
  }
  const bool cuda = !groups_.empty() && groups_.front().device.is_cuda();
  // 8-bit states are quantized in blocks counted from the start of the owned slice: slices that
  // are whole blocks put the block boundaries where one process puts them, so N ranks quantize
  // exactly the blocks one process does.
  const int64_t unit = options_.hyper.optimizer == "adamw8bit" ? kAdam8bitBlock : 1;
  for (Group& g : groups_) {
    g.shard = std::max<int64_t>(1, (g.numel + world_ * unit - 1) / (world_ * unit)) * unit;
    g.padded = g.shard * world_;
    at::Tensor flat = at::zeros({g.padded}, at::TensorOptions(g.dtype).device(g.device));
    for (const Member& m : g.members)
      flat.narrow(0, m.offset, m.numel).copy_(params_[m.param].second->detach().reshape({-1}));
    at::Tensor slice = flat.narrow(0, static_cast<int64_t>(rank_) * g.shard, g.shard);
    const at::ScalarType wtype = options_.master_weights && is_low_precision(g.dtype) ? at::kFloat : g.dtype;
    if (!sharded_at_rest(g)) {
      // The parameters become views of the group's buffer (as FSDP's flat parameters).
      g.flat = flat;
      for (const Member& m : g.members)
        params_[m.param].second->set_data(flat.narrow(0, m.offset, m.numel).view(m.shape));
    }
    g.w_in_flat = !sharded_at_rest(g) && wtype == g.dtype && !options_.offload;
    if (g.w_in_flat) {
      g.w = slice;  // updated in place: the weights themselves
    } else if (options_.offload) {
      g.w = host_zeros(g.shard, wtype, cuda);
      g.w.copy_(slice);
    } else {
      g.w = slice.to(wtype).clone();
    }
    // The decay mask of the owned slice [rank * shard, (rank + 1) * shard), when a member takes none.
    if (options_.decays) {
      bool all = true;
      for (const Member& m : g.members) all = all && options_.decays(params_[m.param].first);
      if (!all) {
        g.decay = at::zeros({g.shard}, g.w.options());
        const int64_t lo = static_cast<int64_t>(rank_) * g.shard, hi = lo + g.shard;
        for (const Member& m : g.members) {
          const int64_t a = std::max(lo, m.offset), b = std::min(hi, m.offset + m.numel);
          if (a < b && options_.decays(params_[m.param].first)) g.decay.narrow(0, a - lo, b - a).fill_(1.0);
        }
      }
    }
    // Stage 1 sums gradients into the slice only at the end of the step (finish_gradients).
    if (options_.stage != ShardStage::optimizer) g.grad = new_grad_slice(g);
    g.opt = OptimState::create(options_.hyper.optimizer, options_.hyper.momentum, {g.shard}, g.w.device());
    if (sharded_at_rest(g)) {
      g.weight = (g.w.scalar_type() == g.dtype && g.w.device() == g.device) ? g.w : slice.clone();
      g.nan =
          at::full({}, std::numeric_limits<double>::quiet_NaN(), at::TensorOptions(g.dtype).device(g.device));
      release(g);
    }
  }
}

ZeroShards::~ZeroShards() = default;

at::Tensor ZeroShards::new_grad_slice(const Group& g) const {
  if (options_.offload) return host_zeros(g.shard, at::kFloat, g.device.is_cuda());
  return at::zeros({g.shard}, at::TensorOptions(at::kFloat).device(g.device));
}

void ZeroShards::prefetch(Group& g) {
  layer_gather_prefetch(g, g.weight);
}

void ZeroShards::acquire(Group& g) {
  layer_gather_acquire(g, g.weight, params_);  // host/dist/layer_gather.h
}

void ZeroShards::layer_enter(int64_t layer, int64_t next) {
  for (size_t gi : layer_groups_[static_cast<size_t>(layer)]) acquire(groups_[gi]);
  if (next >= 0 && next < static_cast<int64_t>(layer_groups_.size()))
    for (size_t gi : layer_groups_[static_cast<size_t>(next)])
      if (sharded_at_rest(groups_[gi])) prefetch(groups_[gi]);
}

void ZeroShards::layer_forward_done(int64_t layer) {
  for (size_t gi : layer_groups_[static_cast<size_t>(layer)])
    if (sharded_at_rest(groups_[gi])) release(groups_[gi]);
}

void ZeroShards::layer_backward_done(int64_t layer) {
  for (size_t gi : layer_groups_[static_cast<size_t>(layer)]) reduce(groups_[gi]);
  layer_forward_done(layer);
}

void ZeroShards::release(Group& g) {
  layer_gather_release(g, params_);  // a view of one NaN, keeping its shape (layer_gather.h)
}

void ZeroShards::acquire_all() {
  for (Group& g : groups_)
    if (sharded_at_rest(g)) acquire(g);
}

void ZeroShards::reduce(Group& g) {
  at::NoGradGuard no_grad;
  at::Tensor flat = at::zeros({g.padded}, at::TensorOptions(g.dtype).device(g.device));
  for (const Member& m : g.members) {
    at::Tensor& p = *params_[m.param].second;
    if (p.grad().defined()) flat.narrow(0, m.offset, m.numel).copy_(p.grad().reshape({-1}));
    p.mutable_grad() = at::Tensor();
  }
  at::Tensor slice = at::empty({g.shard}, flat.options());
  dist_reduce_scatter_sum(flat, slice);
  g.grad.add_(slice.to(g.grad.device(), at::kFloat));
  g.reduced = true;
}

void ZeroShards::gather_into_params(Group& g, const at::Tensor& slice) {
  at::NoGradGuard no_grad;
  // The parameters are views of g.flat: gathering into it is the whole update of the weights.
  dist_all_gather(g.w_in_flat ? slice : slice.to(g.device, g.dtype).contiguous(), g.flat);
}

void ZeroShards::begin_step() {
  for (Group& g : groups_) {
    if (g.grad.defined()) g.grad.zero_();
    g.reduced = false;
    if (sharded_at_rest(g)) release(g);
  }
  for (auto& [name, p] : params_) p->mutable_grad() = at::Tensor();
}

void ZeroShards::end_micro_batch() {
  if (options_.stage < ShardStage::gradients) return;
  for (Group& g : groups_) {
    if (!g.reduced) {
      reduce(g);
    } else {
      for (const Member& m : g.members)
        LT_ASSERT(!params_[m.param].second->grad().defined(),
                  params_[m.param].first << " got a gradient after its layer's reduce-scatter");
    }
    g.reduced = false;
  }
}

void ZeroShards::empty_micro_batch(const std::function<void()>& forward_done) {
  if (options_.stage < ShardStage::gradients) {
    if (forward_done) forward_done();
    return;
  }
  const int64_t layers = static_cast<int64_t>(layer_groups_.size());
  if (options_.stage == ShardStage::full)
    for (int64_t l = 0; l < layers; l++) {  // the forward's gathers
      layer_enter(l, l + 1);
      layer_forward_done(l);
    }
  if (forward_done) forward_done();
  if (options_.recompute)
    for (int64_t l = layers; l-- > 0;) {  // the backward's: gather, reduce zeros, free
      layer_enter(l, l - 1);
      layer_backward_done(l);
    }
  end_micro_batch();
}

void ZeroShards::finish_gradients() {
  if (options_.stage != ShardStage::optimizer) return;
  for (Group& g : groups_) {
    g.grad = new_grad_slice(g);  // freed again after the update: the full gradients were the cost
    reduce(g);
  }
}

double ZeroShards::grad_norm_sq() const {
  at::Tensor sq;  // summed where the first slice lives: one host sync for all groups
  for (const Group& g : groups_) {
    if (!g.grad.defined()) continue;
    at::Tensor part =
        at::linalg_vector_norm(g.grad, 2, c10::nullopt, false, at::kFloat).square();  // no squared copy
    sq = sq.defined() ? sq + part.to(sq.device()) : part;
  }
  return sq.defined() ? sq.item<double>() : 0.0;
}

void ZeroShards::scale_gradients(double c) {
  for (Group& g : groups_)
    if (g.grad.defined()) g.grad.mul_(c);
}

void ZeroShards::update(double lr, double weight_decay, int64_t step) {
  at::NoGradGuard no_grad;
  OptimHyper h = options_.hyper;
  h.lr = lr;
  h.weight_decay = weight_decay;
  h.step = step;
  for (Group& g : groups_) {
    if (!g.grad.defined()) continue;  // stage 1 before its first reduce (no step yet)
    if (g.decay.defined() && weight_decay > 0) {
      // Some of the slice takes no decay: AdamW's decoupled decay (applied first, as optim_update
      // does) on the rest by the mask, then the update without it; SGD's L2 term likewise.
      // In place: w -= lr * wd * decay * w (grad += wd * decay * w for SGD), no temporaries.
      OptimHyper hm = h;
      hm.weight_decay = 0;
      if (h.optimizer == "sgd") {
        g.grad.addcmul_(g.w.to(g.grad.options()), g.decay.to(g.grad.options()), weight_decay);
        optim_update(g.w, g.grad, g.opt, hm);
      } else if (h.optimizer == "adamw8bit") {  // bitsandbytes decays after the step (docs/adamw8bit.md)
        optim_update(g.w, g.grad, g.opt, hm);
        g.w.addcmul_(g.w, g.decay, -lr * weight_decay);
      } else {
        g.w.addcmul_(g.w, g.decay, -lr * weight_decay);
        optim_update(g.w, g.grad, g.opt, hm);
      }
    } else {
      optim_update(g.w, g.grad, g.opt, h);
    }
    if (options_.stage == ShardStage::optimizer) g.grad = at::Tensor();
    if (sharded_at_rest(g)) {
      if (!g.weight.is_same(g.w)) g.weight.copy_(g.w);
      // A layer gathered since the last step (acquire_all) would hold stale weights: free it.
      release(g);
    } else {
      gather_into_params(g, g.w);
    }
  }
}

at::Tensor ZeroShards::run_layer(int64_t layer, const std::function<at::Tensor(const at::Tensor&)>& fn,
                                 const at::Tensor& x, bool training) {
  LT_ASSERT(layer >= 0 && layer < static_cast<int64_t>(layer_groups_.size()),
            "layer " << layer << " out of range");
  if (!training) {  // no backward to come: gather, run, free
    layer_enter(layer, -1);
    at::Tensor y = fn(x);
    layer_forward_done(layer);
    return y;
  }
  // The forward gathers layer+1 while this one runs, the backward layer-1 (the order layers come).
  RecomputeHooks hooks;
  hooks.before_forward = [this, layer] { layer_enter(layer, layer + 1); };
  hooks.after_forward = [this, layer] { layer_forward_done(layer); };
  hooks.before_backward = [this, layer] { layer_enter(layer, layer - 1); };
  hooks.after_backward = [this, layer] { layer_backward_done(layer); };
  return recompute_forward(fn, x, hooks);
}

std::vector<std::pair<std::string, at::Tensor>> ZeroShards::state_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < groups_.size(); i++) {
    const std::string name = "zero." + std::to_string(i);
    out.emplace_back(name + ".w", groups_[i].w);
    for (auto& kv : groups_[i].opt.tensors(name)) out.push_back(kv);
  }
  return out;
}

void ZeroShards::load_state(const std::function<at::Tensor(const std::string&)>& get,
                            const std::string& where) {
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < groups_.size(); i++) {
    Group& g = groups_[i];
    const std::string name = "zero." + std::to_string(i);
    at::Tensor w = get(name + ".w");
    LT_CHECK(w.defined(),
             where << ": tensor " << name << ".w is missing (a checkpoint of another sharding?)");
    LT_CHECK(w.numel() == g.shard && w.scalar_type() == g.w.scalar_type(),
             where << ": tensor " << name << ".w has " << w.numel() << " elements of " << w.scalar_type()
                   << ", this rank's slice is " << g.shard << " of " << g.w.scalar_type());
    g.w.copy_(w);
    g.opt.load(name, get, where);
    if (sharded_at_rest(g)) {
      if (!g.weight.is_same(g.w)) g.weight.copy_(g.w);
      release(g);
    } else {
      gather_into_params(g, g.w);
    }
  }
}

std::string ZeroShards::layout_json() const {
  json groups = json::array();
  for (const Group& g : groups_) {
    json names = json::array();
    for (const Member& m : g.members) names.push_back(params_[m.param].first);
    groups.push_back({{"layer", g.layer},
                      {"dtype", std::string(c10::toString(g.dtype))},
                      {"numel", g.numel},
                      {"padded", g.padded},
                      {"members", names}});
  }
  json out = {{"stage", shard_stage_name(options_.stage)},
              {"optimizer", options_.hyper.optimizer},
              {"offload", options_.offload},
              {"world_size", world_},
              {"groups", groups}};
  return out.dump();
}

ZeroMemory ZeroShards::memory() const {
  ZeroMemory z;
  for (const Group& g : groups_) {
    const int64_t elem = static_cast<int64_t>(c10::elementSize(g.dtype));
    const bool lowp = is_low_precision(g.dtype);
    z.full_weights += g.numel * elem;
    z.weights += sharded_at_rest(g) ? nbytes(g.weight) : g.numel * elem;
    z.full_masters += options_.master_weights && lowp ? g.numel * 4 : 0;
    // The owned slice is a copy of its own unless it is the weights' (stages 1-2, same dtype) or the
    // ZeRO-3 weight slice itself.
    if (!g.w_in_flat && !(g.weight.defined() && g.weight.is_same(g.w))) z.masters += nbytes(g.w);
    z.full_gradients += g.numel * elem;
    // Stage 1: the full gradients during the backward (the slice exists only around the update).
    z.gradients += options_.stage == ShardStage::optimizer ? g.numel * elem : nbytes(g.grad);
    for (const Member& m : g.members)
      z.full_optimizer += optimizer_bytes(options_.hyper.optimizer, options_.hyper.momentum, m.numel);
    z.optimizer += g.opt.bytes();
    if (options_.offload)
      z.host += nbytes(g.w) + (g.grad.defined() ? nbytes(g.grad) : g.shard * 4) + g.opt.bytes();
  }
  return z;
}

}  // namespace luatune
