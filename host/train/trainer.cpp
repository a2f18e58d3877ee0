// Trainer step, optimizer, schedule and checkpoints. Why the loss is normalised the way it is: each
// micro-batch contributes (sum of its token losses) / (target tokens of the whole batch), so the
// accumulated gradient is exactly the gradient of the whole batch's mean token loss, however the
// rows are split (the failure users report elsewhere: averaging per micro-batch means).
#include "host/train/trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <unistd.h>

#include "host/core/device.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/core/strings.h"
#include "host/data/dataset.h"
#include "host/data/preference.h"
#include "host/dist/dist.h"
#include "host/dist/grad_sync.h"
#include "host/dist/zero.h"
#include "host/io/safetensors.h"
#include "host/train/fused_adamw.h"
#include "host/train/loss.h"
#include "host/train/recompute.h"
#include "host/train/run_dir.h"
#include "host/train/stop.h"

#ifdef LUATUNE_HAS_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace luatune {

bool train_decays(const std::string& name) {
  std::string n = name;
  for (char& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* part : {"bias", "layernorm", "rmsnorm"})
    if (n.find(part) != std::string::npos) return false;
  // "norm" as a whole path part, or "_norm" ending one (transformers' (?:^|\.)norm(?:$|\.) and
  // _norm(?:$|\.)).
  for (size_t at = n.find("norm"); at != std::string::npos; at = n.find("norm", at + 1)) {
    const bool ends = at + 4 == n.size() || n[at + 4] == '.';
    if (ends && (at == 0 || n[at - 1] == '.' || n[at - 1] == '_')) return false;
  }
  return true;
}

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A batch tensor on the model's device. From the host to a GPU through pinned memory and an
// asynchronous copy: a copy from pageable memory makes the host wait for the GPU (docs/profiling.md,
// "A step without host synchronisation"); the caching host allocator keeps the pinned buffer until
// the copy has run.
at::Tensor to_device(const at::Tensor& t, const c10::Device& dev) {
  if (t.device() == dev) return t;
  if (dev.is_cuda() && t.device().is_cpu())
    return t.pin_memory().to(at::TensorOptions().device(dev), /*non_blocking=*/true);
  return t.to(dev);
}

// The positions of targets other than kIgnoreTarget, as int64 on the host: nonzero() of a host tensor,
// read directly (an aten::nonzero would count as a GPU wait in bench/step_ops.sh's CPU proxy).
at::Tensor target_positions(const at::Tensor& targets) {
  if (!targets.device().is_cpu()) return targets.ne(kIgnoreTarget).nonzero().squeeze(1);  // costs a wait
  const at::Tensor t = targets.to(at::kLong).contiguous();
  const int64_t* p = t.data_ptr<int64_t>();
  std::vector<int64_t> keep;
  keep.reserve(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); i++)
    if (p[i] != kIgnoreTarget) keep.push_back(i);
  return at::tensor(keep, at::TensorOptions(at::kLong));
}

bool is_low_precision(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf;
}

}  // namespace

Trainer::Trainer(std::shared_ptr<Model> model, TrainOptions options,
                 std::vector<std::shared_ptr<TrainerHook>> hooks)
    : model_(std::move(model)), options_(options), hooks_(std::move(hooks)) {
  const TrainOptions& o = options_;
  LT_CHECK(o.optimizer == "adamw" || o.optimizer == "adamw8bit" || o.optimizer == "sgd",
           "train.new: optimizer must be \"adamw\", \"adamw8bit\" or \"sgd\", got \"" << o.optimizer << "\"");
  LT_CHECK(o.optimizer_offload == "none" || o.optimizer_offload == "cpu",
           "train.new: optimizer_offload must be \"none\" or \"cpu\", got \"" << o.optimizer_offload << "\"");
  const ShardStage stage = shard_stage_parse(o.shard);
  options_.shard = shard_stage_name(stage);
  LT_CHECK(
      o.schedule == "constant" || o.schedule == "linear" || o.schedule == "cosine",
      "train.new: schedule must be \"constant\", \"linear\" or \"cosine\", got \"" << o.schedule << "\"");
  LT_CHECK(o.schedule == "constant" || o.max_steps > 0,
           "train.new: schedule \"" << o.schedule << "\" needs max_steps > 0");
  LT_CHECK(o.learning_rate > 0, "train.new: learning_rate must be positive");
  LT_CHECK(o.loss_chunk > 0, "train.new: loss_chunk must be positive");
  params_ = model_->trainable_parameters();  // whole again if an earlier ZeRO-3 trainer sharded them
  model_->residency.reset();                 // that trainer's slices are stale from here on
  LT_CHECK(!params_.empty(), "train.new: the model has no trainable parameters");
  const size_t model_params = params_.size();
  // The model's weights: the trainer's lr and decay, scheduled and clipped.
  settings_.assign(params_.size(), Setting{o.learning_rate, o.weight_decay, true, true});
  for (size_t i = 0; i < params_.size(); i++)
    if (!train_decays(params_[i].first)) settings_[i].weight_decay = 0;
  std::set<std::string> names;
  for (auto& [name, p] : params_) names.insert(name);
  for (auto& hook : hooks_) {
    LT_CHECK(hook != nullptr, "train.new: a hook is nil");
    for (ParamGroup& g : hook->parameter_groups())
      for (auto& [name, p] : g.params) {
        LT_CHECK(names.insert(name).second, "train.new: two trainable tensors are both named " << name);
        LT_CHECK(p && p->defined() && p->is_floating_point(),
                 "train.new: hook parameter " << name << " is not a float tensor");
        params_.emplace_back(name, p);
        settings_.push_back(
            Setting{g.lr == 0 ? o.learning_rate : g.lr, g.weight_decay, g.follow_schedule, g.clip});
      }
  }
  if (dist_active()) {
    // Data parallel: every rank starts from rank 0's trainable weights (frozen ones come from the
    // same files), and their gradients are summed across ranks each step.
    at::NoGradGuard no_grad;
    for (auto& [name, p] : params_) {
      at::Tensor t = p->detach();
      dist_broadcast_(t, 0);
    }
  }
  // What ZeRO shards: the model's own trainable weights. Adapters (LoRA, DoRA, adaption prompts)
  // stay replicated like the hooks' tensors: at their size a bucketed all-reduce beats per-layer
  // gathers and reduce-scatters (bench/zero_scaling.sh: replicated 1.16x the tokens/s of sharded),
  // and their optimizer state is a few hundred MB even for an 8B model.
  hyper_.optimizer = o.optimizer;
  hyper_.beta1 = o.beta1;
  hyper_.beta2 = o.beta2;
  hyper_.eps = o.eps;
  hyper_.momentum = o.momentum;
  const size_t base_params = model_params - model_->adapter_parameters().size();
  if (stage != ShardStage::none && base_params > 0) {
    // ZeRO-3 frees a layer's weights after its forward: its backward needs them gathered again,
    // which the recomputed layer does (activation checkpointing is part of the stage).
    if (stage == ShardStage::full) options_.gradient_checkpointing = true;
    ZeroOptions z;
    z.stage = stage;
    z.hyper = hyper_;
    z.master_weights = o.master_weights;
    z.offload = o.optimizer_offload == "cpu";
    z.recompute = options_.gradient_checkpointing;
    z.decays = train_decays;
    std::vector<std::pair<std::string, at::Tensor*>> mine(params_.begin(), params_.begin() + base_params);
    zero_ = std::make_shared<ZeroShards>(mine, static_cast<int64_t>(model_->layers.size()), z);
    model_->residency = zero_;
    first_local_ = base_params;
  }
  if (dist_active() && first_local_ < params_.size()) {
    std::vector<at::Tensor*> ptrs;  // the replicated ones: summed across ranks each step
    for (size_t i = first_local_; i < params_.size(); i++) ptrs.push_back(params_[i].second);
    sync_ = std::make_shared<GradSync>(ptrs);
  }
  if (!o.profile.dir.empty() && dist_is_main())
    profiler_ = std::make_unique<StepProfiler>(o.profile, model_->device().is_cuda());
  // The recipe's config{} may have claimed the output directory already (before it wrote there).
  if (!options_.output_dir.empty()) claimed_ = output_dir_owner(options_.output_dir, &run_id_);
  stop_register(this);
}

Trainer::~Trainer() {
  stop_unregister(this);
}

// Optimizer state (fp32 master copies, moments) is allocated on the first update or resume, so a
// Trainer used only to evaluate costs no memory beyond the model.
void Trainer::ensure_state() {
  if (state_ready_) return;
  const TrainOptions& o = options_;
  const bool offload = o.optimizer_offload == "cpu";
  master_.assign(params_.size(), at::Tensor());
  opt_.assign(params_.size(), OptimState());
  for (size_t i = first_local_; i < params_.size(); i++) {  // the sharded ones keep theirs in zero_
    const at::Tensor& p = *params_[i].second;
    // Offloaded: every parameter has a host copy that the update runs on (float32 for bf16/f16).
    if (o.master_weights && is_low_precision(p))
      master_[i] = p.detach().to(offload ? c10::Device(c10::kCPU) : p.device(), at::kFloat).clone();
    else if (offload)
      master_[i] = p.detach().to(c10::Device(c10::kCPU)).clone();
    opt_[i] =
        OptimState::create(o.optimizer, o.momentum, p.sizes(), offload ? c10::Device(c10::kCPU) : p.device());
  }
  state_ready_ = true;
}

double Trainer::lr_at(int64_t step) const {
  const TrainOptions& o = options_;
  if (o.warmup_steps > 0 && step <= o.warmup_steps)
    return o.learning_rate * static_cast<double>(step) / static_cast<double>(o.warmup_steps);
  if (o.schedule == "constant") return o.learning_rate;
  double span = static_cast<double>(std::max<int64_t>(1, o.max_steps - o.warmup_steps));
  double progress = std::min(1.0, static_cast<double>(step - o.warmup_steps) / span);
  double floor = o.min_lr_ratio * o.learning_rate;
  if (o.schedule == "linear") return floor + (o.learning_rate - floor) * (1.0 - progress);
  return floor + (o.learning_rate - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

std::pair<double, int64_t> Trainer::batch_loss(const Batch& batch, bool backward, int64_t normaliser) {
  auto [sum, count] = batch_loss_device(batch, backward, normaliser);
  return {sum.item<double>(), count};
}

std::pair<at::Tensor, int64_t> Trainer::batch_loss_device(const Batch& batch, bool backward,
                                                          int64_t normaliser) {
  LT_CHECK(batch.ids.defined() && batch.ids.dim() == 2, "train: a batch needs ids of shape (rows, length)");
  const int64_t rows = batch.ids.size(0);
  const int64_t micro = options_.batch_size > 0 ? options_.batch_size : rows;
  const c10::Device dev = model_->device();
  const bool training = backward;
  at::Tensor total =
      at::zeros({}, at::TensorOptions(at::kDouble).device(dev));  // read once, not per micro-batch
  int64_t count = 0;
  // A preference pair's loss needs both of its rows in one forward: micro-batches of whole pairs.
  LT_CHECK(batch.pairs == 0 || micro % 2 == 0,
           "train: batch_size "
               << micro << " would split a preference pair (chosen and rejected rows); use an even number");
  const bool lm_loss = !hooks_replace_lm_loss();
  bool lm_grad = backward;
  for (const auto& hook : hooks_) lm_grad = lm_grad && hook->uses_lm_loss_gradient();
  // ZeRO-2/3 communicate inside every micro-batch: a rank with fewer micro-batches (or rows
  // without targets) makes the same collectives with nothing to add.
  const bool zero_slots = zero_ && backward && zero_->stage() >= ShardStage::gradients;
  const bool zero_layers =
      zero_ && backward && options_.gradient_checkpointing && zero_->stage() >= ShardStage::gradients;
  // So do hooks whose losses gather (a sharded teacher), in training and evaluation alike.
  const bool hook_slots = hooks_collective();
  const int64_t my_slots = rows > 0 ? (rows + micro - 1) / micro : 0;
  const int64_t all_slots = zero_slots || hook_slots ? dist_max(my_slots) : my_slots;
  // A slot without rows or targets: a real one's collectives in a real one's order (the model's
  // forward gathers, the hooks' losses, the backward's).
  auto empty_slot = [&] {
    auto hooks_empty = [&] {
      for (auto& hook : hooks_) hook->empty_micro_batch(training);
    };
    if (zero_slots) {
      zero_->empty_micro_batch(hooks_empty);
    } else {
      hooks_empty();
    }
  };
  for (int64_t r0 = 0; r0 < rows; r0 += micro) {
    int64_t n = std::min(micro, rows - r0);
    at::Tensor ids = to_device(batch.ids.narrow(0, r0, n), dev);
    at::Tensor host_targets = batch.targets.narrow(0, r0, n).reshape({-1});
    at::Tensor targets = to_device(host_targets, dev);
    ForwardOptions fo;  // fresh per micro-batch: hooks set their fields on a clean one
    if (zero_layers) {
      ZeroShards* z = zero_.get();
      fo.run_layer = [z](int64_t l, const LayerFn& fn, const at::Tensor& x) {
        return z->run_layer(l, fn, x, true);
      };
      fo.run_layer_gathers = true;
    } else if (options_.gradient_checkpointing && backward) {
      fo.run_layer = [](int64_t, const LayerFn& fn, const at::Tensor& x) { return recompute_forward(fn, x); };
    }
    fo.positions =
        batch.positions.defined() ? to_device(batch.positions.narrow(0, r0, n), dev) : at::Tensor();
    fo.segments = batch.segments.defined() ? to_device(batch.segments.narrow(0, r0, n), dev) : at::Tensor();
    // The positions with a target, found where the targets are: a batch from the data is on the
    // host, where nonzero() costs no wait for the GPU (on the GPU it would: its size is data).
    at::Tensor keep = to_device(target_positions(host_targets), dev);
    if (keep.numel() == 0) {  // nothing to learn in these rows
      empty_slot();
      continue;
    }
    for (auto& hook : hooks_) hook->forward_options(fo, training);
    // A range per decoder layer ("layer L"), also around its recomputation in backward. Not when an
    // observer needs the in-layer sites, which a set run_layer would hide.
    if (profile_ranges_on() && (fo.run_layer || !fo.observe)) {
      auto inner = fo.run_layer;
      fo.run_layer = [inner](int64_t l, const LayerFn& fn, const at::Tensor& x) {
        LayerFn named = [l, fn](const at::Tensor& y) {
          ProfileRange range("layer " + std::to_string(l));
          return fn(y);
        };
        return inner ? inner(l, named, x) : named(x);
      };
    }
    std::optional<ProfileRange> forward_range;
    if (profile_ranges_on()) forward_range.emplace("forward");
    at::Tensor h_all = model_->hidden(ids, fo);
    at::Tensor h = h_all.reshape({-1, h_all.size(-1)}).index_select(0, keep);
    at::Tensor kept_targets = targets.index_select(0, keep);
    at::Tensor loss;
    if (lm_loss) {
      // The fused loss forms its gradients in this forward; without a use for them, plain forward.
      std::optional<at::NoGradGuard> no_grad;
      if (!lm_grad) no_grad.emplace();
      loss = chunked_cross_entropy(h, model_->output_weight(), kept_targets, options_.loss_chunk,
                                   model_->config.final_logit_softcap);
    }
    if (!hooks_.empty()) {
      MicroBatch mb{&batch, r0, h_all, ids, fo.positions, fo.segments, keep, kept_targets, h, training};
      for (auto& hook : hooks_)
        if (at::Tensor replaced = hook->micro_loss(mb, loss); replaced.defined()) loss = replaced;
    }
    LT_ASSERT(loss.defined(), "a hook replaced the LM loss but returned none");
    forward_range.reset();
    // The step's last backward: sum as grads land. Only in the last slot of all ranks: a rank with
    // fewer runs its empty slots' collectives first, and sums everything in sync_->finish().
    if (backward && sync_ && r0 + micro >= rows && my_slots == all_slots) sync_->arm();
    if (backward) {
      ProfileRange range("backward");
      (loss / static_cast<double>(normaliser)).backward();
    }
    if (zero_slots) zero_->end_micro_batch();
    total += loss.detach();
    count += keep.numel();
  }
  for (int64_t i = my_slots; i < all_slots; i++) empty_slot();
  return {total, count};
}

bool Trainer::hooks_collective() const {
  for (const auto& hook : hooks_)
    if (hook->collective_micro_batches()) return true;
  return false;
}

bool Trainer::hooks_replace_lm_loss() const {
  for (const auto& hook : hooks_)
    if (hook->replaces_lm_loss()) return true;
  return false;
}

int64_t Trainer::loss_units(const Batch& batch) const {
  for (const auto& hook : hooks_)
    if (int64_t u = hook->loss_units(batch); u >= 0) return u;
  return batch.target_tokens;
}

// torch.nn.utils.clip_grad_norm_'s arithmetic, on the device: one norm per gradient (float32, no
// squared copy; the gradients on the model's device in one _foreach_norm per dtype, accumulated in
// float32), the norm of those, and every gradient
// multiplied by min(1, max_grad_norm / (norm + 1e-6)), which is 1 when it needs no clipping: the
// host never reads the norm to decide. Returns the norm (a float32 scalar on the device).
// ZeRO: each rank has its slices' share of the norm, summed across ranks (a host read there).
at::Tensor Trainer::clip_gradients() {
  std::vector<at::Tensor> grads, norms;
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;  // the gradients on dev
  const c10::Device dev = model_->embed.device();
  for (size_t i = first_local_; i < params_.size(); i++) {
    const at::Tensor& g = params_[i].second->grad();
    if (!settings_[i].clip || !g.defined()) continue;
    grads.push_back(g);
    if (g.device() == dev)
      by_dtype[g.scalar_type()].push_back(g);
    else
      norms.push_back(at::linalg_vector_norm(g, 2, c10::nullopt, false, at::kFloat).to(dev));
  }
  for (auto& [dtype, list] : by_dtype)
    for (at::Tensor& n : at::_foreach_norm(list, 2, at::kFloat)) norms.push_back(n);
  const auto f32 = at::TensorOptions(at::kFloat).device(dev);
  at::Tensor norm = norms.empty() ? at::zeros({}, f32) : at::linalg_vector_norm(at::stack(norms));
  if (zero_) {
    const double local = norm.item<double>();
    norm = at::full({}, std::sqrt(local * local + dist_sum(zero_->grad_norm_sq())), f32);
  }
  if (options_.max_grad_norm > 0) {
    // A non-finite norm skips the step (run_step); the factor is then 1, not nan (clamp_max keeps
    // nan) or 0, so nothing downstream reads a poisoned value.
    at::Tensor coef = (options_.max_grad_norm / (norm.to(at::kDouble) + 1e-6)).clamp_max(1.0).to(at::kFloat);
    coef = at::where(norm.isfinite(), coef, at::ones_like(coef));
    if (zero_) zero_->scale_gradients(coef.item<double>());
    if (!grads.empty()) at::_foreach_mul_(grads, coef);
  }
  return norm;
}

// AdamW on the device's own tensors goes through adamw_master_step (host/train/fused_adamw.h): one
// call per group of tensors sharing device, lr and decay (dtypes and master copies may differ within
// a group: the kernel reads each tensor's own), one launch per group on a GPU instead of about ten
// per tensor. `skip` (a device flag) leaves every
// state untouched. The rest (8-bit states, SGD, offloaded states, bf16 weights without masters,
// ZeRO's shards) runs per tensor, after reading the flag on the host.
void Trainer::optimizer_update(double scheduled_lr, const at::Tensor& skip) {
  at::NoGradGuard no_grad;
  ensure_state();
  const TrainOptions& o = options_;
  OptimHyper h = hyper_;
  h.step = step_;
  struct Group {
    std::vector<at::Tensor> weights, masters, grads, exp_avg, exp_avg_sq;
    double lr = 0, weight_decay = 0;
  };
  std::map<std::tuple<std::string, double, double>, Group> groups;
  std::vector<size_t> rest;
  for (size_t i = first_local_; i < params_.size(); i++) {
    at::Tensor& p = *params_[i].second;
    if (!p.grad().defined()) continue;
    const Setting& set = settings_[i];
    const double lr = set.follow_schedule ? set.lr * (scheduled_lr / o.learning_rate) : set.lr;
    const bool master = master_[i].defined();
    const bool fused = o.optimizer == "adamw" && o.optimizer_offload == "none" &&
                       (master || p.scalar_type() == at::kFloat) && p.grad().device() == p.device();
    if (!fused) {
      rest.push_back(i);
      continue;
    }
    Group& g = groups[{p.device().str(), lr, set.weight_decay}];
    g.lr = lr;
    g.weight_decay = set.weight_decay;
    g.weights.push_back(p);
    g.masters.push_back(master_[i]);  // undefined: the weight itself is float32 and updated in place
    g.grads.push_back(p.grad());
    g.exp_avg.push_back(opt_[i].exp_avg);
    g.exp_avg_sq.push_back(opt_[i].exp_avg_sq);
  }
  for (auto& [key, g] : groups)
    adamw_master_step(g.weights, g.masters, g.grads, g.exp_avg, g.exp_avg_sq, g.lr, h.beta1, h.beta2, h.eps,
                      g.weight_decay, h.step, at::Tensor(), skip);
  if (rest.empty() && !zero_) return;
  if (skip.defined() && skip.item<bool>()) return;
  // The model's weights all follow the trainer's own lr and decay (settings_ of their group).
  if (zero_) zero_->update(scheduled_lr, o.weight_decay, step_);  // decay by train_decays inside
  for (size_t i : rest) {
    at::Tensor& p = *params_[i].second;
    const Setting& set = settings_[i];
    h.lr = set.follow_schedule ? set.lr * (scheduled_lr / o.learning_rate) : set.lr;
    h.weight_decay = set.weight_decay;
    at::Tensor w = master_[i].defined() ? master_[i] : p;  // the float (or host) copy is the one updated
    optim_update(w, p.grad().to(w.device()), opt_[i], h);
    if (master_[i].defined()) p.copy_(master_[i]);
  }
}

// One range "step N" around the step; the profiler starts before the first profiled one and writes
// its files after the last.
StepStats Trainer::step(const Batch& batch) {
  if (profiler_) profiler_->begin_step(step_ + 1);
  StepStats s;
  {
    ProfileRange range(profile_ranges_on() ? "step " + std::to_string(step_ + 1) : "");
    s = run_step(batch);
  }
  if (profiler_) profiler_->end_step(step_, s.step_time);
  return s;
}

StepStats Trainer::run_step(const Batch& batch) {
  PendingStep pending = launch_step(batch);
  return finish_step(pending);
}

// Everything a step computes, queued without the host waiting for the device (one GPU, no ZeRO
// and no hook that reads a value: tests/cuda/test_trainer_cuda.cpp runs it under CUDA's sync
// debug mode set to error).
Trainer::PendingStep Trainer::launch_step(const Batch& batch) {
  // The previous step's safe point when the recipe's loop has none (no batches iterator): its
  // deferred checkpoint, or the stop a signal asked for, before this step begins.
  if (mid_step_) stop_safe_point();
  if (step_ == 0) claim_output_dir(OutputDirScope::marks);
  const double t0 = now_seconds();
  // Data parallel: the loss is normalised by every rank's target tokens together, and gradients
  // are summed, so N ranks compute what one process computes on their rows together.
  const int64_t global_targets = dist_sum(batch.target_tokens);
  LT_CHECK(global_targets > 0, "train: step " << step_ + 1 << ": the batch has no target tokens");
  const int64_t units = loss_units(batch);
  const int64_t global_units = units == batch.target_tokens ? global_targets : dist_sum(units);
  LT_CHECK(global_units > 0, "train: step " << step_ + 1 << ": the batch has nothing to compute the loss on");
#ifdef LUATUNE_HAS_CUDA
  if (model_->device().is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(model_->device().index());
#endif
  model_->set_training(true);
  if (zero_) zero_->begin_step();
  for (auto& [name, p] : params_) p->mutable_grad() = at::Tensor();
  for (auto& hook : hooks_) hook->begin(true);
  auto [loss_sum, count] = batch_loss_device(batch, true, global_units);
  if (sync_) sync_->finish();
  if (zero_) zero_->finish_gradients();
  if (dist_active()) {
    loss_sum = at::full({}, dist_sum(loss_sum.item<double>()), loss_sum.options());
    count = dist_sum(count);
  }
  if (units != batch.target_tokens) count = global_units;  // a loss per pair (or other unit), not per token
  model_->set_training(false);
  for (auto& hook : hooks_) hook->after_backward();
  // A non-finite loss or gradient norm skips the update on the device (the optimizer reads this
  // flag) and fails the run once the step's numbers are read (finish_step): weights, moments and
  // masters never take a nan or inf step, on the CPU as on a GPU.
  const at::Tensor nonfinite = loss_sum.isfinite().logical_not();
  PendingStep pending;
  pending.t0 = t0;
  pending.loss_sum = loss_sum;
  pending.count = count;
  pending.global_targets = global_targets;
  pending.tokens = batch.tokens;
  step_++;
  {
    ProfileRange range("optimizer");
    pending.grad_norm = clip_gradients();
    pending.stats.lr = lr_at(step_);
    optimizer_update(pending.stats.lr,
                     nonfinite.logical_or(pending.grad_norm.isfinite().logical_not().to(nonfinite.device())));
    for (auto& [name, p] : params_) p->mutable_grad() = at::Tensor();
  }
  return pending;
}

// The step's one host read, after all of its work is queued (loss and gradient norm together), then
// the hooks and the numbers of the step.
StepStats Trainer::finish_step(const PendingStep& pending) {
  StepStats s = pending.stats;
  const at::Tensor read =
      at::stack({pending.loss_sum.to(at::kDouble), pending.grad_norm.to(at::kDouble)}).cpu().contiguous();
  s.loss = read.data_ptr<double>()[0] / static_cast<double>(std::max<int64_t>(pending.count, 1));
  s.grad_norm = read.data_ptr<double>()[1];
  if (!std::isfinite(s.loss)) {
    step_--;  // the update was skipped
    fail("train: loss is " + std::string(std::isnan(s.loss) ? "nan" : "inf") + " at step " +
             std::to_string(step_ + 1) + "; stopping before the weights are updated",
         "lower the learning rate, raise warmup, check the data for empty or huge records, or use "
         "fp32 master weights (master_weights=true) with bf16");
  }
  if (!std::isfinite(s.grad_norm)) {
    step_--;  // the update was skipped
    fail("train: the gradient norm is " + std::string(std::isnan(s.grad_norm) ? "nan" : "inf") + " at step " +
             std::to_string(step_ + 1) + " (the loss, " + str_from_number(s.loss) +
             ", is finite); stopping before the weights are updated",
         "a nan or inf gradient with a finite loss: lower the learning rate, check for fp16 overflow "
         "(use bf16 or fp32), or for a hook or custom loss that divides by zero");
  }
  for (auto& hook : hooks_) {
    hook->after_step(step_);
    for (auto& kv : hook->stats(true)) s.extra.push_back(kv);
  }
  s.tokens = dist_sum(pending.tokens);
  s.target_tokens = pending.global_targets;
  s.step_time = now_seconds() - pending.t0;
  s.tokens_per_s = s.step_time > 0 ? static_cast<double>(s.tokens) / s.step_time : 0;
#ifdef LUATUNE_HAS_CUDA
  if (model_->device().is_cuda()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(model_->device().index());
    const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);  // every pool
    s.peak_memory_gb = static_cast<double>(stats.allocated_bytes[all].peak) / 1e9;
  }
#endif
  // The checkpoint waits for the safe point (stop.h), which comes after the recipe has logged
  // this step: a checkpoint never holds a step the metrics do not.
  if (options_.save_steps > 0 && step_ % options_.save_steps == 0) save_due_ = true;
  mid_step_ = true;
  return s;
}

void Trainer::reach_safe_point() {
  mid_step_ = false;
  if (!save_due_) return;
  save_due_ = false;
  save();
}

std::string Trainer::save_unsaved() {
  if (options_.output_dir.empty() || step_ == 0) return "";
  return save();
}

// What run.json says of this trainer's run: its id, world size, and the recipe's config and seed.
RunInfo Trainer::run_info(const std::string& run_id) const {
  RunInfo info;
  info.run_id = run_id;
  info.world_size = dist_world_size();
  if (!options_.config_json.empty()) {
    info.config = json::parse(options_.config_json);
    if (info.config.contains("seed") && info.config["seed"].is_number()) {
      info.has_seed = true;
      info.seed = info.config["seed"].get<double>();
    }
  }
  return info;
}

// A fresh run's claim on output_dir (run_dir.h): refuses another run's run.json or checkpoints there
// unless overwrite (`scope`: the script may have written its own metrics.jsonl before this first
// step); writes run.json. A resumed run or one whose config{} claimed the directory has it.
void Trainer::claim_output_dir(OutputDirScope scope) {
  if (claimed_ || options_.output_dir.empty()) return;
  const RunInfo info = run_info(run_id_new());
  const std::string moved =
      output_dir_claim(options_.output_dir, options_.overwrite, run_json_new(info), dist_is_main(), scope);
  if (!moved.empty())
    std::printf("train: moved the earlier run in %s to %s\n", options_.output_dir.c_str(), moved.c_str());
  claimed_ = true;
  run_id_ = info.run_id;
}

namespace {

// A batch of no rows: a rank's share of a round it has nothing for (collective hooks).
Batch empty_batch() {
  Batch b;
  b.ids = at::zeros({0, 1}, at::kLong);
  b.targets = at::zeros({0, 1}, at::kLong);
  return b;
}

// total / units; tokens: the target tokens seen (the perplexity is only for a loss per token).
EvalStats eval_stats(double total, int64_t units, int64_t tokens) {
  LT_CHECK(units > 0, "train: evaluate: the evaluation batches have no target tokens");
  EvalStats e;
  e.target_tokens = tokens;
  e.loss = total / static_cast<double>(units);
  e.perplexity = units == tokens ? std::exp(e.loss) : 0;
  return e;
}

}  // namespace

EvalStats Trainer::evaluate(const std::vector<Batch>& batches) {
  at::NoGradGuard no_grad;
  model_->ensure_full_weights();  // ZeRO-3: here, on every rank, not in the first forward of some
  model_->set_training(false);
  for (auto& hook : hooks_) hook->begin(false);
  // A hook with collective micro-batches: a rank given fewer batches runs empty ones after its own
  // (the count agreed first, before the batches' own collectives).
  const int64_t mine = static_cast<int64_t>(batches.size());
  const int64_t most = hooks_collective() ? dist_max(mine) : mine;
  double total = 0;
  int64_t count = 0, units = 0;
  for (const Batch& b : batches) {
    auto [sum, n] = batch_loss(b, false, 1);
    total += sum;
    count += n;
    units += loss_units(b) == b.target_tokens ? n : loss_units(b);
  }
  for (int64_t i = mine; i < most; i++) batch_loss(empty_batch(), false, 1);
  return with_hook_stats(eval_stats(total, units, count));
}

EvalStats Trainer::evaluate_items(int64_t n_items, int64_t batch_size, int64_t max_batches,
                                  const std::function<Batch(const std::vector<int64_t>&)>& make) {
  LT_CHECK(batch_size > 0, "train: evaluate: batch_size must be positive");
  at::NoGradGuard no_grad;
  // ZeRO-3: the layers are gathered here, on every rank alike; ranks evaluate different numbers of
  // batches (one may have none), so the first forward is no place for a collective.
  model_->ensure_full_weights();
  model_->set_training(false);
  for (auto& hook : hooks_) hook->begin(false);
  double total = 0;
  int64_t count = 0, units = 0, batches = 0, mine = 0;
  for (int64_t r0 = 0; r0 < n_items && (max_batches <= 0 || batches < max_batches);
       r0 += batch_size, batches++) {
    if (batches % dist_world_size() != dist_rank() % dist_world_size())
      continue;  // data parallel: every N-th batch
    std::vector<int64_t> items;
    for (int64_t r = r0; r < std::min(n_items, r0 + batch_size); r++) items.push_back(r);
    Batch b = make(items);
    auto [sum, n] = batch_loss(b, false, 1);
    total += sum;
    count += n;
    units += loss_units(b) == b.target_tokens ? n : loss_units(b);
    mine++;
  }
  // A hook with collective micro-batches: a rank without a batch in the last round (every rank
  // knows the count, no collective needed) runs an empty one, making the collectives of the others'.
  const int64_t rounds = (batches + dist_world_size() - 1) / dist_world_size();
  if (hooks_collective())
    for (; mine < rounds; mine++) batch_loss(empty_batch(), false, 1);
  return with_hook_stats(eval_stats(dist_sum(total), dist_sum(units), dist_sum(count)));
}

EvalStats Trainer::evaluate(const Dataset& data, int64_t batch_size, int64_t max_batches) {
  return evaluate_items(data.size(), batch_size, max_batches,
                        [&](const std::vector<int64_t>& rows) { return data.batch(rows); });
}

EvalStats Trainer::evaluate(const PreferenceDataset& data, int64_t batch_size, int64_t max_batches) {
  return evaluate_items(data.size(), batch_size, max_batches,
                        [&](const std::vector<int64_t>& pairs) { return data.batch(pairs); });
}

EvalStats Trainer::with_hook_stats(EvalStats e) {
  for (auto& hook : hooks_)
    for (auto& kv : hook->stats(false)) e.extra.push_back(kv);
  return e;
}

// ============================================================================================
// Checkpoints: output_dir/checkpoints/step-NNNNNNN/{state.safetensors, trainer.json}, written into a
// temporary directory beside it and renamed into place, so a crash never leaves a half checkpoint
// under a final name (resume ignores directories without trainer.json).

std::string Trainer::save() {
  LT_CHECK(!options_.output_dir.empty(), "train: save needs output_dir");
  save_due_ = false;
  std::error_code ec;
  if (saved_step_ == step_ && fs::is_directory(saved_path_, ec)) return saved_path_;  // nothing changed since
  claim_output_dir(OutputDirScope::marks);
  std::string path = zero_ ? save_sharded() : save_replicated();
  saved_step_ = step_;
  saved_path_ = path;
  return path;
}

std::string Trainer::save_replicated() {
  std::string root = options_.output_dir + "/checkpoints";
  if (!dist_is_main()) {
    // Data parallel: every rank holds the same state; rank 0 writes it, the others wait for it.
    ensure_state();
    dist_barrier();
    return root + "/" + checkpoint_dir_name(step_);
  }
  std::error_code ec;
  fs::create_directories(root, ec);
  LT_CHECK(fs::is_directory(root),
           root << ": cannot create the checkpoint directory (" << ec.message() << ")");
  std::string final_dir = root + "/" + checkpoint_dir_name(step_);
  std::string tmp = final_dir + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);

  ensure_state();
  safetensors_save_file(tmp + "/state.safetensors", local_state(true));
  publish_checkpoint(tmp, final_dir);
  dist_barrier();
  return final_dir;
}

// The parameters the plain path updates (params_[first_local_, end): all of them unsharded; the
// replicated adapters and hooks' under ZeRO) with their masters and optimizer state, when
// `replicated`; then this process's generator states.
std::vector<std::pair<std::string, at::Tensor>> Trainer::local_state(bool replicated) const {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (size_t i = first_local_; replicated && i < params_.size(); i++) {
    const std::string& name = params_[i].first;
    tensors.emplace_back("param." + name, params_[i].second->detach());
    if (master_[i].defined()) tensors.emplace_back("master." + name, master_[i]);
    for (auto& kv : opt_[i].tensors(name)) tensors.push_back(kv);
  }
  tensors.emplace_back("rng.cpu", at::detail::getDefaultCPUGenerator().get_state());
  if (model_->device().is_cuda())
    tensors.emplace_back("rng.cuda", at::globalContext().defaultGenerator(model_->device()).get_state());
  return tensors;
}

// trainer.json (the manifest: every file with its size) written last, then the directory renamed
// into place (replacing a checkpoint of the same step by rename too), then this run's checkpoints
// beyond keep_last deleted: resume only ever sees complete checkpoints, and never loses one.
void Trainer::publish_checkpoint(const std::string& tmp, const std::string& final_dir) {
  json meta = {{"step", step_},
               {"run_id", run_id_},
               {"optimizer", options_.optimizer},
               {"lr", options_.learning_rate},
               {"schedule", options_.schedule},
               {"warmup", options_.warmup_steps},
               {"steps", options_.max_steps},
               {"parameters", params_.size()},
               {"world_size", dist_world_size()},
               {"shard", options_.shard}};
  if (zero_) meta["layout"] = json::parse(zero_->layout_json());
  if (!options_.config_json.empty()) meta["config"] = json::parse(options_.config_json);
  meta["files"] = checkpoint_file_sizes(tmp);
  file_write_atomic(tmp + "/trainer.json", meta.dump(2) + "\n");
  checkpoint_publish(tmp, final_dir);
  // keep_last counts this run's checkpoints up to this step only: another run's, or steps a
  // resumed run has not reached again, are never deleted.
  std::vector<CheckpointEntry> mine;
  for (auto& c : checkpoints_list(options_.output_dir + "/checkpoints"))
    if (c.run_id == run_id_ && c.step <= step_) mine.push_back(c);
  std::error_code ec;
  for (size_t i = 0; options_.keep_last > 0 && i + options_.keep_last < mine.size(); i++)
    fs::remove_all(mine[i].path, ec);
}

int64_t Trainer::resume(const std::string& checkpoint_dir) {
  std::string dir = checkpoint_dir;
  if (dir.empty()) {
    LT_CHECK(!options_.output_dir.empty(), "train: resume needs output_dir or a checkpoint directory");
    const std::string root = options_.output_dir + "/checkpoints";
    if (dist_is_main()) checkpoints_clean_leftovers(root);  // what killed saves left behind
    std::vector<std::string> incomplete;
    auto all = checkpoints_list(root, &incomplete);
    for (const auto& bad : incomplete) {
      if (!all.empty() && bad < all.back().path) continue;  // older than the one resumed: left alone
      std::string why;
      checkpoint_complete(bad, &why);
      if (dist_is_main())
        std::fprintf(stderr, "warning: resume: skipping the incomplete checkpoint %s (%s)%s\n", bad.c_str(),
                     why.c_str(), all.empty() ? "" : ("; taking " + all.back().path).c_str());
    }
    LT_CHECK(!all.empty() || incomplete.empty(),
             root << ": no complete checkpoint to resume from (" << incomplete.size()
                  << " incomplete); move them away or start afresh with overwrite=true");
    if (all.empty()) {  // nothing to resume: a fresh run, writing over what else is there as asked
      claim_output_dir(OutputDirScope::checkpoints);
      return 0;
    }
    dir = all.back().path;
  }
  std::string why;
  LT_CHECK(checkpoint_complete(dir, &why), dir << ": not a complete luatune checkpoint (" << why << ")");
  json meta = json_parse_checked(file_read(dir + "/trainer.json"), dir + "/trainer.json");
  // Keys of the recipe's config whose value differs from the checkpointed run's: warned about, and
  // named when the checkpoint does not fit this model.
  std::vector<std::string> changed;
  if (meta.contains("config") && !options_.config_json.empty()) {
    const json now = json::parse(options_.config_json);
    changed = config_changed_keys(meta["config"], now, {"resume", "overwrite"});
    for (const auto& key : changed) {
      const json::json_pointer ptr("/" + str_join(str_split(key, '.'), "/"));
      const json before = meta["config"].contains(ptr) ? meta["config"][ptr] : json();
      const json after = now.contains(ptr) ? now[ptr] : json();
      if (dist_is_main())
        std::fprintf(stderr, "warning: resume: %s is %s now, %s in the checkpointed run (%s)\n", key.c_str(),
                     after.is_null() ? "unset" : after.dump().c_str(),
                     before.is_null() ? "unset" : before.dump().c_str(), dir.c_str());
    }
  }
  try {
    load_checkpoint(dir, meta);
  } catch (const std::exception& e) {
    if (changed.empty()) throw;
    fail(std::string(e.what()) + " (config keys changed since the checkpoint: " + str_join(changed, ", ") +
         ")");
  }
  step_ = meta.at("step").get<int64_t>();
  saved_step_ = step_;
  saved_path_ = dir;
  run_id_ = meta.value("run_id", std::string());
  claimed_ = true;
  if (!options_.output_dir.empty()) {
    output_dir_register(options_.output_dir, run_id_);
    if (dist_is_main())
      run_json_note_resume(options_.output_dir, {{"step", step_}, {"checkpoint", dir}, {"changed", changed}},
                           run_json_new(run_info(run_id_)));
  }
  if (dist_is_main())
    std::printf("resumed from step %lld of %lld (checkpoint %s)\n", static_cast<long long>(step_),
                static_cast<long long>(options_.max_steps), dir.c_str());
  for (auto& hook : hooks_) hook->after_step(step_);
  return step_;
}

// The checks and tensors of resume: same world size and stage, this rank's state and generators.
void Trainer::load_checkpoint(const std::string& dir, const json& meta) {
  // The data order depends on the number of ranks: a run resumed on another count would not
  // continue the one it resumes.
  const int64_t saved_world = meta.value("world_size", int64_t{1});
  if (saved_world != dist_world_size())
    fail(dir + ": written by a run of " + std::to_string(saved_world) + " process" +
             (saved_world == 1 ? "" : "es") + ", this run has " + std::to_string(dist_world_size()) +
             "; resuming would change which rows each step trains on",
         "resume with the same number of processes (runner --nproc / torchrun --nproc_per_node " +
             std::to_string(saved_world) + "), or start a new output_dir");
  const std::string saved_shard = meta.value("shard", std::string("none"));
  if (saved_shard != options_.shard)
    fail(dir + ": written by a run with shard=" + saved_shard + ", this run has shard=" + options_.shard,
         "resume with shard=" + saved_shard + ", or start a new output_dir");
  at::NoGradGuard no_grad;
  ensure_state();
  auto getter = [](SafetensorsReader& r) -> TensorGetter {
    return [&r](const std::string& key) { return r.contains(key) ? r.tensor(key) : at::Tensor(); };
  };
  if (zero_) {
    // Sharded: this rank's slices and generators from its own file, the replicated parameters
    // from rank 0's.
    if (meta.contains("layout") && meta["layout"] != json::parse(zero_->layout_json()))
      fail(dir +
               ": its shards were laid out for other trainable parameters, optimizer or offload than this "
               "run's",
           "resume with the same recipe settings (shard, optimizer, optimizer_offload, lora), or start a new "
           "output_dir");
    const std::string mine = dir + "/" + checkpoint_rank_file(dist_rank()),
                      first = dir + "/" + checkpoint_rank_file(0);
    LT_CHECK(file_exists(mine), mine << ": missing (every rank writes its own shard file)");
    SafetensorsReader st(mine);
    zero_->load_state(getter(st), mine);
    if (first_local_ < params_.size()) {
      SafetensorsReader st0(first);
      load_local_state(getter(st0), first, getter(st));
    } else {
      load_local_state(getter(st), mine, getter(st));
    }
  } else {
    const std::string file = dir + "/state.safetensors";
    SafetensorsReader st(file);
    load_local_state(getter(st), file, getter(st));
    int64_t expected = 0;
    for (const auto& n : st.names()) expected += n.compare(0, 6, "param.") == 0;
    LT_CHECK(expected == static_cast<int64_t>(params_.size()), dir << ": the checkpoint has " << expected
                                                                   << " trainable tensors, the model "
                                                                   << params_.size());
  }
}

// ============================================================================================
// Sharded checkpoints: step-N/rank-RRRRR.safetensors (each rank's slices, its generator state and,
// in rank 0's, the replicated hook parameters) and trainer.json (the manifest: step, world size,
// stage, the groups' layout), written into step-N.tmp-zero by every rank and renamed by rank 0 once
// all have written; resume reads the same world size and layout back exactly.

std::string Trainer::save_sharded() {
  std::string root = options_.output_dir + "/checkpoints";
  std::string final_dir = root + "/" + checkpoint_dir_name(step_);
  std::string tmp = final_dir + ".tmp-zero";  // one name every rank agrees on
  std::error_code ec;
  if (dist_is_main()) {
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    LT_CHECK(fs::is_directory(tmp),
             tmp << ": cannot create the checkpoint directory (" << ec.message() << ")");
  }
  dist_barrier();
  ensure_state();
  std::vector<std::pair<std::string, at::Tensor>> tensors = zero_->state_tensors();
  for (auto& kv : local_state(dist_is_main())) tensors.push_back(kv);  // rank 0 adds the replicated ones
  safetensors_save_file(tmp + "/" + checkpoint_rank_file(dist_rank()), tensors);
  dist_barrier();
  if (dist_is_main()) publish_checkpoint(tmp, final_dir);
  dist_barrier();
  return final_dir;
}

void Trainer::load_local_state(const TensorGetter& get_params, const std::string& params_file,
                               const TensorGetter& get_rng) {
  auto load = [&](const std::string& key, at::Tensor& into) {
    at::Tensor t = get_params(key);
    LT_CHECK(t.defined(), params_file
                              << ": tensor " << key
                              << " is missing (was the checkpoint written with other trainable parameters?)");
    LT_CHECK(t.sizes() == into.sizes(), params_file << ": tensor " << key << " has shape " << t.sizes()
                                                    << ", the model has " << into.sizes());
    into.copy_(t);
  };
  for (size_t i = first_local_; i < params_.size(); i++) {
    const std::string& name = params_[i].first;
    load("param." + name, *params_[i].second);
    if (master_[i].defined()) load("master." + name, master_[i]);
    opt_[i].load(name, get_params, params_file);
  }
  at::Tensor cpu_state = get_rng("rng.cpu");
  LT_CHECK(cpu_state.defined(), "train: resume: the checkpoint has no generator state (rng.cpu)");
  at::Generator cpu = at::detail::getDefaultCPUGenerator();  // a handle: setting it sets the global one
  cpu.set_state(cpu_state.clone());
  if (at::Tensor cuda_state = get_rng("rng.cuda"); model_->device().is_cuda() && cuda_state.defined()) {
    at::Generator cuda = at::globalContext().defaultGenerator(model_->device());
    cuda.set_state(cuda_state.clone());
  }
}

TrainMemory Trainer::memory() {
  ensure_state();
  TrainMemory m = zero_ ? zero_->memory() : TrainMemory{};
  auto bytes = [](const at::Tensor& t) {
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
  };
  for (size_t i = first_local_; i < params_.size(); i++) {
    const at::Tensor& p = *params_[i].second;
    const int64_t w = bytes(p);
    m.weights += w;
    m.full_weights += w;
    m.gradients += w;  // a replicated parameter's gradient has its shape
    m.full_gradients += w;
    m.masters += bytes(master_[i]);
    m.full_masters += bytes(master_[i]);
    m.optimizer += opt_[i].bytes();
    m.full_optimizer += opt_[i].bytes();
    if (master_[i].defined() && !master_[i].device().is_cuda() && p.device().is_cuda())
      m.host += bytes(master_[i]) + opt_[i].bytes();
  }
  return m;
}

}  // namespace luatune
