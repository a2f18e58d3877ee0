// Unstructured and N:M sparsity of the decoder layers' linear weights: magnitude, Wanda and
// SparseGPT (docs/pruning.md, "Unstructured and N:M sparsity"; papers and code under "Sources").
// Weights are zeroed in place (SparseGPT also updates the kept ones); shapes do not change.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "host/data/batch.h"
#include "host/model/transformer.h"

namespace luatune {

struct SparsityOptions {
  std::string method = "wanda";  // "magnitude", "wanda", "sparsegpt"
  double sparsity = 0.5;         // fraction of weights zeroed, in [0, 1); ignored with n:m
  int64_t n = 0, m = 0;          // N:M: n zeros in every m consecutive inputs of a row (2:4, 4:8)
  int64_t blocksize = 128;       // SparseGPT column block
  double dampening = 0.01;       // SparseGPT: percdamp * mean(diag H) added to the diagonal
  // Linear names inside a layer ("q_proj" ... "down_proj"); empty = all seven.
  std::vector<std::string> targets;
};

struct LinearSparsity {
  std::string name;  // HF weight name, "model.layers.0.self_attn.q_proj.weight"
  int64_t zeros = 0, total = 0;
  double sparsity() const { return total ? static_cast<double>(zeros) / static_cast<double>(total) : 0; }
};

// Fails before any work when the options are invalid (sparsity outside [0, 1), n >= m, a pattern
// m that does not divide a layer's input width, unknown method or target, Wanda/SparseGPT without
// calibration batches, a model with adapters: merge first).
void sparsity_check(const Model& model, const SparsityOptions& o, bool have_calibration);

// Prunes layer by layer: calibration inputs of layer l are the outputs of the already pruned
// layers before it; statistics (Wanda: sum of x^2 per input channel; SparseGPT: H = 2/n X X^T in
// float32) come from ForwardOptions::observe at attn_in / attn_ctx / mlp_in / mlp_act. Magnitude
// needs no calibration. Returns the achieved sparsity of every pruned weight.
std::vector<LinearSparsity> prune_unstructured(Model& model, const std::vector<Batch>& calibration,
                                               const SparsityOptions& o);

// Zeros of every decoder-layer linear weight (what the model has now).
std::vector<LinearSparsity> measure_sparsity(const Model& model);

// ---- One weight, in place: what prune_unstructured applies to each targeted Linear -----------
// weight (out, in) in any float dtype; the work is done in float32 and written back in its dtype.
// These assume sparsity_check has passed (they check only shapes).

// Magnitude: the floor(out*in*sparsity) smallest |W| of the whole matrix (Wanda's magnitude
// baseline: one comparison group per weight matrix), or with n:m the n smallest |W| of every m
// consecutive inputs of each row.
void prune_weight_magnitude(at::Tensor& weight, const SparsityOptions& o);
// Wanda: score |W_ij| * sqrt(sum_sq_j), sum_sq (in) = sum of x_j^2 over the calibration tokens;
// per output row the floor(in*sparsity) lowest scores are zeroed (or n:m per group). No update.
void prune_weight_wanda(at::Tensor& weight, const at::Tensor& sum_sq, const SparsityOptions& o);
// SparseGPT: hessian (in, in) = 2/n X X^T in float32 (it is not modified). Dead inputs
// (diag 0) are zeroed, the damped inverse's upper Cholesky factor drives the OBS sweep over
// column blocks with an adaptive mask per block (or n:m every m columns) and lazy updates.
void prune_weight_sparsegpt(at::Tensor& weight, const at::Tensor& hessian, const SparsityOptions& o);

}  // namespace luatune
