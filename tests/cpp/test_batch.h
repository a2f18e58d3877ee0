// A training batch of random documents for the C++ units that train (test_train, test_qlora, test_distill).
#pragma once

#include <ATen/ATen.h>

#include "host/data/batch.h"

namespace luatune {

// `rows` rows of `len` random ids below `vocab`, each one document, every next token a target.
inline Batch random_batch(int64_t vocab, int64_t rows, int64_t len, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  Batch b;
  b.ids = at::randint(vocab, {rows, len}, gen, at::TensorOptions(at::kLong));
  b.targets = at::full({rows, len}, kIgnoreTarget, at::kLong);
  b.targets.narrow(1, 0, len - 1).copy_(b.ids.narrow(1, 1, len - 1));
  b.positions = at::arange(len, at::kLong).unsqueeze(0).repeat({rows, 1});
  b.segments = at::zeros({rows, len}, at::kLong);
  b.target_tokens = rows * (len - 1);
  b.tokens = rows * len;
  return b;
}

}  // namespace luatune
