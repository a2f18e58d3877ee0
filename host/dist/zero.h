// ZeRO sharding of a model's trainable parameters over the data-parallel ranks (DeepSpeed's stages,
// FSDP's sharding strategies), on the c10d process group the DDP path already uses. The parameters
// are flattened into groups (one per decoder layer and dtype, one for the rest: embeddings, final
// norm, lm_head), each padded to a multiple of the world size N; rank r owns slice r of every group:
//   optimizer (ZeRO-1): the fp32 master and the optimizer moments exist only for the owned slice;
//     gradients are summed into it once a step (reduce-scatter), the updated slices all-gathered.
//   gradients (ZeRO-2): also the gradient exists only as the owned slice: each micro-batch's
//     gradients are reduce-scattered into it (layer by layer when layers are recomputed) and freed.
//   full (ZeRO-3): also the decoder layers' weights stay sharded between uses: each layer is
//     gathered just before its forward and again for its (recomputed) backward, then freed.
// Every call that communicates is collective: all ranks make the same calls in the same order.
// Rules and measurements: docs/zero.md.
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
#include "host/dist/shard_stage.h"
#include "host/model/transformer.h"
#include "host/train/optim.h"

namespace luatune {

// "model.layers.12.mlp.up_proj.weight" -> 12; anything else -> -1 (the layer a weight is grouped with).
int64_t zero_layer_of(const std::string& name);

// shard_stage_lookup, or a one-line error naming the accepted values.
ShardStage shard_stage_parse(const std::string& s);

struct ZeroOptions {
  ShardStage stage = ShardStage::optimizer;
  OptimHyper hyper;            // optimizer, betas, eps, momentum (lr, decay and step come per update)
  bool master_weights = true;  // fp32 masters for bf16/f16 weights
  bool offload = false;        // masters and moments in host memory, updated there (ZeRO-Offload)
  bool recompute = false;      // layers recomputed in backward: gradients reduced layer by layer
  // Which parameters (by name) take weight decay; unset: all of them. The trainer passes
  // train_decays (transformers' groups: no biases, no norm weights).
  std::function<bool(const std::string&)> decays;
};

// Bytes this rank holds, and what one unsharded replica would hold, per kind of state.
struct ZeroMemory {
  int64_t weights = 0, masters = 0, gradients = 0, optimizer = 0;  // this rank (device + host)
  int64_t full_weights = 0, full_masters = 0, full_gradients = 0, full_optimizer = 0;  // unsharded
  int64_t host = 0;  // of the above, bytes in host memory (offload)
};

class ZeroShards : public LayerResidency {
 public:
  // params: the model's trainable parameters (name, tensor), equal on every rank; names of decoder
  // layer weights start with "model.layers.<l>.".
  ZeroShards(std::vector<std::pair<std::string, at::Tensor*>> params, int64_t num_layers,
             ZeroOptions options);
  ~ZeroShards() override;
  ZeroShards(const ZeroShards&) = delete;
  ZeroShards& operator=(const ZeroShards&) = delete;

  ShardStage stage() const { return options_.stage; }
  const ZeroOptions& options() const { return options_; }

  // --- one step -------------------------------------------------------------------------------
  void begin_step();  // zero the gradient slices; ZeRO-3: every layer back to its slice
  // After one micro-batch's backward (stages 2, 3): reduce-scatter what the layers did not yet.
  void end_micro_batch();
  // The collectives of a micro-batch this rank has no rows for (ranks with fewer micro-batches,
  // or rows without targets), so every rank makes the same calls; its gradients count as zeros.
  // forward_done runs between the forward's gathers and the backward's, where a real micro-batch
  // runs the trainer hooks' losses (a sharded teacher's gathers must come at the same point).
  void empty_micro_batch(const std::function<void()>& forward_done = {});
  void finish_gradients();      // stage 1: the one reduce-scatter of the step
  double grad_norm_sq() const;  // of this rank's gradient slices (the caller sums over ranks)
  void scale_gradients(double c);
  // One optimizer update of the owned slices (lr and decay for every model parameter), then the
  // weights gathered back (stages 1, 2; ZeRO-3 keeps decoder layers as slices).
  void update(double lr, double weight_decay, int64_t step);

  // --- ZeRO-3 ---------------------------------------------------------------------------------
  // Decoder layer l as the trainer runs it: gathered, run (recomputed in backward with the
  // weights gathered again, its gradients then reduce-scattered), freed.
  at::Tensor run_layer(int64_t layer, const std::function<at::Tensor(const at::Tensor&)>& fn,
                       const at::Tensor& x, bool training);
  void acquire_all() override;

  // --- checkpoints ----------------------------------------------------------------------------
  // This rank's slices (masters/weights, optimizer state) under "zero.<group>.<kind>".
  std::vector<std::pair<std::string, at::Tensor>> state_tensors() const;
  // Loads them back and gathers the weights; fails naming the tensor that is missing or misshapen.
  void load_state(const std::function<at::Tensor(const std::string&)>& get, const std::string& where);
  std::string layout_json() const;  // the groups: members, sizes, padding (the checkpoint manifest)

  ZeroMemory memory() const;
  int64_t groups() const { return static_cast<int64_t>(groups_.size()); }

 private:
  using Member = LayerGatherMember;  // host/dist/layer_gather.h
  struct Group {
    int64_t layer = -1;    // decoder layer, or -1
    at::ScalarType dtype;  // of its parameters
    c10::Device device = c10::kCPU;
    std::vector<Member> members;
    int64_t numel = 0, padded = 0, shard = 0;  // shard = padded / N elements per rank
    at::Tensor w;  // (shard) the owned slice being optimized: float32 master or the dtype's
    // Stages 1-2: one buffer (padded) the group's parameters are views of, so the all-gather writes
    // the weights in place; w is its own slice of it when no other dtype or device is needed.
    at::Tensor flat;
    bool w_in_flat = false;
    at::Tensor weight;  // ZeRO-3 layers: (shard) the owned slice in the parameter dtype (may be w)
    at::Tensor grad;    // (shard) float32, summed gradient of the owned slice
    at::Tensor
        decay;  // (shard, like w) 1 where the owned slice takes weight decay, 0 where not; undefined: all
    OptimState opt;
    bool resident = true;               // ZeRO-3 layers: full tensors present
    std::unique_ptr<DistWork> pending;  // ZeRO-3: a prefetch (all-gather into pending_flat) in flight
    at::Tensor pending_flat;
    at::Tensor nan;        // ZeRO-3 layers: the one NaN element released weights view
    bool reduced = false;  // its gradients were reduce-scattered in this micro-batch
  };

  bool sharded_at_rest(const Group& g) const { return options_.stage == ShardStage::full && g.layer >= 0; }
  void reduce(Group& g);                                       // flat gradients -> += owned slice; frees them
  void gather_into_params(Group& g, const at::Tensor& slice);  // every rank's slice -> the tensors
  void acquire(Group& g);
  void prefetch(Group& g);  // starts the all-gather acquire() will then only wait for
  // One decoder layer's collectives, in the order the real and the empty micro-batch both make
  // them: gather layer l (prefetching layer `next`), then after its forward free it, or after its
  // backward reduce-scatter its gradients and free it.
  void layer_enter(int64_t layer, int64_t next);
  void layer_forward_done(int64_t layer);
  void layer_backward_done(int64_t layer);
  void release(Group& g);
  at::Tensor new_grad_slice(const Group& g) const;  // float32 zeros, on the host when offloaded

  std::vector<std::pair<std::string, at::Tensor*>> params_;
  ZeroOptions options_;
  std::vector<Group> groups_;
  std::vector<std::vector<size_t>> layer_groups_;  // per decoder layer, its groups
  int64_t world_ = 1, rank_ = 0;
};

}  // namespace luatune
