// Seeding in one place. The runner seeds every process-global generator from one number: when the
// Lua state opens (LUATUNE_SEED, else 0) and again when config{} resolves (the config's `seed`;
// LUATUNE_SEED, else 0, when it has none). Per-call seeds (lora.apply{seed=}, data.jsonl{seed=},
// models.init{seed=}, ...) draw from generators of their own and are unaffected. `deterministic`
// asks LibTorch for deterministic kernels as well. What each covers, and what it cannot:
// docs/reproducibility.md.
#pragma once

#include <cstdint>
#include <string>

namespace luatune {

// The largest seed: every whole number up to 2^53 survives a trip through a Lua number.
constexpr double kSeedMax = 9007199254740992.0;

// `value` as a seed; fails (UsageError) "<what> must be a whole number in [0, 2^53], got ..." otherwise.
uint64_t seed_check(double value, const std::string& what);
// LUATUNE_SEED's text, "" when unset or empty.
std::string seed_env_text();
// LUATUNE_SEED as a seed, 0 when unset; a value that is not a seed fails (UsageError).
uint64_t seed_from_env();

// Seeds LibTorch's default CPU generator and, in CUDA builds, every visible device's default
// generator (dropout, torch.rand, mask samples and whatever else draws without a generator of its own).
void seed_torch(uint64_t seed);

// deterministic=true: LibTorch's deterministic algorithms (warn_only off: an op with no deterministic
// kernel raises rather than warns, and the flash-attention backward takes its deterministic path),
// deterministic cuDNN without benchmarking, and CUBLAS_WORKSPACE_CONFIG=:4096:8 unless already set.
// Returns the one line the runner prints about it.
std::string seed_deterministic();

}  // namespace luatune
