// Sheared-LLaMA targeted structured pruning (docs/pruning.md, "Sheared-LLaMA" and "Sources"):
// hard-concrete (L0) masks per layer, per attention head, per MLP channel and per hidden channel,
// learned jointly with the weights under expected-sparsity constraints whose Lagrange multipliers
// are maximised, then finalised to exactly the target shape with the soft mask values folded into
// the kept weights. It plugs into the Trainer as a hook (host/train/trainer.h):
//   masks log_alpha: own parameter group, lr mask_lr (constant), no decay, not clipped;
//   lambda1, lambda2 per mask kind: own group, lr -lambda_lr (gradient ascent on the min-max);
//   each training step samples one mask set shared by the whole batch; evaluation uses the
//   deterministic masks (exact target counts, soft values kept).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/prune/surgery.h"
#include "host/train/trainer.h"

namespace luatune {

struct ShearedOptions {
  TargetSparsity target;     // kinds whose (rounded) target keeps everything get no mask
  int64_t warmup_steps = 0;  // target sparsity ramps linearly from 0 over these steps (Lagrangian warm-up)
  double mask_lr = 1.0;      // log_alpha learning rate
  double lambda_lr = 1.0;    // multipliers' learning rate (applied as -lambda_lr)
  double init_mean = 5.0, init_std = 0.01;  // log_alpha ~ N(mean, std): every mask starts "on"
  double temperature = 2.0 / 3.0;           // hard-concrete beta
  double limit_l = -0.1, limit_r = 1.1;     // stretch interval (gamma, zeta)
  uint64_t seed = 0;                        // log_alpha initialisation
};

class ShearedPruner : public TrainerHook {
 public:
  // Fails before any work when a target cannot be met (prune_targets' checks) or the model has DoRA.
  ShearedPruner(std::shared_ptr<Model> model, ShearedOptions options);

  const TargetShape& target() const { return target_; }
  const ShearedOptions& options() const { return options_; }
  // The target sparsity per kind at optimizer step `step` (after warm-up: the final targets).
  double target_sparsity(const std::string& kind, int64_t step) const;
  // Expected sparsity per kind from the current log_alpha: 1 - mean(1 - P(z = 0)), averaged over
  // layers for head and intermediate masks. Kinds: "layers", "heads", "hidden", "intermediate".
  double expected_sparsity(const std::string& kind) const;
  // The Lagrangian sum over kinds of mean_rows(lambda1 (s - t) + lambda2 (s - t)^2) at `step`,
  // differentiable in log_alpha and the multipliers.
  at::Tensor lagrangian(int64_t step) const;
  // One hard-concrete sample of every mask (training) as StructureMasks (heads (L, H)).
  StructureMasks sample_masks() const;
  // Deterministic masks: soft = sigmoid(log_alpha / temperature * 0.8), the lowest-scoring entries
  // beyond the target counts set to 0 (per layer for heads/intermediate; per KV group for heads),
  // kept entries keep their soft value.
  StructureMasks deterministic_masks() const;
  // The spec that keeps exactly the deterministic masks' non-zero entries with their values folded.
  PruneSpec final_spec() const;
  // prune_apply(model, final_spec()): the model becomes the target shape. The pruner is spent
  // afterwards (further use fails).
  ModelShape finalize();

  // Kinds that have a mask, in the order layers, heads, intermediate, hidden (a kind whose target
  // keeps everything has none).
  std::vector<std::string> kinds() const;
  // Optimizer steps taken with this pruner (the trainer's after_step; Trainer::resume calls it with
  // the restored step).
  int64_t steps() const;
  // Every tensor the trainer updates or checkpoints: log_alpha per kind ("l0.layers.log_alpha" ...),
  // and the multipliers ("l0.heads.lambda1", "l0.heads.lambda2" ...).
  std::vector<std::pair<std::string, at::Tensor*>> named_tensors();

  // TrainerHook
  std::vector<ParamGroup> parameter_groups() override;
  void begin(bool training) override;
  void forward_options(ForwardOptions& fo, bool training) override;
  void after_backward() override;
  void after_step(int64_t step) override;
  std::vector<std::pair<std::string, double>> stats(bool training) override;

 private:
  std::shared_ptr<Model> model_;
  ShearedOptions options_;
  TargetShape target_;
  ModelShape source_;
  bool spent_ = false;
  // Implementation state (masks, multipliers, the current sample and its detached leaves) lives
  // in the .cpp's private struct.
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace luatune
