// 4-bit weights as tensors: bitsandbytes' QuantState, quantizing and dequantizing a weight (CPU
// reference or, in CUDA builds, the kernels of host/quant/kernels), the 4-bit linear whose
// backward re-dequantizes instead of keeping the weight, and bitsandbytes' serialised layout.
// Rules: host/quant/nf4.h; layout: docs/qlora.md, "The format" and "Sources".
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "host/quant/nf4.h"

namespace luatune {

struct QuantConfig {
  nf4::QuantType type = nf4::QuantType::nf4;
  int64_t blocksize = 64;    // 32 .. 4096, a power of two (bitsandbytes' rule)
  bool double_quant = true;  // 8-bit absmax in blocks of nested_blocksize (QLoRA's default)
  int64_t nested_blocksize = 256;
  // There is no separate compute dtype: a 4-bit weight is dequantized into the activations' dtype
  // (the model dtype, bf16 for QLoRA), which config.json reports as bnb_4bit_compute_dtype.
};

const char* quant_type_name(nf4::QuantType t);                                    // "nf4" / "fp4"
nf4::QuantType quant_type_parse(const std::string& s, const std::string& where);  // one-line error otherwise
// Fails (one line naming `where`) unless the blocksize is one bitsandbytes accepts.
void quant_config_check(const QuantConfig& c, const std::string& where);
// Whether the module `name` (an HF module name, "model.layers.0.mlp.up_proj") is one of `skip`: an
// entry equal to it or to a dot-separated ending of it, as LoRA targets match (modules left dense).
bool quant_skipped(const std::string& name, const std::vector<std::string>& skip);

// One weight's 4-bit state (bitsandbytes' QuantState). The packed codes themselves are a uint8
// tensor ((n + 1) / 2, 1) kept beside it (Linear::weight for a quantized Linear).
struct QuantState {
  nf4::QuantType type = nf4::QuantType::nf4;
  int64_t blocksize = 64;
  std::vector<int64_t> shape;                       // the weight's logical shape, (out, in)
  at::ScalarType dtype = at::ScalarType::BFloat16;  // what dequantize returns (bnb's "dtype")
  at::Tensor absmax;                                // float32 (blocks), or uint8 (blocks) when nested
  at::Tensor code;                                  // float32 (16): quant_map
  bool nested = false;
  at::Tensor nested_absmax;  // float32 (ceil(blocks / nested_blocksize))
  at::Tensor nested_code;    // float32 (256): the 8-bit dynamic map
  int64_t nested_blocksize = 256;
  float offset = 0.0f;  // nested_offset: mean of the absmax before 8-bit coding

  int64_t numel() const;        // of the logical weight
  int64_t bytes() const;        // packed codes + scales, as stored
  void to(c10::Device device);  // moves every tensor (packed codes are moved by the caller)
};

// bitsandbytes' 8-bit dynamic map (create_dynamic_map(signed=True, max_exponent_bits=7,
// total_bits=8)), float32 (256) on the CPU, computed with Torch's float32 ops as bitsandbytes does.
at::Tensor dynamic_map_8bit();

// Quantizes `w` (a floating tensor on any device) -> packed uint8 ((n + 1) / 2, 1) on w's device
// and its state (dtype = w's dtype). On CUDA (CUDA builds) the kernel codes the 4-bit part.
std::pair<at::Tensor, QuantState> quantize_4bit(const at::Tensor& w, const QuantConfig& c);
// The float32 scale of every block, double quantization undone: (blocks) on the state's device.
at::Tensor block_scales(const QuantState& s);
// The weight back, shape s.shape, in `dtype` (kUndefined = s.dtype), on packed's device.
at::Tensor dequantize_4bit(const at::Tensor& packed, const QuantState& s,
                           at::ScalarType dtype = at::ScalarType::Undefined);

// y = x W^T + bias with W dequantized into x's dtype for the product and freed after it; backward
// dequantizes again for dL/dx rather than saving W (so activations, not weights, are what a
// QLoRA backward keeps). W gets no gradient; x and bias do when they require it.
at::Tensor linear_4bit(const at::Tensor& x, const at::Tensor& packed, const QuantState& s,
                       const at::Tensor& bias);

// bitsandbytes' serialised tensors for the weight `weight_name` ("model.layers.0.mlp.up_proj.weight"):
// the packed codes under weight_name, then .absmax, .quant_map, [.nested_absmax, .nested_quant_map],
// .quant_state.bitsandbytes__<type> (UTF-8 JSON as uint8). CPU tensors.
std::vector<std::pair<std::string, at::Tensor>> quant_state_tensors(const std::string& weight_name,
                                                                    const at::Tensor& packed,
                                                                    const QuantState& s);
// transformers' quantization_config object for config.json (JSON text, BitsAndBytesConfig.to_dict()):
// the 4-bit settings of `s` (the model's first 4-bit Linear), activations in `compute_dtype`, and the
// Linears left dense (HF module names) as llm_int8_skip_modules.
std::string quant_hf_config(const QuantState& s, at::ScalarType compute_dtype,
                            const std::vector<std::string>& dense_modules);
// Whether `names` (a checkpoint's tensor names) hold a 4-bit weight `weight_name`.
bool quant_state_present(const std::string& weight_name, const std::function<bool(const std::string&)>& has);
// Reads them back: `get(name)` returns a tensor by name (failing in one line if absent). `where` names
// the file in errors; expected_shape is the logical (out, in) shape config.json implies.
std::pair<at::Tensor, QuantState> quant_state_from_tensors(
    const std::string& weight_name, const std::function<at::Tensor(const std::string&)>& get,
    const std::function<bool(const std::string&)>& has, const std::vector<int64_t>& expected_shape,
    const std::string& where);

}  // namespace luatune
