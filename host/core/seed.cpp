// The run's seed and deterministic mode (see seed.h).
#include "host/core/seed.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>

#include <cmath>
#include <cstdlib>
#include <mutex>

#include "host/core/device.h"
#include "host/core/error.h"
#include "host/core/strings.h"

namespace luatune {

uint64_t seed_check(double value, const std::string& what) {
  if (!(value >= 0 && value <= kSeedMax && value == std::floor(value)))
    fail_usage(what + " must be a whole number in [0, 2^53], got " + str_from_number(value));
  return static_cast<uint64_t>(value);
}

std::string seed_env_text() {
  const char* v = std::getenv("LUATUNE_SEED");
  return v ? str_trim(v) : "";
}

uint64_t seed_from_env() {
  std::string text = seed_env_text();
  if (text.empty()) return 0;
  double v = 0;
  if (!str_to_number(text, &v))
    fail_usage("LUATUNE_SEED must be a whole number in [0, 2^53], got '" + text + "'");
  return seed_check(v, "LUATUNE_SEED");
}

namespace {
void set_seed(at::Generator gen, uint64_t seed) {
  std::lock_guard<std::mutex> lock(gen.mutex());  // LibTorch's rule for touching a shared generator
  gen.set_current_seed(seed);
}
}  // namespace

void seed_torch(uint64_t seed) {
  set_seed(at::detail::getDefaultCPUGenerator(), seed);
#ifdef LUATUNE_HAS_CUDA
  // Every device, not only the one this rank trains on: a recipe may move work to another.
  for (int i = 0; i < cuda_device_count(); i++)
    set_seed(at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(i))),
             seed);
#endif
}

std::string seed_deterministic() {
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
  // Wanted before the first cuBLAS call (PyTorch's docs ask for it before the program starts);
  // config{} comes first in a recipe, before any model or CUDA tensor exists.
  const char* set = std::getenv("CUBLAS_WORKSPACE_CONFIG");
  std::string cublas = set && *set ? std::string(set) + " (from the environment)" : ":4096:8";
  if (!(set && *set)) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 1);
  // The ops luatune reaches that LibTorch alerts on under deterministic algorithms on CUDA (no
  // deterministic kernel); sources in docs/reproducibility.md.
  return "deterministic: LibTorch deterministic algorithms on (an op without a deterministic kernel raises), "
         "cuDNN deterministic, CUBLAS_WORKSPACE_CONFIG=" +
         cublas +
         "; on CUDA LibTorch documents no deterministic kernel for torch.cumsum (also in generate's top_p "
         "sampling) or torch.cross_entropy (NLLLoss), so those raise (docs/reproducibility.md)\n";
}

}  // namespace luatune
