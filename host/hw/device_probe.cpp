// Device probe and NVML sampler. NVML is opened with dlopen("libnvidia-ml.so.1") and only the few
// functions used here are looked up, so machines without a driver build and run the same binary.
#include "host/hw/device_probe.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <mutex>

#include "host/core/device.h"
#include "host/core/strings.h"

#ifdef LUATUNE_HAS_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace luatune {

// ============================================================================================
// NVML through dlopen: the subset of nvml.h we call (types as the header declares them).

namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = void*;
struct NvmlUtilization {
  unsigned int gpu, memory;
};
struct NvmlMemory {
  unsigned long long total, free, used;
};

struct Nvml {
  bool ok = false;
  std::string why;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned int) = nullptr;
  nvmlReturn_t (*cuda_version)(int*) = nullptr;
  nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, NvmlUtilization*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, NvmlMemory*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;  // milliwatts
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
};

// Loaded once per process; never closed (NVML is cheap to keep and unsafe to reload).
const Nvml& nvml() {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      n.why = "no NVML (libnvidia-ml.so.1 not found)";
      return;
    }
    auto sym = [&](const char* a) { return dlsym(lib, a); };
    n.init = reinterpret_cast<decltype(n.init)>(sym("nvmlInit_v2"));
    n.driver_version = reinterpret_cast<decltype(n.driver_version)>(sym("nvmlSystemGetDriverVersion"));
    n.cuda_version = reinterpret_cast<decltype(n.cuda_version)>(sym("nvmlSystemGetCudaDriverVersion_v2"));
    n.handle = reinterpret_cast<decltype(n.handle)>(sym("nvmlDeviceGetHandleByIndex_v2"));
    n.utilization = reinterpret_cast<decltype(n.utilization)>(sym("nvmlDeviceGetUtilizationRates"));
    n.memory = reinterpret_cast<decltype(n.memory)>(sym("nvmlDeviceGetMemoryInfo"));
    n.power = reinterpret_cast<decltype(n.power)>(sym("nvmlDeviceGetPowerUsage"));
    n.name = reinterpret_cast<decltype(n.name)>(sym("nvmlDeviceGetName"));
    if (!n.init || !n.handle || !n.utilization || !n.memory) {
      n.why = "no NVML (libnvidia-ml.so.1 lacks the functions used)";
      return;
    }
    if (n.init() != 0) {
      n.why = "no NVML (nvmlInit failed: no driver or no GPU)";
      return;
    }
    n.ok = true;
  });
  return n;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (str_starts_with(line, "model name")) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return str_trim(line.substr(colon + 1));
    }
  return "cpu";
}

double ram_gib() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0
             ? static_cast<double>(pages) * static_cast<double>(page) / (1024.0 * 1024.0 * 1024.0)
             : 0;
}

}  // namespace

DeviceInfo hw_device_probe() {
  DeviceInfo d;
  d.cpu_cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  const Nvml& n = nvml();
  d.nvml = n.ok;
  if (n.ok) {
    char buf[96] = {0};
    if (n.driver_version && n.driver_version(buf, sizeof buf) == 0) d.driver_version = buf;
    int cuda = 0;
    if (n.cuda_version && n.cuda_version(&cuda) == 0 && cuda > 0)
      d.cuda_version = std::to_string(cuda / 1000) + "." + std::to_string((cuda % 1000) / 10);
  } else {
    d.notes.push_back(n.why);
  }
  d.device_count = cuda_device_count();
#ifdef LUATUNE_HAS_CUDA
  if (d.device_count > 0) {
    const cudaDeviceProp* prop = at::cuda::getDeviceProperties(0);
    d.kind = "cuda";
    d.name = prop->name;
    d.memory_gb = static_cast<double>(prop->totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
    d.sm_count = prop->multiProcessorCount;
    return d;
  }
#endif
  if (d.device_count > 0) d.notes.push_back("CUDA devices present, but this build has no CUDA");
  d.kind = "cpu";
  d.name = cpu_model_name();
  d.memory_gb = ram_gib();
  return d;
}

std::string hw_device_name(const std::string& device, std::string* resolved) {
  const c10::Device d = device_parse(device);
  if (resolved) *resolved = device_name(d);
#ifdef LUATUNE_HAS_CUDA
  if (d.is_cuda()) return at::cuda::getDeviceProperties(d.has_index() ? d.index() : 0)->name;
#endif
  return cpu_model_name();
}

// ============================================================================================
// Sampler

HwMonitor::HwMonitor(double interval_s, int device) : interval_(interval_s), device_(device) {
  if (!nvml().ok) {
    summary_.note = nvml().why;
    return;
  }
  thread_ = std::thread([this] { loop(); });
}

HwMonitor::~HwMonitor() {
  stop();
}

void HwMonitor::loop() {
  const Nvml& n = nvml();
  nvmlDevice_t dev = nullptr;
  if (n.handle(static_cast<unsigned int>(device_), &dev) != 0) {
    summary_.note = "NVML has no device " + std::to_string(device_);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  while (!stop_.load()) {
    NvmlUtilization u{};
    NvmlMemory m{};
    unsigned int mw = 0;
    if (n.utilization(dev, &u) == 0 && n.memory(dev, &m) == 0) {
      summary_.samples++;
      util_sum_ += u.gpu;
      summary_.util_max = std::max(summary_.util_max, static_cast<double>(u.gpu));
      summary_.mem_max_gb =
          std::max(summary_.mem_max_gb, static_cast<double>(m.used) / (1024.0 * 1024.0 * 1024.0));
      if (n.power && n.power(dev, &mw) == 0) {
        power_sum_ += mw / 1000.0;
        summary_.energy_wh += mw / 1000.0 * interval_ / 3600.0;
      }
    }
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(interval_);
    while (!stop_.load() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  summary_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

MonitorSummary HwMonitor::stop() {
  if (stopped_) return summary_;
  stopped_ = true;
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (summary_.samples > 0) {
    summary_.util_mean = util_sum_ / static_cast<double>(summary_.samples);
    summary_.power_mean_w = power_sum_ / static_cast<double>(summary_.samples);
  }
  return summary_;
}

}  // namespace luatune
