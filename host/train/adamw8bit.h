// bitsandbytes' blockwise 8-bit AdamW state: the two moments of a flat parameter kept as uint8
// codes into the 256-value dynamic maps with one float32 absmax per block, dequantized, updated in
// float32 and re-quantized each step. Pure ATen ops (CPU and CUDA), chunked so the float32
// temporaries stay small. The facts it relies on and their sources: docs/adamw8bit.md.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace luatune {

// Elements per absmax block: bitsandbytes >= 0.44 (PR #1365) uses 256 for its 8-bit blockwise
// optimizers; before that it was 2048 (kAdam8bitBlockLegacy). A state remembers its own block.
constexpr int64_t kAdam8bitBlock = 256;
constexpr int64_t kAdam8bitBlockLegacy = 2048;
// bitsandbytes' min_8bit_size: a parameter with fewer elements keeps float32 moments.
constexpr int64_t kAdam8bitMinSize = 4096;

// The dynamic quantization maps, float32 (256) on the CPU, sorted ascending:
// signed = create_dynamic_map(signed=True) for the first moment (values in [-0.99297, 1], 0 at 127);
// unsigned = create_dynamic_map(signed=False) for the second moment (values in [0, 1], 0 at 0).
const at::Tensor& adam8bit_signed_map();
const at::Tensor& adam8bit_unsigned_map();

// The moments of one flat parameter (or parameter shard) of `numel` elements.
struct Adam8bitState {
  int64_t numel = 0;
  int64_t block = kAdam8bitBlock;  // elements per absmax block (quantized states only)
  bool quantized = false;          // false: float32 moments (numel < kAdam8bitMinSize, as bitsandbytes)
  at::Tensor exp_avg;              // quantized: uint8 (numel) codes into the signed map; else float32 (numel)
  at::Tensor exp_avg_sq;        // quantized: uint8 (numel) codes into the unsigned map; else float32 (numel)
  at::Tensor absmax1, absmax2;  // quantized: float32 (ceil(numel / block)) per-block scales; else undefined

  int64_t blocks() const;  // ceil(numel / block) when quantized, else 0
  int64_t bytes() const;   // bytes the tensors above hold: 2 n + 8 blocks quantized, 8 n otherwise

  // For checkpoints: "<prefix>.exp_avg", "<prefix>.exp_avg_sq" and, quantized, "<prefix>.absmax1",
  // "<prefix>.absmax2"; detached CPU copies.
  std::vector<std::pair<std::string, at::Tensor>> tensors(const std::string& prefix) const;
  // Copies those tensors (from any device) into this state, which adam8bit_init sized: an exact
  // round trip. Fails naming the tensor that is missing or has the wrong dtype or shape.
  void load(const std::vector<std::pair<std::string, at::Tensor>>& tensors, const std::string& prefix);
};

// Zero moments for `numel` elements on `device`: quantized when numel >= kAdam8bitMinSize.
Adam8bitState adam8bit_init(int64_t numel, c10::Device device, int64_t block = kAdam8bitBlock);

// One AdamW step on the flat parameter w (float32, bf16 or f16, 1-D (n)) with gradient g (any float
// dtype, n elements), step t 1-based. As torch.optim.AdamW, in float32:
//   w *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
// A bf16/f16 w is updated in float32 and rounded once. Quantized states are dequantized before and
// re-quantized after with fresh per-block absmax, as bitsandbytes' kernel does.
void adam8bit_update(at::Tensor& w, const at::Tensor& g, Adam8bitState& s, double lr, double beta1,
                     double beta2, double eps, double weight_decay, int64_t step);

// Blockwise quantization of x (float32 (n), any device) with `map` (float32 (256), sorted): per
// block absmax = max |x|, code = the nearest map value to x / absmax (an all-zero block codes 0).
// With a signed map a negative x never takes the code of 0 or a positive value (bitsandbytes'
// sign rule for the first moment). codes (uint8 (n)) and absmax (float32 (ceil(n / block))) are
// written in place when they have those shapes on x's device, else allocated.
void adam8bit_quantize(const at::Tensor& x, const at::Tensor& map, at::Tensor& codes, at::Tensor& absmax,
                       int64_t block = kAdam8bitBlock);
// The inverse: map[codes] * absmax[i / block], float32 (n) on codes' device.
at::Tensor adam8bit_dequantize(const at::Tensor& codes, const at::Tensor& absmax, const at::Tensor& map,
                               int64_t n, int64_t block = kAdam8bitBlock);

}  // namespace luatune
