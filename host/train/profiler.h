// A trace of a few training steps (docs/profiling.md): the trainer's `profile` option runs LibTorch's
// Kineto profiler over `steps` optimizer steps after `skip` warm-up ones, with named ranges per step,
// per decoder layer and per phase (forward, backward, optimizer; NVTX ranges of the same names in
// CUDA builds), and writes DIR/trace.json (Chrome/Perfetto) with DIR/summary.json and summary.md
// beside it. No torch headers here: the Kineto API stays in profiler.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace luatune {

struct ProfileOptions {
  std::string dir;    // "" = off
  int64_t steps = 2;  // optimizer steps traced
  int64_t skip = 1;   // steps of this process run untraced first (warm-up: allocator, first kernels)
};

// `value` as a count of at least `min`, or fails (a usage error: exit 2, one line): "profile: <key> must be a
// positive integer, got 0" (min 1) / "... a non-negative integer ..." (min 0).
int64_t profile_count(const char* key, double value, int64_t min);

// True while a trace is being collected, or for the whole run when LUATUNE_NVTX=1 (NVTX ranges for
// Nsight Systems without Kineto): callers skip formatting a range's name otherwise.
bool profile_ranges_on();

// A named range from construction to destruction: a Kineto user scope (at::RecordFunction with
// RecordScope::USER_SCOPE) and, in CUDA builds, an NVTX push/pop. Nothing when ranges are off or
// the name is empty.
class ProfileRange {
 public:
  explicit ProfileRange(const std::string& name);
  ~ProfileRange();
  ProfileRange(const ProfileRange&) = delete;
  ProfileRange& operator=(const ProfileRange&) = delete;

 private:
  struct Impl;
  Impl* impl_ = nullptr;
};

// The trainer's side: begin_step before a step's work, end_step after it with its wall time. The
// profiler starts at the (skip + 1)-th step this process runs and, after `steps` steps, stops and
// writes the files (then prints one line naming them). A run that ends early writes what it has
// when the StepProfiler is destroyed, with a warning.
class StepProfiler {
 public:
  StepProfiler(ProfileOptions options, bool cuda);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;
  void begin_step(int64_t step);
  void end_step(int64_t step, double seconds);
  bool collecting() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace luatune
