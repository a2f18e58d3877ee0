// Precompiled header for luatune targets: the heavy LibTorch headers most sources include, parsed
// once per target instead of once per file (ATen alone costs ~6 s per file on these machines).
// Only included through CMake's target_precompile_headers; sources still include what they use.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>
