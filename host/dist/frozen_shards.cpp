// Frozen shards (frozen_shards.h): ZeRO-3's layout (zero.cpp) without gradients or optimizer state.
// Rank r owns elements [r * shard, (r + 1) * shard) of each group's flat buffer, where a member
// weight occupies [offset, offset + numel) in checkpoint order.
#include "host/dist/frozen_shards.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "host/core/error.h"
#include "host/dist/zero.h"

namespace luatune {

FrozenShards::FrozenShards(std::vector<std::pair<std::string, at::Tensor*>> params, int64_t num_layers) {
  world_ = dist_world_size();
  rank_ = dist_rank();
  at::NoGradGuard no_grad;
  layer_groups_.assign(static_cast<size_t>(std::max<int64_t>(num_layers, 0)), {});
  // Groups keyed by (layer, dtype, device), as ZeRO's: a layer's weights are gathered together.
  std::map<std::tuple<int64_t, int, std::string>, size_t> index;
  for (auto& [name, p] : params) {
    const int64_t layer = zero_layer_of(name);
    if (layer < 0 || !p->defined()) continue;  // embeddings, final norm, LM head: whole
    LT_ASSERT(layer < num_layers, name << " names a layer beyond the model's " << num_layers);
    auto key = std::make_tuple(layer, static_cast<int>(p->scalar_type()), p->device().str());
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, groups_.size()).first;
      Group g;
      g.dtype = p->scalar_type();
      g.device = p->device();
      groups_.push_back(std::move(g));
      layer_groups_[static_cast<size_t>(layer)].push_back(it->second);
    }
    Group& g = groups_[it->second];
    g.members.push_back(Member{params_.size(), g.numel, p->numel(), p->sizes().vec()});
    g.numel += p->numel();
    params_.emplace_back(name, p);
  }
  for (Group& g : groups_) {
    g.shard = std::max<int64_t>(1, (g.numel + world_ - 1) / world_);
    g.padded = g.shard * world_;
    // Only this rank's slice is built: the full flat buffer would be a second copy of the layer.
    g.slice = at::zeros({g.shard}, at::TensorOptions(g.dtype).device(g.device));
    const int64_t lo = static_cast<int64_t>(rank_) * g.shard, hi = lo + g.shard;
    for (const Member& m : g.members) {
      const int64_t a = std::max(lo, m.offset), b = std::min(hi, m.offset + m.numel);
      if (a < b)
        g.slice.narrow(0, a - lo, b - a)
            .copy_(params_[m.param].second->detach().reshape({-1}).narrow(0, a - m.offset, b - a));
    }
    g.nan =
        at::full({}, std::numeric_limits<double>::quiet_NaN(), at::TensorOptions(g.dtype).device(g.device));
    release(g);  // the full weights go (their storage is freed with the last reference)
  }
}

FrozenShards::~FrozenShards() = default;

void FrozenShards::prefetch(Group& g) {
  layer_gather_prefetch(g, g.slice);
}

void FrozenShards::acquire(Group& g) {
  layer_gather_acquire(g, g.slice, params_);
}

void FrozenShards::release(Group& g) {
  layer_gather_release(g, params_);
}

void FrozenShards::layer_enter(int64_t layer) {
  for (size_t gi : layer_groups_[static_cast<size_t>(layer)]) acquire(groups_[gi]);
  // The next layer's gather overlaps this one's compute; the last layer starts none, so no gather is
  // left in flight when the forward returns (the trainer's own collectives come next).
  if (layer + 1 < num_layers())
    for (size_t gi : layer_groups_[static_cast<size_t>(layer + 1)]) prefetch(groups_[gi]);
}

void FrozenShards::layer_done(int64_t layer) {
  for (size_t gi : layer_groups_[static_cast<size_t>(layer)]) release(groups_[gi]);
}

at::Tensor FrozenShards::run_layer(int64_t layer, const std::function<at::Tensor(const at::Tensor&)>& fn,
                                   const at::Tensor& x) {
  LT_ASSERT(layer >= 0 && layer < num_layers(), "layer " << layer << " out of range");
  LT_ASSERT(!at::GradMode::is_enabled(),
            "a sharded frozen model runs without autograd (its layers are freed)");
  layer_enter(layer);
  at::Tensor y = fn(x);
  layer_done(layer);
  return y;
}

void FrozenShards::empty_forward() {
  for (int64_t l = 0; l < num_layers(); l++) {
    layer_enter(l);
    layer_done(l);
  }
}

void FrozenShards::acquire_all() {
  for (Group& g : groups_) acquire(g);
}

FrozenShardsMemory FrozenShards::memory() const {
  FrozenShardsMemory m;
  // What the tensors really reference: the slices, plus every distinct storage behind the layer
  // weights (a gathered layer's flat buffer; a released one's single NaN element).
  std::set<const void*> seen;
  for (const Group& g : groups_) {
    const int64_t elem = static_cast<int64_t>(c10::elementSize(g.dtype));
    m.full_layer_elements += g.numel;
    m.full_layer_bytes += g.numel * elem;
    m.layer_elements += g.shard;
    m.layer_bytes += g.shard * elem;
    for (const Member& mb : g.members) {
      const at::Tensor& t = *params_[mb.param].second;
      if (!t.defined() || !seen.insert(t.storage().unsafeGetStorageImpl()).second) continue;
      const int64_t bytes = static_cast<int64_t>(t.storage().nbytes());
      m.layer_bytes += bytes;
      m.layer_elements += bytes / elem;
    }
  }
  return m;
}

}  // namespace luatune
