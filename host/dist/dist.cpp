// The process group (dist.h): a TCPStore rendezvous as torchrun's, then c10d's ProcessGroupGloo
// (CPU) or ProcessGroupNCCL (CUDA builds), used through their common base, c10d::Backend.
#include "host/dist/dist.h"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
// PyTorch's wheel has Gloo built in but ships no gloo headers; ProcessGroupGloo.hpp needs them only
// to declare the gloo classes it holds by pointer. Debian's libgloo-dev provides them (docs/building.md
// says why that is safe); without them the build has NCCL only.
#if __has_include(<gloo/algorithm.h>)
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#define LUATUNE_HAS_GLOO 1
#endif
#ifdef LUATUNE_HAS_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#ifdef LUATUNE_HAS_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>

#include "host/core/device.h"
#include "host/core/error.h"

namespace luatune {

namespace {

#ifdef LUATUNE_HAS_NCCL
constexpr bool kNcclBuilt = true;
#else
constexpr bool kNcclBuilt = false;
#endif
#ifdef LUATUNE_HAS_GLOO
constexpr bool kGlooBuilt = true;
#else
constexpr bool kGlooBuilt = false;
#endif

struct State {
  DistEnv env;
  DistOptions options;
  std::string backend = "none";
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> group;
};

State& state() {
  static State s;
  return s;
}

// Waits for `work`, turning c10d's exception into dist_fail's line.
void wait_or_fail(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    dist_fail(what, e.what());
  }
}

// Where collectives' tensors live: the rank's GPU for NCCL, else the CPU.
c10::Device comm_device() {
  const State& s = state();
  return s.backend == "nccl" ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(s.env.local_rank))
                             : c10::Device(c10::kCPU);
}

std::string first_line(const std::string& s) {
  auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace

[[noreturn]] void dist_fail(const std::string& what, const std::string& detail) {
  const State& s = state();
  fail("dist: " + what + " failed on rank " + std::to_string(s.env.rank) + " of " +
           std::to_string(s.env.world_size) + ": " + first_line(detail),
       "another rank died or stalled (its own error is above), or did not reach this point within " +
           std::to_string(s.options.timeout.count() / 1000) + " s (LUATUNE_DIST_TIMEOUT)");
}

DistOptions dist_options_from_env() {
  DistOptions o;
  if (const char* b = std::getenv("LUATUNE_DIST_BACKEND"); b && *b) o.backend = b;
  if (const char* t = std::getenv("LUATUNE_DIST_TIMEOUT"); t && *t) {
    char* end = nullptr;
    double sec = std::strtod(t, &end);
    LT_CHECK(end && *end == '\0' && sec > 0,
             "dist: LUATUNE_DIST_TIMEOUT=\"" << t << "\" is not a positive number of seconds");
    o.timeout = std::chrono::milliseconds(static_cast<int64_t>(sec * 1000));
  }
  LT_CHECK(o.backend == "auto" || o.backend == "gloo" || o.backend == "nccl",
           "dist: backend \"" << o.backend << "\" is not one of auto, gloo, nccl");
  return o;
}

void dist_init(const DistEnv& env, const DistOptions& options) {
  State& s = state();
  LT_CHECK(!s.group, "dist: already initialised");
  s.env = env;
  s.options = options;
  if (env.world_size <= 1) return;

  if (cuda_available()) device_set_default_cuda_index(env.local_rank % std::max(1, cuda_device_count()));
  std::string backend = options.backend;
  if (backend == "auto") backend = (cuda_available() && kNcclBuilt) ? "nccl" : "gloo";
  LT_CHECK(backend != "nccl" || kNcclBuilt,
           "dist: backend nccl is not in this build (LibTorch without CUDA/NCCL); use gloo");
  LT_CHECK(
      backend != "gloo" || kGlooBuilt,
      "dist: backend gloo is not in this build (its LibTorch came without gloo headers); use nccl on CUDA");

  // The rendezvous: rank 0 hosts the store unless torchrun's agent does (then every rank is a
  // client under /worker/attempt_N), as torch.distributed's _create_c10d_store.
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.master_port);
  so.isServer = !env.agent_store && env.rank == 0;
  so.numWorkers = static_cast<std::size_t>(env.world_size);
  so.waitWorkers = !env.agent_store;
  so.timeout = options.timeout;
  so.multiTenant = !env.agent_store;
  try {
    s.store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
    if (env.agent_store)
      s.store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.restart_count),
                                                       s.store);
  } catch (const std::exception& e) {
    fail("dist: rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size) +
             " could not join the job's store at " + env.master_addr + ":" + std::to_string(env.master_port) +
             ": " + first_line(e.what()),
         "check MASTER_ADDR/MASTER_PORT, and that every rank started (LUATUNE_DIST_TIMEOUT = " +
             std::to_string(options.timeout.count() / 1000) + " s)");
  }

  try {
    if (backend == "gloo") {
#ifdef LUATUNE_HAS_GLOO
      auto o = c10d::ProcessGroupGloo::Options::create(options.timeout);
      // One process per node (torchrun --nproc_per_node, runner --nproc) talks over loopback;
      // across nodes, GLOO_SOCKET_IFNAME picks the interface, else the host name's address.
      if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname)
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      else if (env.local_world_size == env.world_size)
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      else
        o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      s.group = c10::make_intrusive<c10d::ProcessGroupGloo>(s.store, env.rank, env.world_size, o);
#endif
    } else {
#ifdef LUATUNE_HAS_NCCL
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(env.local_rank));
      auto o = c10d::ProcessGroupNCCL::Options::create();
      o->timeout = options.timeout;
      s.group = c10::make_intrusive<c10d::ProcessGroupNCCL>(s.store, env.rank, env.world_size, o);
#endif
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("dist: rank " + std::to_string(env.rank) + " could not create the " + backend +
         " process group: " + first_line(e.what()));
  }
  s.backend = backend;
  dist_barrier();  // everyone is in before anyone trains
}

void dist_shutdown() {
  State& s = state();
  s.group.reset();
  s.store.reset();
  s.backend = "none";
  s.env = DistEnv{};
}

bool dist_active() {
  return static_cast<bool>(state().group);
}
int dist_rank() {
  return state().env.rank;
}
int dist_world_size() {
  return dist_active() ? state().env.world_size : 1;
}
int dist_local_rank() {
  return state().env.local_rank;
}
bool dist_is_main() {
  return !dist_active() || state().env.rank == 0;
}
std::string dist_backend() {
  return state().backend;
}
std::chrono::milliseconds dist_timeout() {
  return state().options.timeout;
}

namespace {

c10::intrusive_ptr<c10d::Work> all_reduce_sum(std::vector<at::Tensor>& v) {
  c10d::AllreduceOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  return state().group->allreduce(v, o);
}

}  // namespace

void dist_all_reduce_sum_(at::Tensor& t) {
  if (!dist_active()) return;
  std::vector<at::Tensor> v{t};
  wait_or_fail(all_reduce_sum(v), "all-reduce");
}

void dist_broadcast_(at::Tensor& t, int root) {
  if (!dist_active()) return;
  std::vector<at::Tensor> v{t};
  c10d::BroadcastOptions o;
  o.rootRank = root;
  wait_or_fail(state().group->broadcast(v, o), "broadcast");
}

void dist_barrier() {
  if (!dist_active()) return;
  // An all-reduce of one number on the collectives' device: the same on both backends, where
  // NCCL's own barrier has to guess which GPU the rank uses.
  at::Tensor one = at::ones({1}, at::TensorOptions(at::kFloat).device(comm_device()));
  std::vector<at::Tensor> v{one};
  wait_or_fail(all_reduce_sum(v), "barrier");
}

double dist_sum(double v) {
  if (!dist_active()) return v;
  at::Tensor t = at::full({1}, v, at::TensorOptions(at::kDouble).device(comm_device()));
  dist_all_reduce_sum_(t);
  return t.item<double>();
}

int64_t dist_sum(int64_t v) {
  if (!dist_active()) return v;
  at::Tensor t = at::full({1}, v, at::TensorOptions(at::kLong).device(comm_device()));
  dist_all_reduce_sum_(t);
  return t.item<int64_t>();
}

int64_t dist_max(int64_t v) {
  if (!dist_active()) return v;
  // One all-reduce of a one-hot row per rank (c10d's MAX would do, but SUM is the op every call here uses).
  std::vector<double> row(static_cast<size_t>(dist_world_size()), 0.0);
  row[static_cast<size_t>(dist_rank())] = static_cast<double>(v);
  row = dist_sum(row);
  return static_cast<int64_t>(*std::max_element(row.begin(), row.end()));
}

void dist_reduce_scatter_sum(at::Tensor& flat, at::Tensor& shard) {
  const int64_t n = dist_world_size();
  LT_ASSERT(
      flat.dim() == 1 && flat.numel() == shard.numel() * n && flat.is_contiguous() && shard.is_contiguous(),
      "reduce-scatter: a flat buffer of " << flat.numel() << " elements cannot fill " << n << " shards of "
                                          << shard.numel());
  if (!dist_active()) {
    shard.copy_(flat);
    return;
  }
  std::vector<at::Tensor> out{shard};
  std::vector<std::vector<at::Tensor>> in{std::vector<at::Tensor>(flat.chunk(n))};
  c10d::ReduceScatterOptions o;
  o.reduceOp = c10d::ReduceOp::SUM;
  wait_or_fail(state().group->reduce_scatter(out, in, o), "reduce-scatter");
}

void dist_all_gather(const at::Tensor& shard, at::Tensor& flat) {
  dist_all_gather_async(shard, flat)->wait();
}

std::vector<double> dist_sum(std::vector<double> v) {
  if (!dist_active() || v.empty()) return v;
  at::Tensor t = at::tensor(v, at::kDouble).to(comm_device());
  dist_all_reduce_sum_(t);
  t = t.cpu();
  std::copy(t.data_ptr<double>(), t.data_ptr<double>() + t.numel(), v.begin());
  return v;
}

DistMainOnly::~DistMainOnly() noexcept(false) {
  // Not while an exception unwinds on this rank: the others then fail in their own barrier.
  if (dist_active() && std::uncaught_exceptions() == 0) dist_barrier();
}

namespace {

class C10dWork : public DistWork {
 public:
  explicit C10dWork(c10::intrusive_ptr<c10d::Work> w) : w_(std::move(w)) {}
  void wait() override { wait_or_fail(w_, "gradient all-reduce"); }

 private:
  c10::intrusive_ptr<c10d::Work> w_;
};

class DoneWork : public DistWork {
 public:
  void wait() override {}
};

// An all-gather in flight; it keeps its buffers alive until waited for.
class GatherWork : public DistWork {
 public:
  GatherWork(c10::intrusive_ptr<c10d::Work> w, at::Tensor flat) : w_(std::move(w)), flat_(std::move(flat)) {}
  void wait() override {
    if (!w_) return;
    wait_or_fail(w_, "all-gather");
    w_.reset();
  }

 private:
  c10::intrusive_ptr<c10d::Work> w_;
  at::Tensor flat_;
};

}  // namespace

std::unique_ptr<DistWork> dist_all_gather_async(const at::Tensor& shard, at::Tensor& flat) {
  const int64_t n = dist_world_size();
  LT_ASSERT(
      flat.dim() == 1 && flat.numel() == shard.numel() * n && flat.is_contiguous(),
      "all-gather: " << n << " shards of " << shard.numel() << " elements do not fill " << flat.numel());
  if (!dist_active()) {
    flat.copy_(shard);
    return std::make_unique<DoneWork>();
  }
  std::vector<at::Tensor> in{shard.contiguous()};
  std::vector<std::vector<at::Tensor>> out{std::vector<at::Tensor>(flat.chunk(n))};
  try {
    return std::make_unique<GatherWork>(state().group->allgather(out, in, c10d::AllgatherOptions()), flat);
  } catch (const std::exception& e) {
    dist_fail("all-gather", e.what());
  }
}

std::unique_ptr<DistWork> dist_all_reduce_sum_async(at::Tensor& t) {
  if (!dist_active()) return std::make_unique<DoneWork>();
  std::vector<at::Tensor> v{t};
  try {
    return std::make_unique<C10dWork>(all_reduce_sum(v));
  } catch (const std::exception& e) {
    dist_fail("gradient all-reduce", e.what());
  }
}

}  // namespace luatune
