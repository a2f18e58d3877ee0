// Data parallelism on PyTorch's own engine (c10d): one process group per process, Gloo on CPU and
// NCCL on CUDA, rendezvous through a c10d TCPStore as torchrun does (docs/distributed.md, "Sources"), and
// the collectives the trainer, the data loader and the bindings use. Single-process runs never
// touch c10d: every call below is then a no-op (rank 0 of 1).
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "host/dist/env.h"

namespace luatune {

struct DistOptions {
  std::string backend = "auto";  // "auto" (NCCL when CUDA and NCCL are there, else Gloo), "gloo", "nccl"
  // How long a collective or the rendezvous may wait for the other ranks before this rank fails
  // (a rank that died or hangs): LUATUNE_DIST_TIMEOUT seconds when set, else 300 s.
  std::chrono::milliseconds timeout{300000};
};

// The options from the environment (LUATUNE_DIST_BACKEND, LUATUNE_DIST_TIMEOUT).
DistOptions dist_options_from_env();

// Joins the job `env` describes (nothing when world_size is 1). On CUDA the device is
// cuda:local_rank. Fails in one line when the store or the peers cannot be reached in time.
void dist_init(const DistEnv& env, const DistOptions& options = {});
void dist_shutdown();  // leaves the job (idempotent)

bool dist_active();  // more than one process
int dist_rank();
int dist_world_size();
int dist_local_rank();
bool dist_is_main();         // rank 0: the one that logs, saves and prints
std::string dist_backend();  // "gloo", "nccl", or "none"
std::chrono::milliseconds dist_timeout();

// Blocking collectives over every rank, in place. Tensors on CPU (Gloo) or the rank's GPU (NCCL).
void dist_all_reduce_sum_(at::Tensor& t);
void dist_broadcast_(at::Tensor& t, int root);
void dist_barrier();
double dist_sum(double v);  // all-reduce of one number (float64)
int64_t dist_sum(int64_t v);
std::vector<double> dist_sum(std::vector<double> v);  // element-wise, one all-reduce
int64_t dist_max(int64_t v);                          // the largest of every rank's v
// ZeRO's two collectives on contiguous flat 1-D buffers split in world_size equal slices (rank r's
// is [r*n, (r+1)*n)): shard = this rank's slice of the sum of every rank's `flat` (which may be
// overwritten: it is the caller's scratch); and `flat` = every rank's shard, concatenated. One
// process: copies.
void dist_reduce_scatter_sum(at::Tensor& flat, at::Tensor& shard);
void dist_all_gather(const at::Tensor& shard, at::Tensor& flat);

// For writers that only rank 0 runs (model and adapter saves): true on rank 0; a barrier when it
// goes out of scope, so no rank reads the files before they exist. Single process: true, no barrier.
//   DistMainOnly main_only; if (!main_only) return; ...write...
class DistMainOnly {
 public:
  DistMainOnly() = default;
  ~DistMainOnly() noexcept(false);
  DistMainOnly(const DistMainOnly&) = delete;
  DistMainOnly& operator=(const DistMainOnly&) = delete;
  explicit operator bool() const { return dist_is_main(); }
};

// An all-reduce (sum) started now; wait() blocks until it is done (and rethrows its failure).
class DistWork {
 public:
  virtual ~DistWork() = default;
  virtual void wait() = 0;
};
std::unique_ptr<DistWork> dist_all_reduce_sum_async(at::Tensor& t);
// dist_all_gather started now; wait() completes it (ZeRO-3 gathers the next layer while one runs).
std::unique_ptr<DistWork> dist_all_gather_async(const at::Tensor& shard, at::Tensor& flat);

// Fails with "dist: <what> failed on rank R of W: ..." naming the probable cause (a peer died or
// hung past the timeout) when a collective throws; used by every call above.
[[noreturn]] void dist_fail(const std::string& what, const std::string& detail);

}  // namespace luatune
