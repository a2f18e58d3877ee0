// Version and device report (see version.h).
#include "host/core/version.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <cstdio>
#include <sstream>

#include "host/core/allocator.h"
#include "host/core/device.h"

#ifdef LUATUNE_HAS_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime_api.h>
#endif

namespace luatune {

std::string version_luatune() {
  return LUATUNE_VERSION;
}

std::string version_git_describe(const std::string& dir) {
  if (dir.empty()) return "";
  std::string cmd = "git -C '" + dir + "' describe --always --dirty --tags 2>/dev/null";
  if (dir.find('\'') != std::string::npos) return "";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return "";
  char buf[256] = {0};
  std::string out = std::fgets(buf, sizeof buf, p) ? buf : "";
  ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string version_torch() {
  return TORCH_VERSION;
}

std::string version_cuda() {
#ifdef LUATUNE_HAS_CUDA
  int rt = 0;
  std::ostringstream os;
  os << CUDART_VERSION / 1000 << "." << (CUDART_VERSION % 1000) / 10 << " (compiled)";
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) os << ", runtime " << rt / 1000 << "." << (rt % 1000) / 10;
  int drv = 0;
  if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0)
    os << ", driver " << drv / 1000 << "." << (drv % 1000) / 10;
  return os.str();
#else
  return "none (CPU-only LibTorch)";
#endif
}

std::string version_report(const std::string& lua_version) {
  std::ostringstream os;
  os << "luatune " << version_luatune() << "\n";
  os << "LibTorch " << version_torch() << "\n";
  os << "CUDA " << version_cuda() << "\n";
#ifdef LUATUNE_HAS_NCCL
  os << "NCCL yes\n";
#else
  os << "NCCL no\n";
#endif
  os << lua_version << "\n";
  os << "malloc " << allocator_name() << "\n";
  os << "OpenMP wait " << openmp_wait_policy() << "\n";
  os << "devices:\n";
  os << "  cpu (" << at::get_num_threads() << " threads)\n";
#ifdef LUATUNE_HAS_CUDA
  for (int i = 0; i < cuda_device_count(); i++) {
    const cudaDeviceProp* p = at::cuda::getDeviceProperties(i);
    os << "  cuda:" << i << " " << p->name << " (" << (p->totalGlobalMem >> 20) << " MiB, "
       << p->multiProcessorCount << " SMs, sm_" << p->major << p->minor << ")\n";
  }
#endif
  if (cuda_device_count() == 0) os << "  no CUDA device\n";
  return os.str();
}

}  // namespace luatune
