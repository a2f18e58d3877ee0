// Bucketed gradient all-reduce (grad_sync.h), hooked on each parameter's gradient accumulator.
#include "host/dist/grad_sync.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "host/core/error.h"

namespace luatune {

std::vector<std::vector<size_t>> grad_buckets(const std::vector<at::Tensor*>& params, int64_t bucket_bytes) {
  std::vector<std::vector<size_t>> out;
  int64_t bytes = 0;
  for (size_t k = params.size(); k-- > 0;) {
    const at::Tensor& p = *params[k];
    const int64_t b = p.numel() * static_cast<int64_t>(p.element_size());
    bool same_kind = !out.empty() && !out.back().empty() &&
                     params[out.back().front()]->scalar_type() == p.scalar_type() &&
                     params[out.back().front()]->device() == p.device();
    if (out.empty() || !same_kind || bytes + b > bucket_bytes) {
      out.emplace_back();
      bytes = 0;
    }
    out.back().push_back(k);
    bytes += b;
  }
  return out;
}

GradSync::GradSync(std::vector<at::Tensor*> params, int64_t bucket_bytes) : params_(std::move(params)) {
  buckets_ = grad_buckets(params_, bucket_bytes);
  state_.resize(buckets_.size());
  bucket_of_.resize(params_.size());
  for (size_t b = 0; b < buckets_.size(); b++) {
    state_[b].params = buckets_[b];
    for (size_t k : buckets_[b]) bucket_of_[k] = b;
  }
  param_ready_.assign(params_.size(), false);
  accumulators_.resize(params_.size());
  hook_keys_.assign(params_.size(), 0);
}

GradSync::~GradSync() {
  for (size_t k = 0; k < accumulators_.size(); k++)
    if (accumulators_[k]) accumulators_[k]->del_post_hook(hook_keys_[k]);
}

void GradSync::ensure_hooks() {
  for (size_t k = 0; k < params_.size(); k++) {
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(*params_[k]);
    if (acc == accumulators_[k]) continue;
    if (accumulators_[k]) accumulators_[k]->del_post_hook(hook_keys_[k]);
    accumulators_[k] = acc;  // kept alive here: the tensor holds its accumulator only weakly
    if (!acc) continue;
    hook_keys_[k] = acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_accumulated(k);
          return outputs;
        }));
  }
}

void GradSync::arm() {
  std::lock_guard<std::mutex> lock(mu_);
  ensure_hooks();
  reset();
  armed_ = true;
}

void GradSync::reset() {
  for (Bucket& b : state_) {
    b.ready = 0;
    b.started = false;
    b.late = false;
    b.work.reset();
  }
  param_ready_.assign(params_.size(), false);
  next_ = 0;
  started_early_ = 0;
}

void GradSync::on_accumulated(size_t k) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!armed_) return;
  if (param_ready_[k]) {  // reached again in this backward: count it once, redo its bucket if it left
    if (state_[bucket_of_[k]].started) state_[bucket_of_[k]].late = true;
    return;
  }
  param_ready_[k] = true;
  state_[bucket_of_[k]].ready++;
  // Buckets start in index order on every rank, so the collectives match across ranks.
  while (next_ < state_.size() && state_[next_].ready == state_[next_].params.size()) {
    start(next_++);
    started_early_++;
  }
}

void GradSync::start(size_t bi) {
  Bucket& b = state_[bi];
  std::vector<at::Tensor> parts;
  parts.reserve(b.params.size());
  for (size_t k : b.params) {
    const at::Tensor& p = *params_[k];
    at::Tensor g = p.grad();
    parts.push_back(g.defined() ? g.reshape({-1}) : at::zeros({p.numel()}, p.options().requires_grad(false)));
  }
  {
    at::NoGradGuard no_grad;
    b.flat = at::cat(parts);
  }
  b.work = dist_all_reduce_sum_async(b.flat);
  b.started = true;
}

void GradSync::finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Not armed in this step (its last micro-batch had no targets, or this rank had fewer micro-
    // batches than another): every bucket is summed here, from the first; without the reset the
    // previous step's finished state would start none.
    if (!armed_) reset();
    armed_ = false;
    while (next_ < state_.size()) start(next_++);
  }
  at::NoGradGuard no_grad;
  for (Bucket& b : state_) b.work->wait();
  // Late buckets are redone, in order, from the gradients as they now stand; the ranks agree on
  // which first (one small all-reduce), since a rank whose last micro-batch had no targets never
  // armed and so saw none.
  std::vector<float> flags(state_.size());
  for (size_t bi = 0; bi < state_.size(); bi++) flags[bi] = state_[bi].late ? 1.0f : 0.0f;
  at::Tensor late = at::from_blob(flags.data(), {static_cast<int64_t>(flags.size())}, at::kFloat)
                        .to(params_.front()->device(), at::kFloat, false, true);
  dist_all_reduce_sum_(late);
  late = late.to(at::kCPU).contiguous();
  const float* any_late = late.data_ptr<float>();
  for (size_t bi = 0; bi < state_.size(); bi++)
    if (any_late[bi] > 0) {
      start(bi);
      state_[bi].work->wait();
      redone_++;
    }
  for (Bucket& b : state_) {
    int64_t offset = 0;
    for (size_t k : b.params) {
      at::Tensor& p = *params_[k];
      const int64_t n = p.numel();
      at::Tensor sum = b.flat.narrow(0, offset, n).view(p.sizes());
      if (p.grad().defined())
        p.mutable_grad().copy_(sum);
      else
        p.mutable_grad() = sum.to(p.scalar_type()).clone();
      offset += n;
    }
    b.flat = at::Tensor();
    b.work.reset();
  }
}

}  // namespace luatune
