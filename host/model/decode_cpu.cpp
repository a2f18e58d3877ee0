// The fast CPU decode step (see decode_cpu.h).
#include "host/model/decode_cpu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LT_DECODE_X86 1
#endif

#include "host/core/error.h"
#include "host/model/rope.h"

namespace luatune {

namespace {

// Four rows of W against x at once (x read once for the four), `rows` <= 4. Portable: eight partial
// sums per row, which compilers vectorise without reassociating anything themselves.
void rows_portable(const float* W, int64_t ld, const float* x, int64_t n, float* y, int64_t rows) {
  for (int64_t r = 0; r < rows; r++) {
    const float* w = W + r * ld;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
      for (int k = 0; k < 8; k++) acc[k] += w[j + k] * x[j + k];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; j < n; j++) s += w[j] * x[j];
    y[r] = s;
  }
}

#ifdef LT_DECODE_X86
__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  __m128 sh = _mm_movehdup_ps(lo);
  __m128 sums = _mm_add_ps(lo, sh);
  sh = _mm_movehl_ps(sh, sums);
  return _mm_cvtss_f32(_mm_add_ss(sums, sh));
}

// Four rows, two accumulators each (eight FMA chains in flight), 16 floats a round.
__attribute__((target("avx2,fma"))) void rows4_avx2(const float* W, int64_t ld, const float* x, int64_t n,
                                                    float* y) {
  const float *w0 = W, *w1 = W + ld, *w2 = W + 2 * ld, *w3 = W + 3 * ld;
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256 xa = _mm256_loadu_ps(x + j), xb = _mm256_loadu_ps(x + j + 8);
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + j), xa, a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + j), xa, a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + j), xa, a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + j), xa, a3);
    b0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + j + 8), xb, b0);
    b1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + j + 8), xb, b1);
    b2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + j + 8), xb, b2);
    b3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + j + 8), xb, b3);
  }
  for (; j + 8 <= n; j += 8) {
    const __m256 xa = _mm256_loadu_ps(x + j);
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + j), xa, a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + j), xa, a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w2 + j), xa, a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w3 + j), xa, a3);
  }
  float s0 = hsum(_mm256_add_ps(a0, b0)), s1 = hsum(_mm256_add_ps(a1, b1)), s2 = hsum(_mm256_add_ps(a2, b2)),
        s3 = hsum(_mm256_add_ps(a3, b3));
  for (; j < n; j++) {
    s0 += w0[j] * x[j], s1 += w1[j] * x[j], s2 += w2[j] * x[j], s3 += w3[j] * x[j];
  }
  y[0] = s0, y[1] = s1, y[2] = s2, y[3] = s3;
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}
#endif

float silu(float g) {
  return g / (1.0f + std::exp(-g));
}
float gelu_tanh(float g) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * g * (1.0f + std::tanh(k * (g + 0.044715f * g * g * g)));
}
float gelu(float g) {
  return 0.5f * g * (1.0f + std::erf(g * 0.7071067811865476f));
}

// HF's LlamaRMSNorm in float32: x * rsqrt(mean(x^2) + eps) * w.
void rms_norm(const float* x, const float* w, float* out, int64_t n, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; i++) ss += double(x[i]) * x[i];
  const float r = 1.0f / std::sqrt(static_cast<float>(ss / double(n)) + static_cast<float>(eps));
  for (int64_t i = 0; i < n; i++) out[i] = w[i] * (x[i] * r);
}

const float* fptr(const at::Tensor& t) {
  return t.defined() ? t.data_ptr<float>() : nullptr;
}

}  // namespace

void decode_matvec(const float* W, const float* x, float* y, int64_t rows, int64_t cols, const float* bias) {
  const int64_t blocks = (rows + 3) / 4;
  // About 64 K multiply-adds a task, so a small matrix stays on one thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(cols * 4, 1));
  at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; b++) {
      const int64_t r = b * 4, n = std::min<int64_t>(4, rows - r);
#ifdef LT_DECODE_X86
      if (n == 4 && has_avx2()) {
        rows4_avx2(W + r * cols, cols, x, cols, y + r);
      } else {
        rows_portable(W + r * cols, cols, x, cols, y + r, n);
      }
#else
      rows_portable(W + r * cols, cols, x, cols, y + r, n);
#endif
      if (bias)
        for (int64_t i = 0; i < n; i++) y[r + i] += bias[r + i];
    }
  });
}

std::string decode_cpu_unsupported(const Model& m) {
  const ModelConfig& c = m.config;
  if (!m.device().is_cpu()) return "the model is not on the CPU";
  if (m.dtype() != at::kFloat) return "the model is not float32";
  if (c.gemma_norms || c.attn_logit_softcap > 0 || c.final_logit_softcap > 0)
    return "Gemma 2's norms and softcaps";
  if (m.residency) return "weights sharded by a ZeRO-3 trainer";
  for (const LayerWeights& L : m.layers) {
    if (L.attn_branch && L.attn_branch->enabled) return "an attention branch (LLaMA-Adapter)";
    for (const Linear* lin : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) {
      if (lin->quant) return "4-bit weights";
      if (lin->adapter && lin->adapter->enabled) return "an enabled adapter (merge it first)";
      if (!lin->weight.is_contiguous()) return "a non-contiguous weight";
    }
  }
  if (!m.embed.is_contiguous() || !m.output_weight().is_contiguous()) return "a non-contiguous weight";
  return "";
}

DecodeCpu::DecodeCpu(const Model& model, KVCache* cache) : model_(model), cache_(cache) {
  const std::string why = decode_cpu_unsupported(model);
  LT_CHECK(why.empty(), "decode: the fast CPU step cannot run this model: " << why);
  LT_CHECK(cache && !cache->k.empty() && cache->k[0].size(0) == 1 &&
               cache->k[0].scalar_type() == at::kFloat && cache->k[0].is_contiguous(),
           "decode: the fast CPU step needs a float32 KV cache of batch 1");
  const ModelConfig& c = model.config;
  at::Tensor inv = rope_inv_freq(c).to(at::kFloat).contiguous();
  inv_freq_.assign(inv.data_ptr<float>(), inv.data_ptr<float>() + inv.numel());
  rope_scale_ = c.rope.type == RopeType::rope_yarn ? c.rope.attention_factor : 1.0;
  const int64_t C = c.hidden_size, D = c.head_dim, HD = c.num_heads * D, KVD = c.num_kv_heads * D;
  x_.resize(C), h_.resize(C), qkv_.resize(HD + 2 * KVD), att_.resize(HD);
  scores_.resize(cache->capacity), gu_.resize(2 * c.intermediate_size), logits_.resize(c.vocab_size);
}

at::Tensor DecodeCpu::step(int64_t token) {
  const ModelConfig& c = model_.config;
  const int64_t C = c.hidden_size, D = c.head_dim, H = c.num_heads, KV = c.num_kv_heads,
                I = c.intermediate_size;
  const int64_t V = c.vocab_size, HD = H * D, KVD = KV * D, half = D / 2, cap = cache_->capacity;
  const int64_t p = cache_->length;
  LT_CHECK(p < cap, "model:generate: KV cache full (" << p << " of " << cap << ")");
  LT_CHECK(token >= 0 && token < V, "model:generate: token id " << token << " outside [0, " << V << ")");
  std::memcpy(x_.data(), model_.embed.data_ptr<float>() + token * C, sizeof(float) * C);
  // RoPE at position p, as rope_cos_sin computes it: float32 p * inv_freq, then cos and sin.
  float cosv[4096], sinv[4096];
  LT_CHECK(half <= 4096, "decode: head_dim over 8192");
  for (int64_t i = 0; i < half; i++) {
    const float f = static_cast<float>(p) * inv_freq_[i];
    cosv[i] = static_cast<float>(std::cos(f) * rope_scale_);
    sinv[i] = static_cast<float>(std::sin(f) * rope_scale_);
  }
  auto rope = [&](float* v) {
    for (int64_t i = 0; i < half; i++) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cosv[i] - b * sinv[i];
      v[i + half] = b * cosv[i] + a * sinv[i];
    }
  };
  const float scale = static_cast<float>(c.softmax_scale());
  const int64_t group = H / KV;
  for (int64_t l = 0; l < c.num_layers; l++) {
    const LayerWeights& L = model_.layers[l];
    rms_norm(x_.data(), fptr(L.input_norm), h_.data(), C, c.rms_norm_eps);
    float* q = qkv_.data();
    float* k = q + HD;
    float* v = k + KVD;
    decode_matvec(fptr(L.q.weight), h_.data(), q, HD, C, fptr(L.q.bias));
    decode_matvec(fptr(L.k.weight), h_.data(), k, KVD, C, fptr(L.k.bias));
    decode_matvec(fptr(L.v.weight), h_.data(), v, KVD, C, fptr(L.v.bias));
    for (int64_t hh = 0; hh < H; hh++) {
      if (c.qk_norm) rms_norm(q + hh * D, fptr(L.q_norm), q + hh * D, D, c.rms_norm_eps);
      rope(q + hh * D);
    }
    float* kc = cache_->k[l].data_ptr<float>();
    float* vc = cache_->v[l].data_ptr<float>();
    for (int64_t g = 0; g < KV; g++) {
      if (c.qk_norm) rms_norm(k + g * D, fptr(L.k_norm), k + g * D, D, c.rms_norm_eps);
      rope(k + g * D);
      std::memcpy(kc + (g * cap + p) * D, k + g * D, sizeof(float) * D);
      std::memcpy(vc + (g * cap + p) * D, v + g * D, sizeof(float) * D);
    }
    // Attention over positions [first, p]: causal, inside the sliding window where the layer has one.
    const int64_t first =
        c.layer_sliding[l] && c.sliding_window > 0 ? std::max<int64_t>(0, p - c.sliding_window + 1) : 0;
    for (int64_t hh = 0; hh < H; hh++) {
      const float* qh = q + hh * D;
      const int64_t g = hh / group;
      float mx = -INFINITY;
      for (int64_t t = first; t <= p; t++) {
        const float* kt = kc + (g * cap + t) * D;
        float s = 0;
        for (int64_t d = 0; d < D; d++) s += qh[d] * kt[d];
        s *= scale;
        scores_[t] = s;
        mx = std::max(mx, s);
      }
      float sum = 0;
      for (int64_t t = first; t <= p; t++) sum += (scores_[t] = std::exp(scores_[t] - mx));
      float* out = att_.data() + hh * D;
      std::fill(out, out + D, 0.0f);
      for (int64_t t = first; t <= p; t++) {
        const float w = scores_[t] / sum;
        const float* vt = vc + (g * cap + t) * D;
        for (int64_t d = 0; d < D; d++) out[d] += w * vt[d];
      }
    }
    decode_matvec(fptr(L.o.weight), att_.data(), h_.data(), C, HD, fptr(L.o.bias));
    for (int64_t i = 0; i < C; i++) x_[i] += h_[i];
    rms_norm(x_.data(), fptr(L.post_attn_norm), h_.data(), C, c.rms_norm_eps);
    float* gate = gu_.data();
    float* up = gate + I;
    decode_matvec(fptr(L.gate.weight), h_.data(), gate, I, C, fptr(L.gate.bias));
    decode_matvec(fptr(L.up.weight), h_.data(), up, I, C, fptr(L.up.bias));
    for (int64_t i = 0; i < I; i++) {
      const float g = gate[i];
      const float a = c.act == Activation::act_silu        ? silu(g)
                      : c.act == Activation::act_gelu_tanh ? gelu_tanh(g)
                                                           : gelu(g);
      gate[i] = a * up[i];
    }
    decode_matvec(fptr(L.down.weight), gate, h_.data(), C, I, fptr(L.down.bias));
    for (int64_t i = 0; i < C; i++) x_[i] += h_[i];
  }
  rms_norm(x_.data(), fptr(model_.norm), h_.data(), C, c.rms_norm_eps);
  decode_matvec(model_.output_weight().data_ptr<float>(), h_.data(), logits_.data(), V, C, nullptr);
  cache_->length = p + 1;
  return at::from_blob(logits_.data(), {1, 1, V}, at::TensorOptions(at::kFloat));
}

}  // namespace luatune
