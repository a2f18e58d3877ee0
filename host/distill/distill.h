// Knowledge distillation from a frozen teacher in the same process (../shared/reference/
// pruning_anchors.md section 5): logit losses (forward KL, reverse KL, generalised JSD) with a
// temperature, mixed with the LM loss; optional hidden-state losses (cosine or MSE, through a
// learned projection when widths differ). Plugs into the Trainer as a hook: micro-batch by micro-
// batch, the teacher runs without autograd (in its own dtype, on its own device), and logits exist
// only `chunk` rows at a time for teacher and student, forward and backward.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/train/trainer.h"

namespace luatune {

struct DistillOptions {
  std::string loss = "forward_kl";  // "forward_kl" KL(t||s), "reverse_kl" KL(s||t), "jsd"
  double temperature = 1.0;         // both sides' logits divided by T; the loss is multiplied by T^2
  double alpha = 0.5;               // total = (1 - alpha) * LM + alpha * KD (+ hidden term)
  double beta = 0.5;                // jsd: M = beta * p_t + (1 - beta) * p_s, beta KL(t||M) + (1-beta) KL(s||M)
  int64_t chunk = 1024;             // rows of logits (both models) materialised at once
  // Hidden-state loss between student layer outputs and teacher layer outputs (0-based layer
  // numbers, pairs (student, teacher)); a Linear(C_s -> C_t) projection, identity-initialised
  // when widths match and trained with the model's learning rate, maps the student's.
  std::vector<std::pair<int64_t, int64_t>> hidden_layers;
  std::string hidden_loss = "cosine";  // "cosine" (1 - cos per token) or "mse" (mean over channels)
  double hidden_weight = 1.0;
  uint64_t seed = 0;  // projection initialisation when widths differ
};

// Per-row divergence of the student from the teacher, (N, V) logits each -> (N) float32 (the
// reference the chunked path is tested against).
at::Tensor distill_divergence(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                              const DistillOptions& o);

// Sum over rows of distill_divergence(logits(student_hidden), logits(teacher_hidden)) * T^2, with
// logits = softcap(hidden @ weight^T) per side; only `o.chunk` rows of logits exist at a time in
// forward and backward. Differentiable in student_hidden and student_weight. teacher_* may live on
// another device or dtype: each chunk is moved to the student's device in float32.
at::Tensor distill_logit_loss(const at::Tensor& student_hidden, const at::Tensor& student_weight,
                              double student_softcap, const at::Tensor& teacher_hidden,
                              const at::Tensor& teacher_weight, double teacher_softcap, const DistillOptions& o);

class Distiller : public TrainerHook {
 public:
  // Freezes the teacher (requires_grad off). Fails naming the problem when vocabularies differ,
  // a hidden layer number is out of range, or an option is invalid.
  Distiller(std::shared_ptr<Model> teacher, const Model& student, DistillOptions options);
  const DistillOptions& options() const { return options_; }
  std::shared_ptr<Model> teacher() const { return teacher_; }

  // TrainerHook: training micro-batches get (1 - alpha) * ce_sum + alpha * KD sum + hidden term;
  // evaluation keeps the LM loss and reports kd_loss beside it. stats: lm_loss, kd_loss,
  // hidden_loss (means per target token since begin()).
  std::vector<ParamGroup> parameter_groups() override;
  void begin(bool training) override;
  void forward_options(ForwardOptions& fo, bool training) override;
  at::Tensor micro_loss(const MicroBatch& mb, const at::Tensor& ce_sum) override;
  std::vector<std::pair<std::string, double>> stats(bool training) override;

 private:
  std::shared_ptr<Model> teacher_;
  DistillOptions options_;
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace luatune
