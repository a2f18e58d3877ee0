// Hugging Face model directories in and out: load (mmap, convert and move one tensor at a time, so
// an 8B model never needs twice its size in host memory), random init as HF initialises, and save
// (config.json, generation_config.json, tokenizer files, sharded safetensors).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/model/transformer.h"
#include "host/quant/quant.h"

namespace luatune {

struct LoadOptions {
  LoadOptions() = default;
  LoadOptions(std::string dtype_, std::string device_ = "cpu")
      : dtype(std::move(dtype_)), device(std::move(device_)) {}
  // Target dtype; "auto" = the checkpoint's torch_dtype (bf16/f16/f32), "" = same as "auto".
  std::string dtype = "auto";
  std::string device = "cpu";  // "cpu", "cuda", "cuda:N", "auto"
  // QLoRA: quantize every decoder-layer Linear to 4 bits as it is loaded (converted and moved one
  // tensor at a time, then quantized on the device), so the dense model never sits there whole.
  // Modules matching `quantize_skip` (as LoRA targets match) stay dense. A checkpoint that is
  // already 4-bit (bitsandbytes' layout) loads as it is, with or without this.
  bool quantize = false;
  QuantConfig quant;
  std::vector<std::string> quantize_skip;
};

std::shared_ptr<Model> model_load(const std::string& dir, const LoadOptions& options = {});

// Random weights for `config` as HF's _init_weights: linear and embedding weights ~ N(0,
// initializer_range), biases 0, norm weights 1 (Gemma 2: 0, since it stores w - 1), the padding
// row of the embedding zeroed. Drawn in float32 on CPU from `seed`, then cast and moved.
std::shared_ptr<Model> model_init(const ModelConfig& config, uint64_t seed, at::ScalarType dtype,
                                  c10::Device device);

struct SaveOptions {
  uint64_t max_shard_bytes = 5000000000ull;
  std::vector<std::string> tokenizer_files;  // copied into the directory (tokenizer.json, ...)
  // Written beside the model's weights, e.g. a reward model's score.weight (host/train/reward.h).
  std::vector<std::pair<std::string, at::Tensor>> extra_tensors;
};

// Writes a directory HF transformers loads. 4-bit Linears are written in bitsandbytes' layout with
// config.json's quantization_config (transformers + bitsandbytes load it 4-bit); a dense model's
// config.json has none, even when it was loaded from a 4-bit checkpoint. Every file is written to a temporary
// name and renamed; config.json goes last, so a directory with a config.json is complete.
void model_save(const Model& model, const std::string& dir, const SaveOptions& options = {});

}  // namespace luatune
