// Dtype and device names as recipes write them ("bf16", "float32", "auto", "cuda:1"), parsed into
// c10 types with one-line errors. Only light c10 headers here: <torch/torch.h> stays out of headers.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace luatune {

// Accepts PyTorch names and short forms: float32/f32/float, bfloat16/bf16, float16/f16/half,
// float64/f64/double, int64/i64/long, int32/i32/int, int16/i16, int8/i8, uint8/u8, bool.
c10::ScalarType dtype_parse(const std::string& name);
// Like dtype_parse, but returns false instead of failing when `name` is not a dtype.
bool dtype_try_parse(const std::string& name, c10::ScalarType* out);
// The PyTorch name: "float32", "bfloat16", ...
std::string dtype_name(c10::ScalarType t);

// The GPU "cuda" and "auto" mean (default 0); a data-parallel rank sets its LOCAL_RANK here.
void device_set_default_cuda_index(int index);
// "cpu", "cuda", "cuda:N", or "auto" (CUDA when present, else CPU). A CUDA device on a machine
// without CUDA fails with a hint instead of LibTorch's longer message later.
c10::Device device_parse(const std::string& name);
std::string device_name(const c10::Device& d);

// Whether the training step's own CUDA kernels (fused norms, RoPE, gated activation, one-pass
// cross-entropy, multi-tensor AdamW; docs/kernels.md) are used where they apply: yes unless the
// environment sets LUATUNE_STEP_KERNELS=0, which sends every op to its ATen path (the CPU's, which
// runs on CUDA too), e.g. to compare a step with and without them or to set a suspect kernel aside.
bool step_kernels_enabled();
// Sets step_kernels_enabled() for the whole process while it lives (every thread: autograd's backward
// runs on its own), then puts back what was there: the GPU smoke check (tests/cuda/step_kernel_smoke.cpp)
// runs each kernel and its ATen path in one process. Not for concurrent use.
class StepKernelsScope {
 public:
  explicit StepKernelsScope(bool on);
  ~StepKernelsScope();
  StepKernelsScope(const StepKernelsScope&) = delete;
  StepKernelsScope& operator=(const StepKernelsScope&) = delete;

 private:
  int previous_;
};

// Uses every CPU this process may run on for intra-op parallelism, unless OMP_NUM_THREADS says
// otherwise (LibTorch's own default counts physical cores only).
void cpu_threads_init();
// OpenMP's idle threads. LibTorch's CPU ops and MKL's matmuls run on libgomp's thread pool; by
// default a libgomp thread that finishes its share spins for 300,000 rounds before it sleeps, on
// cores other work needs (docs/cpu_threads.md has the numbers).
// libgomp reads OMP_WAIT_POLICY once, while it is loaded, so runner sets PASSIVE before that
// (runner/main.cpp, runner_preinit) unless the user set OMP_WAIT_POLICY or GOMP_SPINCOUNT, and
// marks it with kOpenmpWaitDefaultMark; commands that run no kernels skip that. openmp_wait_policy()
// says which policy a recipe run gets and where it came from, for `runner --version`: "PASSIVE
// (luatune's default)", "PASSIVE (luatune's default, set as a recipe starts)" (a command that
// skipped it), "ACTIVE (OMP_WAIT_POLICY)", "libgomp's default (GOMP_SPINCOUNT=...)".
constexpr const char* kOpenmpWaitDefaultMark = "LUATUNE_OPENMP_WAIT=default";
std::string openmp_wait_policy();

bool cuda_available();
int cuda_device_count();

// This machine's physical memory in bytes (0 when unknown): the ceiling allocations are checked
// against before they are tried (Linux overcommits, so a too-large malloc may "succeed" and the
// process be killed later instead of failing).
uint64_t host_memory_bytes();
// "3.2 GiB", "512.0 MiB": a byte count for messages.
std::string bytes_text(double bytes);

}  // namespace luatune
