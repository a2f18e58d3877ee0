// The GPU catalog: memory, bandwidth, dense bf16/fp16 peaks, interconnect and a default price per
// GPU-hour (with its source and date) for each GPU luatune can plan for. Read from
// data/gpu_catalog.json (or a user's file of the same schema); every field and its sources are in
// docs/hardware.md. No LibTorch.
#pragma once

#include <string>
#include <vector>

namespace luatune {

struct GpuSpec {
  std::string name;                  // "H100 SXM"
  std::vector<std::string> aliases;  // device-name fragments: "H100 80GB HBM3"
  double memory_gb = 0;              // device memory as sold; the planner compares GiB against it
  double bandwidth_gbs = 0;          // memory bandwidth, GB/s (vendor datasheet)
  double bf16_tflops = 0;            // dense peak, fp32 accumulate; 0 when the GPU has no bf16
  double fp16_tflops = 0;
  bool bf16 = true;  // bf16 tensor cores (T4: false)
  std::string interconnect;
  double price_per_hour = 0;  // USD per GPU-hour
  std::string price_source, price_date, notes;

  // The peak for training in `dtype` ("bf16", "fp16"; fp32 uses the bf16/fp16 tensor peak too,
  // since MFU is quoted against it); fp16 on GPUs without bf16.
  double peak_tflops(const std::string& dtype) const;
};

// The shipped catalog: $LUATUNE_GPU_CATALOG when set, else <luatune home>/data/gpu_catalog.json.
std::string hw_catalog_default_path();
// Reads a catalog file. Errors name the file, the entry and the field:
// "hw.catalog: gpus.json: entry 3 (\"L4\"): field 'memory_gb' must be a positive number".
std::vector<GpuSpec> hw_catalog_load(const std::string& path);
std::vector<GpuSpec> hw_catalog_parse(const std::string& json_text, const std::string& source);
// The catalog entry a device name ("NVIDIA H100 80GB HBM3") is, by its aliases (whole-word,
// case-insensitive; the longest alias wins, so "L4" does not match "L40S"); nullptr when none.
const GpuSpec* hw_catalog_match(const std::vector<GpuSpec>& catalog, const std::string& device_name);
// The entry named `name` (or one whose alias it is); fails listing the names when none.
const GpuSpec& hw_catalog_find(const std::vector<GpuSpec>& catalog, const std::string& name);

}  // namespace luatune
