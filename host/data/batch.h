// A training batch as the data module hands it to the trainer: token ids, the next-token targets
// already shifted (so packing and padding never leak a target across documents), and the
// per-token positions and document ids that keep attention inside each packed document.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace luatune {

constexpr int64_t kIgnoreTarget = -100;  // a position with no target (prompt, padding, document end)

struct Batch {
  at::Tensor ids;             // (B, T) int64 token ids; padding holds the pad id (or 0)
  at::Tensor targets;         // (B, T) int64: the token position t must predict (ids[t+1] of the same
                              // document when it is trained on), else kIgnoreTarget
  at::Tensor positions;       // (B, T) int64 RoPE positions, restarting at 0 for every document
  at::Tensor segments;        // (B, T) int64 document index within the row; padding has its own index
  at::Tensor lengths;         // (B) int64 tokens of each row before its padding (undefined: unknown)
  int64_t target_tokens = 0;  // number of targets != kIgnoreTarget (the loss is normalised by it)
  int64_t tokens = 0;         // number of non-padding tokens (for tokens/s)
  // (B) int64: the dataset rows the batch was built from (Dataset::batch sets them; undefined for
  // batches made elsewhere). Cached per-row data is found by them (host/distill/teacher_cache.h).
  at::Tensor row_ids;
  // Preference batches (host/data/preference.h): rows 2i and 2i+1 are pair i's chosen and
  // rejected sequences; pair_ids (pairs) int64 names each pair by its record (line) in the source,
  // which keys cached reference log-probabilities. pairs = 0: not a preference batch.
  int64_t pairs = 0;
  at::Tensor pair_ids;
};

}  // namespace luatune
