// RoPE frequencies and application, following transformers' modeling_rope_utils.py formulas
// (re-derived from the reference notes, not copied).
#include "host/model/rope.h"

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

namespace luatune {

namespace {

// yarn: the dimension index at which a given number of rotations fits the original context.
double yarn_correction_dim(double rotations, double dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (rotations * 2 * M_PI))) / (2 * std::log(base));
}

}  // namespace

at::Tensor rope_inv_freq(const ModelConfig& c) {
  const int64_t dim = c.head_dim;
  const double base = c.rope.theta;
  // inv_freq[i] = 1 / base^(2i / dim), computed in float32 from int64 exponents as HF does.
  at::Tensor exps = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<float>(dim);
  at::Tensor inv_freq = 1.0 / at::pow(base, exps);
  const RopeConfig& r = c.rope;
  switch (r.type) {
    case RopeType::rope_default:
      return inv_freq;
    case RopeType::rope_linear:
      return inv_freq / r.factor;
    case RopeType::rope_llama3: {
      const double old_len = static_cast<double>(r.original_max_position);
      const double low_wavelen = old_len / r.low_freq_factor;
      const double high_wavelen = old_len / r.high_freq_factor;
      // Python's `scalar / tensor` is reciprocal() * scalar (two roundings); ATen's C++ operator is one
      // division. Written the Python way so the frequencies match HF's bit for bit.
      at::Tensor wavelen = inv_freq.reciprocal() * (2 * M_PI);
      // Long wavelengths (low frequencies) are divided by factor; short ones kept; between, a blend.
      at::Tensor scaled = at::where(wavelen > low_wavelen, inv_freq / r.factor, inv_freq);
      at::Tensor smooth =
          (wavelen.reciprocal() * old_len - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      at::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
      at::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
      return at::where(medium, smoothed, scaled);
    }
    case RopeType::rope_yarn: {
      const double max_pos = static_cast<double>(r.original_max_position > 0 ? r.original_max_position
                                                                             : c.max_position_embeddings);
      at::Tensor pos_freqs = at::pow(base, exps);
      at::Tensor extrapolation = 1.0 / pos_freqs;
      at::Tensor interpolation = 1.0 / (r.factor * pos_freqs);
      double low = yarn_correction_dim(r.beta_fast, dim, base, max_pos);
      double high = yarn_correction_dim(r.beta_slow, dim, base, max_pos);
      if (r.truncate) low = std::floor(low), high = std::ceil(high);
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(dim - 1));
      if (low == high) high += 0.001;
      at::Tensor ramp = ((at::arange(dim / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
      at::Tensor extrapolation_factor = 1 - ramp;
      return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
    }
  }
  return inv_freq;
}

at::Tensor rope_inv_freq_on(const ModelConfig& c, c10::Device device) {
  // Keyed by every field rope_inv_freq reads, doubles in hex so equal means bit-equal.
  const RopeConfig& r = c.rope;
  char key[512];
  std::snprintf(key, sizeof key, "%s|%d|%lld|%a|%a|%a|%a|%lld|%lld|%a|%a|%d", device.str().c_str(),
                static_cast<int>(r.type), static_cast<long long>(c.head_dim), r.theta, r.factor,
                r.low_freq_factor, r.high_freq_factor, static_cast<long long>(r.original_max_position),
                static_cast<long long>(c.max_position_embeddings), r.beta_fast, r.beta_slow,
                r.truncate ? 1 : 0);
  // Never freed: a static map of device tensors would be destroyed after the CUDA runtime at exit.
  static std::mutex* mu = new std::mutex;
  static auto* cache = new std::map<std::string, at::Tensor>;
  std::lock_guard<std::mutex> lock(*mu);
  at::Tensor& t = (*cache)[key];
  if (!t.defined()) t = rope_inv_freq(c).to(device);
  return t;
}

std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& inv_freq, const at::Tensor& positions,
                                               double attention_scaling, at::ScalarType dtype) {
  // (B, T, 1) * (D/2) -> (B, T, D/2), float32 throughout as HF keeps autocast off here.
  at::Tensor freqs = positions.to(at::kFloat).unsqueeze(-1) * inv_freq.to(positions.device());
  at::Tensor emb = at::cat({freqs, freqs}, -1);
  at::Tensor cos = emb.cos(), sin = emb.sin();
  if (attention_scaling != 1.0) cos = cos * attention_scaling, sin = sin * attention_scaling;
  return {cos.to(dtype), sin.to(dtype)};
}

at::Tensor rope_apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

}  // namespace luatune
