// Activation checkpointing: run a function without keeping its activations, and run it again in the
// backward pass (with the same random state, so dropout draws the same mask) to get the gradients.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>

namespace luatune {

using LayerFn = std::function<at::Tensor(const at::Tensor&)>;

// y = fn(x), differentiable in x and in every leaf fn reads (weights get their .grad accumulated
// during the recomputation). fn must be deterministic given the CPU/CUDA random state.
at::Tensor recompute_forward(const LayerFn& fn, const at::Tensor& x);

// Called around the two runs of fn (ZeRO-3 gathers a layer's weights before each run and frees
// them after; its gradients are reduce-scattered once the recomputed backward is done).
struct RecomputeHooks {
  std::function<void()> before_forward;   // before the forward (no-grad) run
  std::function<void()> before_backward;  // before the recomputation in backward
  std::function<void()> after_forward;    // after the forward (no-grad) run
  std::function<void()> after_backward;   // after the recomputed run's backward
};
at::Tensor recompute_forward(const LayerFn& fn, const at::Tensor& x, const RecomputeHooks& hooks);

}  // namespace luatune
