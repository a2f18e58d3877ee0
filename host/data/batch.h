// A training batch as the data module hands it to the trainer: token ids, the next-token targets
// already shifted (so packing and padding never leak a target across documents), and the
// per-token positions and document ids that keep attention inside each packed document.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace luatune {

constexpr int64_t kIgnoreTarget = -100;  // a position with no target (prompt, padding, document end)

struct Batch {
  at::Tensor ids;        // (B, T) int64 token ids; padding holds the pad id (or 0)
  at::Tensor targets;    // (B, T) int64: the token position t must predict (ids[t+1] of the same
                         // document when it is trained on), else kIgnoreTarget
  at::Tensor positions;  // (B, T) int64 RoPE positions, restarting at 0 for every document
  at::Tensor segments;   // (B, T) int64 document index within the row; padding has its own index
  int64_t target_tokens = 0;  // number of targets != kIgnoreTarget (the loss is normalised by it)
  int64_t tokens = 0;         // number of non-padding tokens (for tokens/s)
};

}  // namespace luatune
