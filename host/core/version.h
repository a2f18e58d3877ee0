// Versions of luatune and what it was built against, and the devices this machine has:
// the text of `runner --version`.
#pragma once

#include <string>

namespace luatune {

std::string version_luatune();  // "0.1.0"
// `git describe --always --dirty --tags` of the checkout at `dir`, or "" when it is none (or git is missing).
std::string version_git_describe(const std::string& dir);
std::string version_torch();  // LibTorch version compiled against, e.g. "2.11.0"
std::string version_cuda();   // CUDA runtime version, or "none (CPU-only LibTorch)"
// Multi-line report: luatune, LibTorch, CUDA, NCCL, Lua, the malloc in use and one line per device found.
std::string version_report(const std::string& lua_version);

}  // namespace luatune
