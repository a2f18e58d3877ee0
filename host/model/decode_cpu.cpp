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

void decode_matmul(const float* W, const float* X, float* Y, int64_t n, int64_t rows, int64_t cols,
                   const float* bias) {
  const int64_t blocks = (rows + 3) / 4;
  // About 64 K multiply-adds a task, so a small matrix stays on one thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(cols * 4 * n, 1));
  at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; b++) {
      const int64_t r = b * 4, m = std::min<int64_t>(4, rows - r);
      // The four rows stay in cache while every vector passes over them.
      for (int64_t i = 0; i < n; i++) {
        const float* x = X + i * cols;
        float* y = Y + i * rows + r;
#ifdef LT_DECODE_X86
        if (m == 4 && has_avx2()) {
          rows4_avx2(W + r * cols, cols, x, cols, y);
        } else {
          rows_portable(W + r * cols, cols, x, cols, y, m);
        }
#else
        rows_portable(W + r * cols, cols, x, cols, y, m);
#endif
        if (bias)
          for (int64_t j = 0; j < m; j++) y[j] += bias[r + j];
      }
    }
  });
}

void decode_matvec(const float* W, const float* x, float* y, int64_t rows, int64_t cols, const float* bias) {
  decode_matmul(W, x, y, 1, rows, cols, bias);
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

DecodeCpu::DecodeCpu(const Model& model, std::vector<KVCache*> caches)
    : model_(model), caches_(std::move(caches)) {
  const std::string why = decode_cpu_unsupported(model);
  LT_CHECK(why.empty(), "decode: the fast CPU step cannot run this model: " << why);
  LT_CHECK(!caches_.empty(), "decode: no sequence");
  int64_t longest = 0;
  for (KVCache* cache : caches_) {
    LT_CHECK(cache && !cache->k.empty() && cache->k[0].size(0) == 1 &&
                 cache->k[0].scalar_type() == at::kFloat && cache->k[0].is_contiguous(),
             "decode: the fast CPU step needs float32 KV caches of batch 1");
    longest = std::max(longest, cache->capacity);
  }
  const ModelConfig& c = model.config;
  at::Tensor inv = rope_inv_freq(c).to(at::kFloat).contiguous();
  inv_freq_.assign(inv.data_ptr<float>(), inv.data_ptr<float>() + inv.numel());
  rope_scale_ = c.rope.type == RopeType::rope_yarn ? c.rope.attention_factor : 1.0;
  const int64_t n = static_cast<int64_t>(caches_.size());
  const int64_t C = c.hidden_size, D = c.head_dim, HD = c.num_heads * D, KVD = c.num_kv_heads * D;
  x_.resize(n * C), h_.resize(n * C), q_.resize(n * HD), k_.resize(n * KVD), v_.resize(n * KVD);
  att_.resize(n * HD), gate_.resize(n * c.intermediate_size), up_.resize(n * c.intermediate_size);
  logits_.resize(n * c.vocab_size), scores_.resize(longest), cos_.resize(n * (D / 2)),
      sin_.resize(n * (D / 2));
}

at::Tensor DecodeCpu::step(int64_t token) {
  return step(std::vector<int64_t>{0}, std::vector<int64_t>{token}).view({1, 1, model_.config.vocab_size});
}

at::Tensor DecodeCpu::step(const std::vector<int64_t>& seqs, const std::vector<int64_t>& tokens) {
  const ModelConfig& c = model_.config;
  const int64_t C = c.hidden_size, D = c.head_dim, H = c.num_heads, KV = c.num_kv_heads,
                I = c.intermediate_size;
  const int64_t V = c.vocab_size, HD = H * D, KVD = KV * D, half = D / 2;
  const int64_t n = static_cast<int64_t>(seqs.size());
  LT_CHECK(n > 0 && tokens.size() == seqs.size() && n <= static_cast<int64_t>(caches_.size()),
           "decode: " << seqs.size() << " sequences and " << tokens.size() << " tokens for " << caches_.size()
                      << " caches");
  std::vector<int64_t> pos(n);
  for (int64_t j = 0; j < n; j++) {
    LT_CHECK(seqs[j] >= 0 && seqs[j] < static_cast<int64_t>(caches_.size()),
             "decode: no sequence " << seqs[j]);
    for (int64_t i = 0; i < j; i++)
      LT_CHECK(seqs[i] != seqs[j], "decode: sequence " << seqs[j] << " given twice");
    const KVCache& cache = *caches_[seqs[j]];
    pos[j] = cache.length;
    LT_CHECK(pos[j] < cache.capacity,
             "model:generate: KV cache full (" << pos[j] << " of " << cache.capacity << ")");
    LT_CHECK(tokens[j] >= 0 && tokens[j] < V,
             "model:generate: token id " << tokens[j] << " outside [0, " << V << ")");
    std::memcpy(x_.data() + j * C, model_.embed.data_ptr<float>() + tokens[j] * C, sizeof(float) * C);
    // RoPE at the sequence's position, as rope_cos_sin computes it: float32 p * inv_freq, then cos and sin.
    for (int64_t i = 0; i < half; i++) {
      const float f = static_cast<float>(pos[j]) * inv_freq_[i];
      cos_[j * half + i] = static_cast<float>(std::cos(f) * rope_scale_);
      sin_[j * half + i] = static_cast<float>(std::sin(f) * rope_scale_);
    }
  }
  auto rope = [&](float* v, int64_t j) {
    const float* cs = cos_.data() + j * half;
    const float* sn = sin_.data() + j * half;
    for (int64_t i = 0; i < half; i++) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cs[i] - b * sn[i];
      v[i + half] = b * cs[i] + a * sn[i];
    }
  };
  const float scale = static_cast<float>(c.softmax_scale());
  const int64_t group = H / KV;
  for (int64_t l = 0; l < c.num_layers; l++) {
    const LayerWeights& L = model_.layers[l];
    for (int64_t j = 0; j < n; j++)
      rms_norm(x_.data() + j * C, fptr(L.input_norm), h_.data() + j * C, C, c.rms_norm_eps);
    decode_matmul(fptr(L.q.weight), h_.data(), q_.data(), n, HD, C, fptr(L.q.bias));
    decode_matmul(fptr(L.k.weight), h_.data(), k_.data(), n, KVD, C, fptr(L.k.bias));
    decode_matmul(fptr(L.v.weight), h_.data(), v_.data(), n, KVD, C, fptr(L.v.bias));
    for (int64_t j = 0; j < n; j++) {
      float* q = q_.data() + j * HD;
      float* k = k_.data() + j * KVD;
      float* v = v_.data() + j * KVD;
      const int64_t p = pos[j];
      KVCache& cache = *caches_[seqs[j]];
      const int64_t cap = cache.capacity;
      for (int64_t hh = 0; hh < H; hh++) {
        if (c.qk_norm) rms_norm(q + hh * D, fptr(L.q_norm), q + hh * D, D, c.rms_norm_eps);
        rope(q + hh * D, j);
      }
      float* kc = cache.k[l].data_ptr<float>();
      float* vc = cache.v[l].data_ptr<float>();
      for (int64_t g = 0; g < KV; g++) {
        if (c.qk_norm) rms_norm(k + g * D, fptr(L.k_norm), k + g * D, D, c.rms_norm_eps);
        rope(k + g * D, j);
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
          float sc = 0;
          for (int64_t d = 0; d < D; d++) sc += qh[d] * kt[d];
          sc *= scale;
          scores_[t] = sc;
          mx = std::max(mx, sc);
        }
        float sum = 0;
        for (int64_t t = first; t <= p; t++) sum += (scores_[t] = std::exp(scores_[t] - mx));
        float* out = att_.data() + j * HD + hh * D;
        std::fill(out, out + D, 0.0f);
        for (int64_t t = first; t <= p; t++) {
          const float w = scores_[t] / sum;
          const float* vt = vc + (g * cap + t) * D;
          for (int64_t d = 0; d < D; d++) out[d] += w * vt[d];
        }
      }
    }
    decode_matmul(fptr(L.o.weight), att_.data(), h_.data(), n, C, HD, fptr(L.o.bias));
    for (int64_t i = 0; i < n * C; i++) x_[i] += h_[i];
    for (int64_t j = 0; j < n; j++)
      rms_norm(x_.data() + j * C, fptr(L.post_attn_norm), h_.data() + j * C, C, c.rms_norm_eps);
    decode_matmul(fptr(L.gate.weight), h_.data(), gate_.data(), n, I, C, fptr(L.gate.bias));
    decode_matmul(fptr(L.up.weight), h_.data(), up_.data(), n, I, C, fptr(L.up.bias));
    for (int64_t i = 0; i < n * I; i++) {
      const float g = gate_[i];
      const float a = c.act == Activation::act_silu        ? silu(g)
                      : c.act == Activation::act_gelu_tanh ? gelu_tanh(g)
                                                           : gelu(g);
      gate_[i] = a * up_[i];
    }
    decode_matmul(fptr(L.down.weight), gate_.data(), h_.data(), n, C, I, fptr(L.down.bias));
    for (int64_t i = 0; i < n * C; i++) x_[i] += h_[i];
  }
  for (int64_t j = 0; j < n; j++)
    rms_norm(x_.data() + j * C, fptr(model_.norm), h_.data() + j * C, C, c.rms_norm_eps);
  decode_matmul(model_.output_weight().data_ptr<float>(), h_.data(), logits_.data(), n, V, C, nullptr);
  for (int64_t j = 0; j < n; j++) caches_[seqs[j]]->length = pos[j] + 1;
  return at::from_blob(logits_.data(), {n, V}, at::TensorOptions(at::kFloat));
}

}  // namespace luatune
