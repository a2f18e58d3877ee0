// Importance scores for structured pruning, turned into kept structures by prune_select
// (surgery.h). Facts: docs/pruning.md, "Minitron width and depth", "LLM-Pruner Taylor importance"
// and "Depth pruning" (Block Influence); papers and code under "Sources".
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "host/data/batch.h"
#include "host/prune/surgery.h"

namespace luatune {

// Minitron's activation importance from forward passes over `calibration` (no gradients, float32
// accumulators; aggregation: mean of |activation| over the sequence, L2 over samples):
//   hidden: summed over every layer's attention and MLP norm outputs (attn_in, mlp_in);
//   head: the L2 norm over head_dim of the o_proj input (attn_ctx) per query head;
//   intermediate: the down_proj input (mlp_act).
// layer is filled too, with block influence (below).
StructureScores activation_importance(Model& model, const std::vector<Batch>& calibration);

// Block influence per layer: mean over target tokens of 1 - cos(layer input, layer output) (ShortGPT,
// Minitron depth); higher = more important.
at::Tensor block_influence(Model& model, const std::vector<Batch>& calibration);

// Perplexity-drop depth importance: the calibration loss with each layer skipped minus the full
// model's (higher = more important).
at::Tensor layer_removal_loss(Model& model, const std::vector<Batch>& calibration);

// LLM-Pruner's first-order Taylor importance of coupled groups from one backward pass of the LM
// loss per batch: per weight |w * dL/dw| ("param_first", default), (w * dL/dw)^2 / 2 summed with
// the first-order term per LLM-Pruner's param_mix is not offered; "vector" is |sum(w * g)| over
// each group member. Group = every weight that moves with the structure: head h (q rows of h,
// o_proj columns of h; k/v rows count toward whole groups), MLP channel j (gate/up rows j,
// down column j), hidden channel c (embedding column, every norm entry, q/k/v/gate/up columns,
// o/down rows, lm_head column); summed over members. layer = sum over its weights.
StructureScores taylor_importance(Model& model, const std::vector<Batch>& calibration,
                                  const std::string& variant = "param_first");

}  // namespace luatune
