// Gathering a sharded decoder layer, shared by ZeRO-3 (host/dist/zero.h, trainable weights) and the
// sharded distillation teacher (host/dist/frozen_shards.h, frozen ones): a group is one layer's
// tensors of one dtype flattened into a padded buffer, each rank holding one 1/N slice. Between uses
// the tensors are views of a single NaN element (a forward that forgot to gather gives NaN, not
// quietly wrong numbers); prefetch starts the all-gather, acquire waits for it and points the
// tensors into the gathered buffer, release points them back at the NaN. Templates over the two
// classes' Group structs, which both carry the fields used here.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "host/dist/dist.h"

namespace luatune {

// One tensor of a group: its place in the params list and in the group's flat buffer.
struct LayerGatherMember {
  size_t param;           // index into the owner's params_
  int64_t offset, numel;  // in the group's flat buffer
  std::vector<int64_t> shape;
};

using GatherParams = std::vector<std::pair<std::string, at::Tensor*>>;

// Starts gathering every rank's `slice` of g into g.pending_flat (nothing when resident or started).
template <class Group>
void layer_gather_prefetch(Group& g, const at::Tensor& slice) {
  if (g.resident || g.pending) return;
  g.pending_flat = at::empty({g.padded}, at::TensorOptions(g.dtype).device(g.device));
  g.pending = dist_all_gather_async(slice, g.pending_flat);
}

// The group's tensors whole: the gather started now unless a prefetch did, waited for, and every
// member pointed at its part of the gathered buffer.
template <class Group>
void layer_gather_acquire(Group& g, const at::Tensor& slice, const GatherParams& params) {
  if (g.resident) return;
  at::NoGradGuard no_grad;
  layer_gather_prefetch(g, slice);
  g.pending->wait();
  g.pending.reset();
  at::Tensor flat = std::move(g.pending_flat);
  for (const LayerGatherMember& m : g.members)
    params[m.param].second->set_data(flat.narrow(0, m.offset, m.numel).view(m.shape));
  g.resident = true;
}

// Back to the slice alone: every member a view of the group's one NaN element, keeping its shape.
template <class Group>
void layer_gather_release(Group& g, const GatherParams& params) {
  if (!g.resident) return;
  for (const LayerGatherMember& m : g.members) params[m.param].second->set_data(g.nan.expand(m.shape));
  g.resident = false;
}

}  // namespace luatune
