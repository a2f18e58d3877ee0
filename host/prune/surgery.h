// Structured model surgery: removes whole layers, attention heads, MLP channels and hidden
// channels consistently everywhere they appear (embeddings, norms, every projection, the LM head,
// LoRA adapters), optionally folding soft mask values into the kept weights first, and rewrites
// the config so the result is an ordinary HF model of uniform per-layer shape.
//
// Grouped-query attention (docs/pruning.md): query heads are pruned inside their KV group and
// every kept group keeps the same number of query heads; a KV head (and its k/v rows) goes only
// when all its query heads go ("whole groups"). So a layer's kept query heads must cover the same
// number of groups with the same count per group, in every layer, and the new config has
// num_key_value_heads = groups kept, num_attention_heads = groups kept * heads per group.
// head_dim never changes (RoPE); it is written explicitly when it no longer equals hidden/heads.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "host/model/transformer.h"

namespace luatune {

struct ModelShape {
  int64_t layers = 0, heads = 0, kv_heads = 0, head_dim = 0, hidden = 0, intermediate = 0;
};
ModelShape model_shape(const ModelConfig& c);
std::string shape_string(
    const ModelShape& s);  // "layers 2, heads 4 (kv 2), head_dim 16, hidden 64, intermediate 128"

// What to keep, by original 0-based numbers (HF layer numbers, query head numbers, channels),
// each list strictly ascending. An empty list keeps everything of that kind.
struct PruneSpec {
  std::vector<int64_t> layers;                     // kept layers
  std::vector<std::vector<int64_t>> heads;         // per original layer: kept query heads
  std::vector<std::vector<int64_t>> intermediate;  // per original layer: kept MLP channels
  std::vector<int64_t> hidden;                     // kept hidden channels
  // Soft mask values folded into the kept weights before slicing (Sheared-LLaMA's finalisation),
  // float tensors on any device; undefined = 1. Folding follows StructureMasks exactly, so the
  // pruned model equals the masked model whose removed entries are 0 and kept entries these values.
  at::Tensor layer_scale;         // (L)
  at::Tensor head_scale;          // (L, H)
  at::Tensor intermediate_scale;  // (L, I)
  at::Tensor hidden_scale;        // (C)
};

// Checks `spec` against the model without changing anything: numbers in range and ascending,
// per-layer lists sized to the layer count, the same counts in every kept layer, the GQA rule
// above, at least one of everything kept, adapters that can be sliced (LoRA yes, DoRA no). Throws
// a one-line error naming the first problem ("prune: layer 3 keeps 3 query heads in group 1 and 2
// in group 0; every kept group must keep the same number").
void prune_check(const Model& model, const PruneSpec& spec);

// prune_check, then folds the scales and slices every weight and adapter in place; updates the
// config (layers, heads, kv heads, hidden, intermediate, head_dim explicit, per-layer sliding
// windows of the kept layers). Weights keep dtype, device and requires_grad. Returns the new shape.
ModelShape prune_apply(Model& model, const PruneSpec& spec);

// ---------------------------------------------------------------------------------------------
// Targets. Sparsities in [0, 1) per kind become kept counts, rounded as docs/pruning.md says:
//   layers: round(L * (1 - s)), at least 1;
//   hidden, intermediate: round(n * (1 - s)) to the nearest multiple of `round_to` when n is at
//     least 8 * round_to, else to the nearest integer; at least 1;
//   heads: with KV groups of g = H / KV query heads, per_group = round(g * (1 - s)); when that is
//     at least 1, every group stays and keeps per_group heads (H' = KV * per_group); when it is 0
//     (or the model is MHA, g = 1), whole groups go: KV' = round(KV * (1 - s)), at least 1.
struct TargetSparsity {
  double layers = 0, heads = 0, hidden = 0, intermediate = 0;
  int64_t round_to = 1;
};
struct TargetShape {
  ModelShape shape;           // the shape after pruning
  bool whole_groups = false;  // heads are pruned as whole KV groups
};
// Fails before any work, naming the bad target (sparsity outside [0, 1), not a number).
TargetShape prune_targets(const ModelConfig& c, const TargetSparsity& t);
// The same for explicit counts (Minitron's export config); fails when a count exceeds the model's
// or breaks the GQA rule.
TargetShape prune_targets_counts(const ModelConfig& c, const ModelShape& want);

// Scores per structure, higher = more important; undefined = keep all of that kind.
struct StructureScores {
  at::Tensor layer;         // (L)
  at::Tensor head;          // (L, H) per query head
  at::Tensor intermediate;  // (L, I)
  at::Tensor hidden;        // (C)
};
// The numbers of the k highest of `scores` (1-D, any device), ascending; ties go to the lower
// number, NaN counts as lowest.
std::vector<int64_t> prune_top_k(const at::Tensor& scores, int64_t k);

// The spec that keeps exactly `target`'s counts by score: top layers, top hidden channels, top MLP
// channels per layer, and per layer either the top `per_group` query heads inside every KV group
// or (whole_groups) the KV groups with the highest summed head score. Ties break to lower numbers.
PruneSpec prune_select(const ModelConfig& c, const StructureScores& scores, const TargetShape& target);

}  // namespace luatune
