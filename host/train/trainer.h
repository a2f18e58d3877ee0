// The trainer: one optimizer step per call on a Batch (split into micro-batches whose loss is
// normalised by the whole batch's target tokens, so accumulation equals the large batch), AdamW or
// SGD, warmup + constant/linear/cosine schedules, gradient clipping, fp32 master weights for
// bf16/f16 models, per-layer activation checkpointing, fused chunked cross-entropy, evaluation, and
// atomic checkpoints that resume exactly (weights, optimizer, schedule position, RNG, step).
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/data/batch.h"
#include "host/dist/zero.h"
#include "host/model/transformer.h"
#include "host/train/optim.h"
#include "host/train/profiler.h"

namespace luatune {

class GradSync;             // host/dist/grad_sync.h
struct RunInfo;             // host/train/run_dir.h
enum class OutputDirScope;  // host/train/run_dir.h

class Dataset;
class PreferenceDataset;  // host/data/preference.h

// Extends a Trainer without touching its loop: extra trainable tensors with their own learning
// rates (pruning masks, Lagrange multipliers, distillation projections), forward options per
// micro-batch (structure masks, observers), a replacement micro-batch loss (distillation), extra
// gradients once per step (constraint terms), and statistics for the step's report.
struct ParamGroup {
  std::vector<std::pair<std::string, at::Tensor*>> params;  // names must not clash with the model's
  double lr = 0;  // absolute learning rate at full schedule (negative: gradient ascent; 0: the trainer's lr)
  bool follow_schedule = true;  // scaled by the trainer's warmup/decay factor (lr_at(step) / lr)
  double weight_decay = 0;
  bool clip = false;  // included in the trainer's gradient-norm clipping
};

// What a hook sees of one micro-batch: its rows on the model's device and the rows that have a
// target. hidden is the student's final-norm output for the kept rows, (N, C); hidden_all the
// same for every position, (n, T, C). The micro-batch is rows [row_begin, row_begin + n) of *batch.
struct MicroBatch {
  const Batch* batch = nullptr;
  int64_t row_begin = 0;
  at::Tensor hidden_all;  // (n, T, C)
  at::Tensor ids;         // (n, T)
  at::Tensor positions;   // (n, T) or undefined
  at::Tensor segments;    // (n, T) or undefined
  at::Tensor keep;        // (N) flat row indices (into n*T) that have a target
  at::Tensor targets;     // (N) the kept targets
  at::Tensor hidden;      // (N, C)
  bool training = false;
};

class TrainerHook {
 public:
  virtual ~TrainerHook() = default;
  virtual std::vector<ParamGroup> parameter_groups() { return {}; }
  // Once per step (training) or per evaluation, before any micro-batch.
  virtual void begin(bool training) {}
  // Per micro-batch, before the model's forward.
  virtual void forward_options(ForwardOptions& fo, bool training) {}
  // The micro-batch's loss as a SUM over its kept rows (the trainer divides by the batch's target
  // tokens, or by loss_units), given the default cross-entropy sum `ce_sum`; return undefined to
  // keep ce_sum.
  virtual at::Tensor micro_loss(const MicroBatch& mb, const at::Tensor& ce_sum) { return {}; }
  // True when micro_loss computes the whole loss itself (preference and reward losses): the
  // trainer then skips the LM cross-entropy and passes an undefined ce_sum.
  virtual bool replaces_lm_loss() const { return false; }
  // False when micro_loss never lets ce_sum's gradient reach the loss (distillation with alpha 1):
  // the trainer then computes ce_sum without autograd, skipping the fused loss's gradient matmuls.
  virtual bool uses_lm_loss_gradient() const { return true; }
  // What the step's summed micro losses are divided by, e.g. the batch's pairs for a loss per
  // preference pair; negative (the default) keeps the batch's target tokens. Summed over ranks.
  virtual int64_t loss_units(const Batch& batch) const { return -1; }
  // After every micro-batch's backward, before clipping and the optimizer (training only).
  virtual void after_backward() {}
  // After the optimizer update of step `step` (training only); also once by resume() with the
  // restored step, so hooks that depend on the step count (warm-ups) continue where they were.
  virtual void after_step(int64_t step) {}
  // Extra numbers for the step's or evaluation's report, e.g. {"kd_loss", 0.7}.
  virtual std::vector<std::pair<std::string, double>> stats(bool training) { return {}; }
  // True when micro_loss makes collectives (a sharded teacher's layer gathers): the trainer then
  // runs as many micro-batch slots on every rank (in a step, in a batch's loss, in an evaluation),
  // and for a slot this rank has no rows or no targets for calls empty_micro_batch, at the point
  // where micro_loss would run, so that every rank makes the same collectives in the same order.
  virtual bool collective_micro_batches() const { return false; }
  virtual void empty_micro_batch(bool training) {}
};

// Whether the model parameter `name` takes weight decay: transformers' Trainer groups
// (get_decay_parameter_names): no name containing "bias", "layernorm" or "rmsnorm", a ".norm." /
// "norm." path part or a "_norm." suffix (lower-cased), so biases and every norm weight are left
// out; embeddings, projections and adapters decay. Hook parameters keep their own group's decay.
bool train_decays(const std::string& name);

// train.new's options, under its (the recipes' Hugging Face) names.
struct TrainOptions {
  std::string optimizer = "adamw";  // "adamw", "adamw8bit" (bitsandbytes' blockwise 8-bit states) or "sgd"
  double learning_rate = 2e-5;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;            // sgd
  std::string schedule = "cosine";  // "constant", "linear", "cosine" (after linear warmup)
  int64_t warmup_steps = 0;         // steps of linear warmup from 0
  int64_t max_steps = 0;            // total steps (linear/cosine decay to min_lr_ratio * learning_rate)
  double min_lr_ratio = 0.0;
  int64_t batch_size = 0;      // rows per forward/backward (the micro-batch); 0 = the whole batch at once
  double max_grad_norm = 1.0;  // 0 = no clipping
  bool master_weights = true;  // fp32 master copies of bf16/f16 trainable weights
  bool gradient_checkpointing = false;  // recompute each layer in backward instead of storing activations
  int64_t loss_chunk = 4096;            // rows of logits materialised at once by the cross-entropy
  std::string output_dir;               // checkpoints go to output_dir/checkpoints/step-NNNNNNN
  int64_t save_steps = 0;               // 0 = only when save() is called
  int64_t keep_last = 2;                // checkpoints kept (older ones are deleted)
  // ZeRO over the data-parallel ranks (host/dist/zero.h): "none", "optimizer", "gradients", "full"
  // (or FSDP's NO_SHARD / SHARD_GRAD_OP / FULL_SHARD). "full" recomputes layers (gradient_checkpointing).
  std::string shard = "none";
  std::string optimizer_offload = "none";  // "cpu": masters and optimizer states in host memory
  // The output directory contract (host/train/run_dir.h): a fresh run into a directory holding
  // another run's run.json or checkpoints fails unless overwrite, which moves that run aside first.
  bool overwrite = false;
  std::string config_json;  // the recipe's resolved config (JSON), kept in checkpoints for resume's diff
  // A Kineto trace of profile.steps steps after profile.skip warm-up ones, written to profile.dir
  // with a summary (host/train/profiler.h, docs/profiling.md); dir "" = off. Rank 0 only.
  ProfileOptions profile;
};

// Bytes of training state this rank holds, and what an unsharded replica holds (trainer:memory()):
// the sharded parameters' figures plus the replicated ones'.
using TrainMemory = ZeroMemory;

struct StepStats {
  double loss = 0;       // mean cross-entropy per target token of this batch
  double lr = 0;         // learning rate used by this step
  double grad_norm = 0;  // total gradient norm before clipping
  int64_t tokens = 0, target_tokens = 0;
  double step_time = 0;  // seconds
  double tokens_per_s = 0;
  double peak_memory_gb = 0;  // CUDA: peak allocated since the previous step; 0 on CPU
  std::vector<std::pair<std::string, double>> extra;  // from hooks
};

struct EvalStats {
  double loss = 0, perplexity = 0;  // perplexity 0 when the loss is not per token (loss_units)
  int64_t target_tokens = 0;
  std::vector<std::pair<std::string, double>> extra;  // from hooks
};

class Trainer {
 public:
  Trainer(std::shared_ptr<Model> model, TrainOptions options,
          std::vector<std::shared_ptr<TrainerHook>> hooks = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;
  StepStats step(const Batch& batch);
  // step() in two halves: launch_step queues the step's work on the device (forward, backward,
  // clipping, update) without the host waiting for it; finish_step reads the loss and norm back
  // (the step's one wait) and does the rest. For tests that check the first half never waits.
  struct PendingStep {
    StepStats stats;                 // lr set; the rest filled by finish_step
    at::Tensor loss_sum, grad_norm;  // device scalars
    int64_t count = 0, global_targets = 0, tokens = 0;
    double t0 = 0;
  };
  PendingStep launch_step(const Batch& batch);
  StepStats finish_step(const PendingStep& pending);
  EvalStats evaluate(const std::vector<Batch>& batches);
  // Mean loss over a dataset's rows in order, `batch_size` rows at a time (at most max_batches
  // batches when > 0), one batch in memory at a time.
  EvalStats evaluate(const Dataset& data, int64_t batch_size, int64_t max_batches = 0);
  // The same over preference pairs, `batch_size` pairs at a time.
  EvalStats evaluate(const PreferenceDataset& data, int64_t batch_size, int64_t max_batches = 0);
  // Writes a checkpoint of the current state to output_dir/checkpoints/step-N (atomically, also
  // when it replaces one) and deletes this run's checkpoints beyond keep_last; returns its path.
  // A step already saved is not written again.
  std::string save();
  // Loads the newest complete checkpoint under output_dir/checkpoints (or the given checkpoint
  // dir; an incomplete newest one is skipped with a warning) and returns its step, or 0 when there
  // is none. Prints "resumed from step N of M (checkpoint PATH)" and warns for each config key
  // that differs from the checkpointed run's.
  int64_t resume(const std::string& checkpoint_dir = "");
  // The stop protocol (host/train/stop.h): save_steps' checkpoint is written at the next safe
  // point, after the step's metrics are logged, so a checkpoint never runs ahead of the logs.
  bool mid_step() const { return mid_step_; }  // a step returned and no safe point since
  void reach_safe_point();                     // writes the deferred checkpoint, if any
  std::string save_unsaved();                  // save() when there is output_dir and an unsaved step; else ""
  int64_t step_count() const { return step_; }
  double lr_at(int64_t step) const;  // learning rate of step `step` (1-based)
  const TrainOptions& options() const { return options_; }
  TrainMemory memory();
  Model& model() { return *model_; }
  const std::vector<std::shared_ptr<TrainerHook>>& hooks() const { return hooks_; }
  // (trainable parameter name, tensor) in optimizer order: the model's, then the hooks' groups
  const std::vector<std::pair<std::string, at::Tensor*>>& parameters() const { return params_; }
  // The loss of one batch without updating anything (sum over target tokens and their count).
  std::pair<double, int64_t> batch_loss(const Batch& batch, bool backward, int64_t normaliser);
  // What this batch's loss is a mean over: a hook's loss_units, else its target tokens.
  int64_t loss_units(const Batch& batch) const;

 private:
  StepStats run_step(const Batch& batch);  // step()'s work, inside its profiler range
  void optimizer_update(double scheduled_lr, const at::Tensor& skip);
  void ensure_state();
  EvalStats with_hook_stats(EvalStats e);
  // Evaluation over `n` items (rows or pairs) in order, `batch_size` at a time, data-parallel ranks
  // taking every N-th batch; make(items) builds a batch.
  EvalStats evaluate_items(int64_t n, int64_t batch_size, int64_t max_batches,
                           const std::function<Batch(const std::vector<int64_t>&)>& make);
  bool hooks_replace_lm_loss() const;
  bool hooks_collective() const;  // a hook whose micro-batches make collectives
  at::Tensor clip_gradients();
  // batch_loss's work, the sum left on the device (read once per step, after the update is queued).
  std::pair<at::Tensor, int64_t> batch_loss_device(const Batch& batch, bool backward, int64_t normaliser);

  std::shared_ptr<Model> model_;
  TrainOptions options_;
  std::vector<std::shared_ptr<TrainerHook>> hooks_;
  std::vector<std::pair<std::string, at::Tensor*>> params_;
  // Per parameter, from its group: absolute lr at full schedule, decay, scheduled?, clipped?
  struct Setting {
    double lr, weight_decay;
    bool follow_schedule, clip;
  };
  std::vector<Setting> settings_;
  OptimHyper hyper_;                // optimizer, betas, eps, momentum (lr, decay and step set per update)
  std::vector<at::Tensor> master_;  // per parameter (undefined when unused; on the host when offloaded)
  std::vector<OptimState> opt_;     // per parameter
  bool state_ready_ = false;
  // ZeRO: the model's trainable parameters (params_[0, first_local_)) live as shards there; the
  // hooks' (pruning masks, multipliers: small) stay replicated and use the plain path.
  std::shared_ptr<ZeroShards> zero_;
  size_t first_local_ = 0;
  std::string save_replicated();
  void load_checkpoint(const std::string& dir, const nlohmann::json& meta);
  std::string save_sharded();
  std::vector<std::pair<std::string, at::Tensor>> local_state(bool replicated) const;
  using TensorGetter = std::function<at::Tensor(const std::string&)>;  // undefined when absent
  // What local_state wrote back: the replicated parameters (from get_params) and the generators.
  void load_local_state(const TensorGetter& get_params, const std::string& params_file,
                        const TensorGetter& get_rng);
  void publish_checkpoint(const std::string& tmp, const std::string& final_dir);
  int64_t step_ = 0;
  // Checkpoints and the output directory: the run this trainer's checkpoints belong to (set by a
  // fresh claim or adopted by resume), the last step saved and its path, a save deferred to the
  // next safe point.
  void claim_output_dir(OutputDirScope scope);
  RunInfo run_info(const std::string& run_id) const;
  bool claimed_ = false;
  std::string run_id_;
  int64_t saved_step_ = -1;
  std::string saved_path_;
  bool save_due_ = false;
  bool mid_step_ = false;
  // Data parallel (host/dist): the gradient all-reduce, set when the process is one of several.
  std::shared_ptr<GradSync> sync_;
  std::unique_ptr<StepProfiler> profiler_;  // set when options_.profile.dir is set (rank 0)
};

}  // namespace luatune
