// Knowledge distillation from a frozen teacher in the same process (docs/distill.md; the
// implementations compared under "Sources"): logit losses (forward KL, reverse KL, generalised JSD) with a
// temperature, mixed with the LM loss; optional hidden-state losses (cosine or MSE, through a
// learned projection when widths differ). Plugs into the Trainer as a hook: micro-batch by micro-
// batch, the teacher runs without autograd (in its own dtype, on its own device), and logits exist
// only `chunk` rows at a time for teacher and student, forward and backward.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/dist/frozen_shards.h"
#include "host/train/trainer.h"

namespace luatune {

struct DistillOptions {
  std::string loss = "forward_kl";  // "forward_kl" KL(t||s), "reverse_kl" KL(s||t), "jsd"
  double temperature = 1.0;         // both sides' logits divided by T; the loss is multiplied by T^2
  double alpha = 0.5;               // total = (1 - alpha) * LM + alpha * KD (+ hidden term)
  double beta = 0.5;     // jsd: M = beta * p_t + (1 - beta) * p_s, beta KL(t||M) + (1-beta) KL(s||M)
  int64_t chunk = 1024;  // rows of logits (both models) materialised at once
  // Hidden-state loss between student layer outputs and teacher layer outputs (0-based layer
  // numbers, pairs (student, teacher)). Per pair a float32 Linear(C_s -> C_t) without bias maps
  // the student's; identity-initialised when widths match, else uniform(+-1/sqrt(C_s)) from `seed`
  // (nn.Linear's default range); trained with the trainer's learning rate and clipped with it.
  std::vector<std::pair<int64_t, int64_t>> hidden_layers;
  std::string hidden_loss = "cosine";  // "cosine" (1 - cos per token) or "mse" (mean over channels)
  double hidden_weight = 1.0;
  uint64_t seed = 0;  // projection initialisation when widths differ
  // Data parallel: every rank keeps only 1/N of each teacher decoder layer's weights, and the
  // teacher's forward gathers one layer at a time (host/dist/frozen_shards.h): teacher memory
  // ~1/N plus a layer or two, for an all-gather of the layers per micro-batch. Embeddings, final
  // norm and LM head stay whole. No effect in one process (docs/distill.md, "Sharded teacher").
  bool shard_teacher = false;
};

// Per-row divergence of the student from the teacher: logits (..., V) each (any float dtype, the
// teacher's moved to the student's device) -> (...) float32. Both sides are divided by the
// temperature; there is no T^2 factor here (distill_logit_loss applies it). forward_kl is the true
// KL(p_t || p_s) = sum p_t (log p_t - log p_s), not the cross-entropy form. jsd follows TRL's
// generalized_jsd_loss: beta 0 is exactly forward_kl, beta 1 exactly reverse_kl, in between
// beta KL(p_t || M) + (1 - beta) KL(p_s || M) with M = beta p_t + (1 - beta) p_s. Differentiable
// through ordinary autograd (the reference the chunked path is tested against).
at::Tensor distill_divergence(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                              const DistillOptions& o);

// T^2 * sum over rows of distill_divergence(logits(student_hidden), logits(teacher_hidden)), with
// logits = softcap(hidden @ weight^T) per side (softcap 0 = off), as a float32 scalar. Hidden
// (N, C_s) and (N, C_t), weights (V, C_s) and (V, C_t). Only `o.chunk` rows of logits exist at a
// time: forward keeps nothing of them, backward recomputes both sides chunk by chunk and forms the
// gradient in closed form. Differentiable in student_hidden and student_weight. teacher_* may live
// on another device or dtype: each chunk of teacher logits moves to the student's device in float32.
at::Tensor distill_logit_loss(const at::Tensor& student_hidden, const at::Tensor& student_weight,
                              double student_softcap, const at::Tensor& teacher_hidden,
                              const at::Tensor& teacher_weight, double teacher_softcap,
                              const DistillOptions& o);

// log_softmax(softcap(h @ w^T) / T) in float32 on `dev` for one chunk of rows; *tanh_out (when given)
// gets tanh(z / softcap) for the softcap's derivative. Shared by the live and the cached teacher's KD.
at::Tensor distill_chunk_log_probs(const at::Tensor& h, const at::Tensor& w, double softcap,
                                   double temperature, c10::Device dev, at::Tensor* tanh_out);

// The backward shared by both KDs, of L = T^2 sum D(z / T) with z = softcap(h @ w^T): chunk by chunk
// of `chunk` rows, dD/da for a = z / T comes from chunk_grad(r0, n, ls), ls the chunk's student
// log-probs (it may reuse ls's storage); then dL/dz = T dD/da * grad_out, through the softcap, into
// dL/dh (h's dtype) and dL/dw (w's dtype), each only when wanted (else undefined).
std::pair<at::Tensor, at::Tensor> distill_chunked_backward(
    const at::Tensor& h, const at::Tensor& w, double softcap, double temperature, int64_t chunk,
    bool hidden_grad, bool weight_grad, const at::Tensor& grad_out,
    const std::function<at::Tensor(int64_t r0, int64_t n, at::Tensor& ls)>& chunk_grad);

class Distiller : public TrainerHook {
 public:
  // Freezes the teacher (requires_grad off, adapters included). Holds the student for its LM head
  // and sizes; it must be the model of the Trainer this hook is given to. Fails naming the problem
  // when vocabularies differ, a hidden layer number is out of range, an option is invalid, or the
  // teacher and the student are one model object.
  Distiller(std::shared_ptr<Model> teacher, std::shared_ptr<Model> student, DistillOptions options);
  const DistillOptions& options() const { return options_; }
  std::shared_ptr<Model> teacher() const { return teacher_; }

  // TrainerHook: training micro-batches get (1 - alpha) * ce_sum + alpha * KD sum + hidden term;
  // evaluation keeps the LM loss and reports kd_loss beside it. stats: lm_loss, kd_loss (with
  // T^2), hidden_loss (unweighted, summed over pairs; only with hidden_layers), each a mean per
  // target token since begin(), over every data-parallel rank (stats() is collective). alpha 0
  // without hidden_layers leaves the LM step untouched (the KD term is computed without autograd,
  // for the statistics only).
  std::vector<ParamGroup> parameter_groups() override;
  void begin(bool training) override;
  void forward_options(ForwardOptions& fo, bool training) override;
  at::Tensor micro_loss(const MicroBatch& mb, const at::Tensor& ce_sum) override;
  bool uses_lm_loss_gradient() const override { return options_.alpha < 1; }  // alpha 1: KD alone
  std::vector<std::pair<std::string, double>> stats(bool training) override;
  // A sharded teacher gathers its layers in every micro-batch: ranks must run the same number.
  bool collective_micro_batches() const override { return shards_ != nullptr; }
  void empty_micro_batch(bool training) override;

  bool teacher_sharded() const { return shards_ != nullptr; }
  // The teacher's decoder-layer weights this rank holds, and an unsharded copy's (equal when whole).
  FrozenShardsMemory teacher_memory() const;

 private:
  std::shared_ptr<Model> teacher_, student_;
  DistillOptions options_;
  std::shared_ptr<FrozenShards> shards_;  // shard_teacher with more than one rank, else null
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace luatune
