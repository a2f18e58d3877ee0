// ZeRO-3 for a frozen model (a distillation teacher): across the data-parallel ranks each rank keeps
// only a 1/N slice of every decoder layer's weights, laid out as ZeRO's groups are (zero.h: one flat
// buffer per layer and dtype, padded to N slices, rank r owning slice r), and a forward gathers each
// layer just before it runs and frees it right after. Nothing is kept for a backward: the model runs
// without autograd. Embeddings, the final norm, the LM head and adapter weights stay whole.
// Every call that communicates is collective: all ranks make the same calls in the same order.
// Rules and costs: docs/distill.md, "Sharded teacher".
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/dist/dist.h"
#include "host/dist/layer_gather.h"
#include "host/model/transformer.h"

namespace luatune {

// Decoder-layer weight elements this rank holds, and what one unsharded copy holds.
struct FrozenShardsMemory {
  int64_t layer_elements = 0, full_layer_elements = 0;
  int64_t layer_bytes = 0, full_layer_bytes = 0;
};

class FrozenShards : public LayerResidency {
 public:
  // params: the model's base weights (name, tensor), equal on every rank; the ones named
  // "model.layers.<l>.*" are sharded (their full tensors are freed here), the rest left alone.
  FrozenShards(std::vector<std::pair<std::string, at::Tensor*>> params, int64_t num_layers);
  ~FrozenShards() override;
  FrozenShards(const FrozenShards&) = delete;
  FrozenShards& operator=(const FrozenShards&) = delete;

  // Decoder layer l as a forward under no-grad runs it: gathered (layer l+1's gather started
  // meanwhile), run, freed. For ForwardOptions::run_layer with run_layer_gathers = true.
  at::Tensor run_layer(int64_t layer, const std::function<at::Tensor(const at::Tensor&)>& fn,
                       const at::Tensor& x);
  // The collectives of one whole forward without computing anything: what a rank with no rows for
  // a micro-batch calls while the others run the model.
  void empty_forward();
  // LayerResidency: every layer full until the next forward frees each again (saving, counting).
  void acquire_all() override;

  FrozenShardsMemory memory() const;
  int64_t num_layers() const { return static_cast<int64_t>(layer_groups_.size()); }

 private:
  using Member = LayerGatherMember;  // host/dist/layer_gather.h
  struct Group {
    at::ScalarType dtype;
    c10::Device device = c10::kCPU;
    std::vector<Member> members;
    int64_t numel = 0, padded = 0, shard = 0;  // shard = padded / N elements per rank
    at::Tensor slice;                          // (shard) this rank's part, in the weights' dtype
    at::Tensor nan;                            // the one NaN element released weights view
    bool resident = true;
    std::unique_ptr<DistWork> pending;  // a prefetch (all-gather into pending_flat) in flight
    at::Tensor pending_flat;
  };
  void prefetch(Group& g);
  void acquire(Group& g);
  void release(Group& g);
  void layer_enter(int64_t layer);  // gather it (waiting), start the next one's gather
  void layer_done(int64_t layer);

  std::vector<std::pair<std::string, at::Tensor*>> params_;  // the sharded ones only
  std::vector<Group> groups_;
  std::vector<std::vector<size_t>> layer_groups_;  // per decoder layer, its groups
  int64_t world_ = 1, rank_ = 0;
};

}  // namespace luatune
