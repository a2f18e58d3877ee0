// What the run has to work with: the GPU (name, memory, SMs, driver and CUDA versions, through
// LibTorch and NVML loaded at run time with dlopen, so nothing links against the driver) or, without
// one, the CPU (model name, cores, RAM); and an NVML sampler of utilisation, memory and power over a
// run. Without NVML the sampler records nothing and says why.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace luatune {

struct DeviceInfo {
  std::string kind = "cpu";  // "cuda" or "cpu"
  std::string name;          // "NVIDIA H100 80GB HBM3", or the CPU model name
  int device_count = 0;      // CUDA devices
  double memory_gb = 0;      // GPU: total memory (GiB); CPU: RAM (GiB)
  int sm_count = 0;          // GPU multiprocessors
  int cpu_cores = 0;
  std::string driver_version;  // NVML; "" when unknown
  std::string cuda_version;    // the driver's CUDA version ("12.4"); "" when unknown
  bool nvml = false;
  std::vector<std::string> notes;
};
DeviceInfo hw_device_probe();

// What a run's `device` ("auto", "cpu", "cuda", "cuda:N") resolves to on this machine, for the run's
// records (metrics.jsonl's hardware, the run report): the device as LibTorch names it ("cuda:0",
// "cpu") in *resolved, and the returned name of the GPU ("NVIDIA H200") or of the CPU's model. Fails
// like device_parse on a device this machine lacks.
std::string hw_device_name(const std::string& device, std::string* resolved);

struct MonitorSummary {
  int64_t samples = 0;
  double util_mean = 0, util_max = 0;  // GPU utilisation, percent
  double mem_max_gb = 0;               // used device memory (GiB), as NVML sees it
  double power_mean_w = 0, energy_wh = 0;
  double seconds = 0;
  std::string note;  // "no NVML" when there was nothing to sample
};

// Samples device 0 (or `device`) every `interval` seconds on a background thread until stop().
class HwMonitor {
 public:
  HwMonitor(double interval_s, int device);
  ~HwMonitor();
  MonitorSummary stop();  // idempotent; later calls return the same summary
  bool running() const { return thread_.joinable(); }

 private:
  void loop();
  double interval_;
  int device_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  MonitorSummary summary_;
  double util_sum_ = 0, power_sum_ = 0;
  bool stopped_ = false;
};

}  // namespace luatune
