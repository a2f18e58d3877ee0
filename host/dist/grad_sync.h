// DDP's gradient synchronisation for the trainer: trainable parameters grouped into ~25 MB
// buckets in reverse parameter order (the order backward produces gradients), each bucket summed
// over the ranks as soon as its last gradient is accumulated, overlapping the rest of the
// backward pass; only on the micro-batch that ends a step. Rules: docs/distributed.md, "Sources".
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "host/dist/dist.h"

namespace torch {
namespace autograd {
struct Node;
}
}  // namespace torch

namespace luatune {

constexpr int64_t kDefaultBucketBytes = 25 * 1024 * 1024;

// Bucket assignment alone (testable without a process group): indices into `params`, buckets in
// launch order, each holding parameters of one dtype and device, walked from the last parameter
// to the first, closed when adding the next would pass `bucket_bytes` (a parameter larger than
// that is a bucket of its own).
std::vector<std::vector<size_t>> grad_buckets(const std::vector<at::Tensor*>& params, int64_t bucket_bytes);

class GradSync {
 public:
  // `params`: the trainable parameters (stable for the trainer's life; tensors may be replaced,
  // hooks follow them at each arm()).
  explicit GradSync(std::vector<at::Tensor*> params, int64_t bucket_bytes = kDefaultBucketBytes);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Before the backward of a step's last micro-batch: from now on a bucket is summed as soon as
  // all its gradients are in. (Earlier micro-batches only accumulate locally.)
  void arm();
  // After the step's last backward: sums every bucket not yet started (a parameter that got no
  // gradient counts as zeros), waits for all, and writes the sums back into the gradients. Every
  // rank's gradients are then equal.
  void finish();

  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }
  int64_t started_during_backward() const { return started_early_; }  // for tests and logs
  int64_t redone() const { return redone_; }  // buckets summed again after a late gradient

 private:
  struct Bucket {
    std::vector<size_t> params;
    size_t ready = 0;
    bool started = false;
    // A gradient accumulated again after the bucket started (a parameter reached twice in one
    // backward, e.g. through nested recomputation): its early sum is stale and is redone.
    bool late = false;
    at::Tensor flat;
    std::unique_ptr<DistWork> work;
  };
  void on_accumulated(size_t param);
  void start(size_t bucket);  // flatten, start the all-reduce (in bucket order)
  void reset();               // no bucket started (under mu_)
  void ensure_hooks();

  std::vector<at::Tensor*> params_;
  std::vector<std::vector<size_t>> buckets_;
  std::vector<Bucket> state_;
  std::vector<size_t> bucket_of_;
  std::vector<bool> param_ready_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  size_t next_ = 0;
  bool armed_ = false;
  int64_t started_early_ = 0;
  int64_t redone_ = 0;
  std::mutex mu_;
};

}  // namespace luatune
