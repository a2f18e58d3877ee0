// The trainer's profiler (profiler.h): Kineto over a window of steps, the trace saved as Chrome JSON,
// and a summary computed from the profiler's own event list (not by re-reading the trace): wall time
// per step, GPU busy share, the top ops or kernels by self time, kernel launches and host
// synchronisations per step. Why the ranges are RecordFunction user scopes: Kineto writes them into
// the trace as "user_annotation" events on the thread that ran them, so a step, a layer or a phase
// shows as one bar above the ops it contains in Perfetto.
#include "host/train/profiler.h"

#include <ATen/record_function.h>
#include <kineto/ActivityType.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include <unistd.h>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/strings.h"

// NVTX v3 is header-only (the CUDA wheel's include dir is on the include path in CUDA builds).
#if defined(LUATUNE_HAS_CUDA) && defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define LUATUNE_HAS_NVTX 1
#endif
#endif

namespace luatune {

namespace fs = std::filesystem;
using json = nlohmann::json;
namespace kp = torch::autograd::profiler;
namespace pi = torch::profiler::impl;
using libkineto::ActivityType;

namespace {

std::atomic<bool> g_collecting{false};

bool nvtx_always() {
  static const bool on = [] {
    const char* v = std::getenv("LUATUNE_NVTX");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

}  // namespace

int64_t profile_count(const char* key, double value, int64_t min) {
  if (!(value == std::floor(value)) || value < static_cast<double>(min) || value > 1e15)
    fail_usage(std::string("profile: ") + key + " must be a " + (min > 0 ? "positive" : "non-negative") +
               " integer, got " + str_from_number(value));
  return static_cast<int64_t>(value);
}

bool profile_ranges_on() {
  return g_collecting.load(std::memory_order_relaxed) || nvtx_always();
}

// ============================================================================================
// Ranges

struct ProfileRange::Impl {
  std::string name;  // RecordFunction keeps a view of it
  std::optional<at::RecordFunction> rf;
  bool nvtx = false;
};

ProfileRange::ProfileRange(const std::string& name) {
  if (name.empty() || !profile_ranges_on()) return;
  impl_ = new Impl;
  impl_->name = name;
  if (g_collecting.load(std::memory_order_relaxed)) {
    impl_->rf.emplace(at::RecordScope::USER_SCOPE);
    if (impl_->rf->isActive()) impl_->rf->before(impl_->name.c_str(), c10::ArrayRef<const c10::IValue>{});
  }
#ifdef LUATUNE_HAS_NVTX
  nvtxRangePushA(impl_->name.c_str());
  impl_->nvtx = true;
#endif
}

ProfileRange::~ProfileRange() {
  if (!impl_) return;
#ifdef LUATUNE_HAS_NVTX
  if (impl_->nvtx) nvtxRangePop();
#endif
  impl_->rf.reset();  // RecordFunction's destructor ends the range
  delete impl_;
}

// ============================================================================================
// The summary: what the event list says about each profiled step.

namespace {

struct Event {
  std::string name;
  uint8_t type = 0;  // libkineto::ActivityType
  uint64_t start = 0, end = 0, thread = 0;
  bool gpu = false;
};

bool is_type(const Event& e, ActivityType t) {
  return e.type == static_cast<uint8_t>(t);
}

bool is_launch(const Event& e) {
  return (is_type(e, ActivityType::CUDA_RUNTIME) || is_type(e, ActivityType::CUDA_DRIVER)) &&
         (e.name.find("LaunchKernel") != std::string::npos ||
          e.name.find("GraphLaunch") != std::string::npos);
}

// The runtime calls that make the host wait for the GPU. cudaMemcpy (not Async) waits for a D2H
// copy's data; cudaMemcpyAsync is followed by a stream synchronisation when it does (item()).
bool is_cuda_sync(const Event& e) {
  static const std::set<std::string> names = {"cudaStreamSynchronize", "cudaDeviceSynchronize",
                                              "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpy2D"};
  return is_type(e, ActivityType::CUDA_RUNTIME) && names.count(e.name) > 0;
}

bool is_scalar_read(const Event& e) {
  return is_type(e, ActivityType::CPU_OP) && e.name == "aten::_local_scalar_dense";
}

// The CPU proxy for a GPU wait: a value read on the host (item()), or nonzero(), whose output size
// is data (scripts/gpu/trace_summary.py counts the same).
bool is_host_wait_op(const Event& e) {
  return is_scalar_read(e) || (is_type(e, ActivityType::CPU_OP) && e.name == "aten::nonzero");
}

struct StepRow {
  int64_t step = 0;
  double wall_s = 0;
  uint64_t begin = 0, end = 0;  // the "step N" range, ns (0, 0 when it is missing)
  int64_t launches = 0, syncs = 0, scalar_reads = 0, wait_ops = 0;
  double kernel_s = 0;
};

struct Top {
  std::string name;
  int64_t calls = 0;
  double self_s = 0;
};

// Self time of CPU ops: each op's duration less its directly nested ops' on the same thread.
std::vector<Top> top_cpu_ops(const std::vector<Event>& events) {
  std::map<uint64_t, std::vector<const Event*>> by_thread;
  for (const Event& e : events)
    if (is_type(e, ActivityType::CPU_OP) && !e.gpu) by_thread[e.thread].push_back(&e);
  std::unordered_map<std::string, Top> tops;
  for (auto& [thread, evs] : by_thread) {
    std::sort(evs.begin(), evs.end(), [](const Event* a, const Event* b) {
      return a->start != b->start ? a->start < b->start : a->end > b->end;
    });
    std::vector<std::pair<const Event*, double>> stack;  // (event, its self time so far, s)
    auto close = [&](const std::pair<const Event*, double>& s) {
      Top& t = tops[s.first->name];
      t.name = s.first->name;
      t.calls++;
      t.self_s += std::max(0.0, s.second);
    };
    for (const Event* e : evs) {
      while (!stack.empty() && stack.back().first->end <= e->start) {
        close(stack.back());
        stack.pop_back();
      }
      const double dur = static_cast<double>(e->end - e->start) * 1e-9;
      if (!stack.empty()) stack.back().second -= dur;
      stack.emplace_back(e, dur);
    }
    for (auto it = stack.rbegin(); it != stack.rend(); ++it) close(*it);
  }
  std::vector<Top> out;
  for (auto& kv : tops) out.push_back(kv.second);
  return out;
}

std::vector<Top> top_kernels(const std::vector<Event>& events) {
  std::unordered_map<std::string, Top> tops;
  for (const Event& e : events) {
    if (!is_type(e, ActivityType::CONCURRENT_KERNEL)) continue;
    Top& t = tops[e.name];
    t.name = e.name;
    t.calls++;
    t.self_s += static_cast<double>(e.end - e.start) * 1e-9;
  }
  std::vector<Top> out;
  for (auto& kv : tops) out.push_back(kv.second);
  return out;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string shorten(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

}  // namespace

// ============================================================================================
// The profiler

struct StepProfiler::Impl {
  ProfileOptions o;
  bool cuda = false;
  int64_t seen = 0;  // steps begun in this process
  bool collecting = false, done = false;
  std::vector<std::pair<int64_t, double>> steps;  // (step, wall seconds) of the profiled ones

  void start();
  void finish();
  json summarise(const std::vector<Event>& events) const;
};

void StepProfiler::Impl::start() {
  std::set<pi::ActivityType> activities = {pi::ActivityType::CPU};
  if (cuda) activities.insert(pi::ActivityType::CUDA);
  const pi::ProfilerConfig config(pi::ProfilerState::KINETO);
  kp::prepareProfiler(config, activities);
  kp::enableProfiler(config, activities);
  collecting = true;
  g_collecting = true;
}

void StepProfiler::Impl::finish() {
  g_collecting = false;
  collecting = false;
  done = true;
  std::unique_ptr<kp::ProfilerResult> result = kp::disableProfiler();
  std::error_code ec;
  fs::create_directories(o.dir, ec);
  LT_CHECK(fs::is_directory(o.dir),
           "profile: cannot create the directory " << o.dir << " (" << ec.message() << ")");
  // trace.json: Kineto writes it under a temporary name, renamed into place once complete.
  const std::string trace = o.dir + "/trace.json";
  const std::string tmp = o.dir + "/trace.tmp-" + std::to_string(::getpid()) + ".json";
  result->save(tmp);
  fs::rename(tmp, trace, ec);
  LT_CHECK(!ec, "profile: cannot rename " << tmp << " to " << trace << " (" << ec.message() << ")");

  std::vector<Event> events;
  events.reserve(result->events().size());
  for (const kp::KinetoEvent& k : result->events()) {
    Event e;
    e.name = k.name();
    e.type = k.activityType();
    e.start = k.startNs();
    e.end = std::max(k.endNs(), k.startNs());
    e.thread = k.startThreadId();
    e.gpu = k.deviceType() == c10::DeviceType::CUDA;
    events.push_back(std::move(e));
  }
  const json summary = summarise(events);
  file_write_atomic(o.dir + "/summary.json", summary.dump(2) + "\n");

  // summary.md: the same numbers for a person.
  const bool gpu = cuda;
  std::string md = "# Profile of " + std::to_string(steps.size()) + " training step" +
                   (steps.size() == 1 ? "" : "s") + " on " + summary["device"].get<std::string>() + "\n\n";
  md +=
      "Trace: `trace.json` (open it in https://ui.perfetto.dev or chrome://tracing; docs/profiling.md).\n\n";
  std::vector<std::vector<std::string>> rows;
  for (const json& s : summary["steps"])
    rows.push_back({std::to_string(s["step"].get<int64_t>()), fixed(s["wall_ms"].get<double>(), 1),
                    gpu ? fixed(s["gpu_busy_pct"].get<double>(), 1) + " %" : "n/a on CPU",
                    gpu ? std::to_string(s["kernel_launches"].get<int64_t>()) : "n/a on CPU",
                    std::to_string(s["host_syncs"].get<int64_t>())});
  const json& m = summary["per_step"];
  rows.push_back({"mean", fixed(m["wall_ms"].get<double>(), 1),
                  gpu ? fixed(m["gpu_busy_pct"].get<double>(), 1) + " %" : "n/a on CPU",
                  gpu ? fixed(m["kernel_launches"].get<double>(), 1) : "n/a on CPU",
                  fixed(m["host_syncs"].get<double>(), 1)});
  md += md_table(
      {{"step"}, {"wall (ms)", true}, {"GPU busy", true}, {"kernel launches", true}, {"host syncs", true}},
      rows);
  md += "\nHost syncs count " + summary["host_syncs_counted"].get<std::string>() + ".\n\n";
  md += "## Phases (ms per step)\n\n";
  std::vector<std::vector<std::string>> phase_rows;
  for (const char* p : {"forward", "backward", "optimizer"})
    phase_rows.push_back({p, fixed(summary["phases_ms"][p].get<double>(), 1)});
  md += md_table({{"phase"}, {"ms", true}}, phase_rows);
  md += std::string("\n## Top ") + (gpu ? "CUDA kernels" : "CPU ops") + " by self time\n\n";
  std::vector<std::vector<std::string>> top_rows;
  int rank = 1;
  for (const json& t : summary["top"])
    top_rows.push_back({std::to_string(rank++),
                        "`" + md_cell(shorten(t["name"].get<std::string>(), 100)) + "`",
                        std::to_string(t["calls"].get<int64_t>()), fixed(t["self_ms"].get<double>(), 2),
                        fixed(t["share_pct"].get<double>(), 1) + " %"});
  md +=
      md_table({{"#", true}, {gpu ? "kernel" : "op"}, {"calls", true}, {"self (ms)", true}, {"share", true}},
               top_rows);
  file_write_atomic(o.dir + "/summary.md", md);
  std::printf("profile: %zu step%s traced to %s (summary.md, summary.json)\n", steps.size(),
              steps.size() == 1 ? "" : "s", trace.c_str());
  std::fflush(stdout);
}

json StepProfiler::Impl::summarise(const std::vector<Event>& events) const {
  std::vector<StepRow> rows;
  for (const auto& [step, wall] : steps) {
    StepRow r;
    r.step = step;
    r.wall_s = wall;
    const std::string name = "step " + std::to_string(step);
    for (const Event& e : events)
      if (!e.gpu && e.name == name) {
        r.begin = e.start;
        r.end = e.end;
      }
    rows.push_back(r);
  }
  for (const Event& e : events) {
    for (StepRow& r : rows) {
      if (r.end == 0 || e.start < r.begin || e.start >= r.end) continue;
      if (is_launch(e)) r.launches++;
      if (is_cuda_sync(e)) r.syncs++;
      if (is_scalar_read(e)) r.scalar_reads++;
      if (is_host_wait_op(e)) r.wait_ops++;
      if (is_type(e, ActivityType::CONCURRENT_KERNEL))
        r.kernel_s += static_cast<double>(e.end - e.start) * 1e-9;
    }
  }
  json j;
  j["device"] = cuda ? "cuda" : "cpu";
  j["trace"] = "trace.json";
  j["skipped_steps"] = o.skip;
  j["profiled_steps"] = steps.size();
  j["host_syncs_counted"] =
      cuda ? "cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize and "
             "cudaMemcpy runtime calls"
           : "aten::_local_scalar_dense (item(): a host read of a tensor value) and aten::nonzero "
             "calls: the CPU proxy for a GPU synchronisation";
  json per = json::array();
  double wall = 0, kernel = 0, launches = 0, syncs = 0;
  for (StepRow& r : rows) {
    if (!cuda) r.syncs = r.wait_ops;
    json s = {{"step", r.step},
              {"wall_ms", r.wall_s * 1e3},
              {"host_syncs", r.syncs},
              {"scalar_reads", r.scalar_reads}};
    if (cuda) {
      s["kernel_launches"] = r.launches;
      s["kernel_ms"] = r.kernel_s * 1e3;
      s["gpu_busy_pct"] = r.wall_s > 0 ? 100.0 * r.kernel_s / r.wall_s : 0.0;
    } else {
      s["kernel_launches"] = nullptr;
      s["kernel_ms"] = nullptr;
      s["gpu_busy_pct"] = nullptr;
    }
    per.push_back(s);
    wall += r.wall_s;
    kernel += r.kernel_s;
    launches += static_cast<double>(r.launches);
    syncs += static_cast<double>(r.syncs);
  }
  j["steps"] = per;
  const double n = std::max<double>(1, static_cast<double>(rows.size()));
  j["per_step"] = {{"wall_ms", wall * 1e3 / n},
                   {"host_syncs", syncs / n},
                   {"kernel_launches", cuda ? json(launches / n) : json(nullptr)},
                   {"gpu_busy_pct", cuda ? json(wall > 0 ? 100.0 * kernel / wall : 0.0) : json(nullptr)}};
  // The phases' ranges, summed over the profiled steps, per step.
  json phases = json::object();
  for (const char* p : {"forward", "backward", "optimizer"}) {
    double total = 0;
    for (const Event& e : events)
      if (!e.gpu && e.name == p) total += static_cast<double>(e.end - e.start) * 1e-9;
    phases[p] = total * 1e3 / n;
  }
  j["phases_ms"] = phases;
  std::vector<Top> tops = cuda ? top_kernels(events) : top_cpu_ops(events);
  double all = 0;
  for (const Top& t : tops) all += t.self_s;
  std::sort(tops.begin(), tops.end(), [](const Top& a, const Top& b) { return a.self_s > b.self_s; });
  if (tops.size() > 20) tops.resize(20);
  j["top_kind"] = cuda ? "cuda_kernels" : "cpu_ops";
  j["top"] = json::array();
  for (const Top& t : tops)
    j["top"].push_back({{"name", t.name},
                        {"calls", t.calls},
                        {"self_ms", t.self_s * 1e3},
                        {"share_pct", all > 0 ? 100.0 * t.self_s / all : 0.0}});
  return j;
}

StepProfiler::StepProfiler(ProfileOptions options, bool cuda) : impl_(std::make_unique<Impl>()) {
  impl_->o = std::move(options);
  impl_->cuda = cuda;
}

StepProfiler::~StepProfiler() {
  if (!impl_->collecting) return;
  try {
    std::fprintf(stderr, "warning: profile: the run ended after %zu of %lld profiled steps; writing those\n",
                 impl_->steps.size(), static_cast<long long>(impl_->o.steps));
    if (impl_->steps.empty()) {
      g_collecting = false;
      kp::disableProfiler();
      return;
    }
    impl_->finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: profile: %s\n", e.what());
  }
}

void StepProfiler::begin_step(int64_t) {
  if (impl_->done || impl_->collecting) return;
  if (++impl_->seen == impl_->o.skip + 1) impl_->start();
}

void StepProfiler::end_step(int64_t step, double seconds) {
  if (!impl_->collecting) return;
  impl_->steps.emplace_back(step, seconds);
  if (static_cast<int64_t>(impl_->steps.size()) >= impl_->o.steps) impl_->finish();
}

bool StepProfiler::collecting() const {
  return impl_->collecting;
}

}  // namespace luatune
