// Dtype and device parsing (see device.h).
#include "host/core/device.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <sched.h>
#include <unistd.h>

#include <ATen/detail/CUDAHooksInterface.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <atomic>
#include <utility>
#include <vector>

#include "host/core/enum_names.h"
#include "host/core/error.h"
#include "host/core/strings.h"

namespace luatune {

namespace {
std::atomic<int> g_step_kernels_override{-1};  // -1: the environment decides (StepKernelsScope)
}  // namespace

bool step_kernels_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("LUATUNE_STEP_KERNELS");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  const int forced = g_step_kernels_override.load(std::memory_order_relaxed);
  return forced < 0 ? on : forced != 0;
}

StepKernelsScope::StepKernelsScope(bool on) : previous_(g_step_kernels_override.exchange(on ? 1 : 0)) {}
StepKernelsScope::~StepKernelsScope() {
  g_step_kernels_override.store(previous_);
}

namespace {
// The first name of each type is its canonical (PyTorch) name; the others are aliases.
constexpr EnumName<c10::ScalarType> kDtypeNames[] = {
    {c10::kFloat, "float32"},     {c10::kFloat, "f32"},     {c10::kFloat, "fp32"},     {c10::kFloat, "float"},
    {c10::kBFloat16, "bfloat16"}, {c10::kBFloat16, "bf16"}, {c10::kHalf, "float16"},   {c10::kHalf, "f16"},
    {c10::kHalf, "fp16"},         {c10::kHalf, "half"},     {c10::kDouble, "float64"}, {c10::kDouble, "f64"},
    {c10::kDouble, "double"},     {c10::kLong, "int64"},    {c10::kLong, "i64"},       {c10::kLong, "long"},
    {c10::kInt, "int32"},         {c10::kInt, "i32"},       {c10::kInt, "int"},        {c10::kShort, "int16"},
    {c10::kShort, "i16"},         {c10::kChar, "int8"},     {c10::kChar, "i8"},        {c10::kByte, "uint8"},
    {c10::kByte, "u8"},           {c10::kBool, "bool"},
};
}  // namespace

bool dtype_try_parse(const std::string& name, c10::ScalarType* out) {
  const auto* row = enum_row(kDtypeNames, name);
  if (row) *out = row->value;
  return row != nullptr;
}

c10::ScalarType dtype_parse(const std::string& name) {
  if (const auto* row = enum_row(kDtypeNames, name)) return row->value;
  std::vector<std::string> known;
  for (const auto& d : kDtypeNames) known.push_back(d.name);
  std::string near = str_nearest(name, known);
  fail("unknown dtype '" + name + "'" + (near.empty() ? "" : " (did you mean '" + near + "'?)"),
       "expected one of float32, bfloat16, float16, float64, int64, int32, int16, int8, uint8, bool "
       "(short forms bf16, fp32/f32, fp16/f16, f64, i64, ...)");
}

std::string dtype_name(c10::ScalarType t) {
  const char* name = enum_name(kDtypeNames, t, nullptr);
  return name ? name : c10::toString(t);
}

void cpu_threads_init() {
  if (std::getenv("OMP_NUM_THREADS")) return;
  cpu_set_t set;
  int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (n > at::get_num_threads()) at::set_num_threads(n);
}

std::string openmp_wait_policy() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  if (policy) {
    // luatune's default only when the value is the one it sets: a mark inherited beside a policy
    // the user set later is the user's.
    bool marked = false;
    for (char** e = environ; *e && !marked; e++) marked = std::strcmp(*e, kOpenmpWaitDefaultMark) == 0;
    const bool ours = marked && std::strcmp(policy, "PASSIVE") == 0;
    return std::string(policy) + (ours ? " (luatune's default)" : " (OMP_WAIT_POLICY)");
  }
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  if (spin) return std::string("libgomp's default (GOMP_SPINCOUNT=") + spin + ")";
  // Neither set: a verb that runs no kernels (--version among them) skips the restart that sets it.
  return "PASSIVE (luatune's default, set as a recipe starts)";
}

bool cuda_available() {
  return at::hasCUDA() && at::detail::getCUDAHooks().getNumGPUs() > 0;
}

int cuda_device_count() {
  return at::hasCUDA() ? at::detail::getCUDAHooks().getNumGPUs() : 0;
}

namespace {
int g_default_cuda_index = 0;
}  // namespace

void device_set_default_cuda_index(int index) {
  g_default_cuda_index = index;
}

c10::Device device_parse(const std::string& name) {
  if (name == "auto")
    return cuda_available() ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(g_default_cuda_index))
                            : c10::Device(c10::kCPU);
  if (name == "cpu") return c10::Device(c10::kCPU);
  if (name == "cuda" || str_starts_with(name, "cuda:")) {
    int index = g_default_cuda_index;
    if (name.size() > 5) {
      double v = 0;
      LT_CHECK(str_to_number(name.substr(5), &v) && v >= 0 && v == static_cast<int>(v),
               "bad device '" << name << "': expected cuda:N with N a device number");
      index = static_cast<int>(v);
    }
    if (!cuda_available())
      fail("device '" + name + "' asked for, but no CUDA device is available",
           "use device=\"auto\" to fall back to the CPU, or run on a machine with a CUDA LibTorch and GPU");
    LT_CHECK(index < cuda_device_count(), "device '" << name << "' asked for, but only "
                                                     << cuda_device_count() << " CUDA device(s) exist");
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  }
  fail("unknown device '" + name + "'", "expected \"cpu\", \"cuda\", \"cuda:N\" or \"auto\"");
}

uint64_t host_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

std::string bytes_text(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) bytes /= 1024, u++;
  char buf[64];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f bytes", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", bytes, units[u]);
  return buf;
}

std::string device_name(const c10::Device& d) {
  if (d.is_cpu()) return "cpu";
  if (d.is_cuda()) return "cuda:" + std::to_string(d.has_index() ? d.index() : 0);
  return d.str();
}

}  // namespace luatune
