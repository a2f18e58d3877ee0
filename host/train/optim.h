// One optimizer update of one tensor (or one ZeRO shard of a flattened group): AdamW as
// torch.optim.AdamW, SGD with momentum, and bitsandbytes' blockwise 8-bit AdamW. The plain trainer
// and the sharded one (host/dist/zero.h) both update through here, so a shard's numbers are the
// numbers the unsharded tensor would get.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "host/train/adamw8bit.h"

namespace luatune {

struct OptimHyper {
  std::string optimizer = "adamw";  // "adamw", "adamw8bit" or "sgd"
  double lr = 0, weight_decay = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double momentum = 0;  // sgd
  int64_t step = 1;     // 1-based: the bias corrections of this update
};

// The optimizer's state of one tensor, on the device it was created on (the parameter's, or the
// host's when offloaded). Tensors it does not use stay undefined.
struct OptimState {
  at::Tensor exp_avg, exp_avg_sq;  // adamw: float32, the tensor's shape
  at::Tensor momentum;             // sgd with momentum > 0: float32
  Adam8bitState q8;                // adamw8bit
  bool is_8bit = false;

  static OptimState create(const std::string& optimizer, double momentum, at::IntArrayRef shape,
                           c10::Device device);
  int64_t bytes() const;
  // Named for checkpoints: "<kind>.<name>" as the trainer has always written them
  // (exp_avg.NAME, exp_avg_sq.NAME, momentum.NAME), the 8-bit state under "adamw8bit.<part>.NAME".
  std::vector<std::pair<std::string, at::Tensor>> tensors(const std::string& name) const;
  // The same tensors back, from `get(key)` (undefined when absent); fails naming what is missing.
  void load(const std::string& name, const std::function<at::Tensor(const std::string&)>& get,
            const std::string& where);
};

// w -= update(g); w is float32 or the parameter's dtype, g any float dtype of w's shape.
void optim_update(at::Tensor& w, const at::Tensor& g, OptimState& s, const OptimHyper& h);

}  // namespace luatune
