// Tiny CPU models for the C++ units that build, adapt, train and compare them (test_lora, test_qlora,
// test_adaption_prompt, test_prune_surgery, test_prune_unstructured, test_preference, test_reward,
// test_train, test_distill, test_teacher_cache): two config shapes, a fixed input and its logits, random
// adapter weights, and a bit-exact state comparison. Only for test files that already include ATen.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/model/transformer.h"
#include "host/train/trainer.h"

namespace luatune {

// A 2-layer model over a 97-token vocabulary with 4 attention heads in 2 KV groups (head_dim
// hidden / 4); `extra` adds config.json fields (`, "key": value` text).
inline std::shared_ptr<Model> tiny_model(const std::string& arch, int64_t hidden, int64_t intermediate,
                                         at::ScalarType dtype = at::kFloat, uint64_t seed = 1,
                                         const std::string& extra = "") {
  std::string fields = R"({"vocab_size": 97, "hidden_size": )" + std::to_string(hidden) +
                       R"(, "intermediate_size": )" + std::to_string(intermediate) +
                       R"(, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2)" +
                       extra + "}";
  return model_init(model_config_with(arch, fields, "test"), seed, dtype, at::kCPU);
}

// The 61-token model the training units share: 2 layers, hidden 32, intermediate 40, 4 heads in 2
// KV groups; Gemma 2 also gets head_dim 8 and a 4-token sliding window. `extra` adds config.json
// fields (`, "key": value` text).
inline std::shared_ptr<Model> tiny_model61(uint64_t seed = 1, const std::string& arch = "llama",
                                           const std::string& extra = "") {
  std::string fields = R"({"vocab_size": 61, "hidden_size": 32, "intermediate_size": 40,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2)";
  if (arch == "gemma2") fields += R"(, "head_dim": 8, "sliding_window": 4)";
  return model_init(model_config_with(arch, fields + extra + "}", "test"), seed, at::kFloat, at::kCPU);
}

// The distillation units' students and teachers, which differ in width, depth and vocabulary: a llama
// of `layers` layers, hidden `hidden`, intermediate 40, 4 heads in 2 KV groups, over `vocab` tokens,
// with Gemma 2's final-logit softcapping at `softcap` (0: none).
inline std::shared_ptr<Model> tiny_model_sized(uint64_t seed, int64_t hidden = 32, int64_t layers = 2,
                                               int64_t vocab = 61, double softcap = 0,
                                               at::ScalarType dtype = at::kFloat) {
  std::string fields = R"({"vocab_size": )" + std::to_string(vocab) + R"(, "hidden_size": )" +
                       std::to_string(hidden) + R"(, "intermediate_size": 40, "num_hidden_layers": )" +
                       std::to_string(layers) + R"(, "num_attention_heads": 4, "num_key_value_heads": 2})";
  ModelConfig c = model_config_with("llama", fields, "test");
  c.final_logit_softcap = softcap;
  return model_init(c, seed, dtype, at::kCPU);
}

// Trainer options whose steps compare: a constant learning rate `lr` from the first step (no
// warm-up) and micro-batches of `micro` rows (0: the whole batch).
inline TrainOptions constant_lr(double lr = TrainOptions().learning_rate, int64_t micro = 0) {
  TrainOptions o;
  o.learning_rate = lr;
  o.warmup_steps = 0;
  o.schedule = "constant";
  o.batch_size = micro;
  return o;
}

// The statistic `key` of a step's or an evaluation's extra values (a test failure when it is absent).
inline double step_stat(const std::vector<std::pair<std::string, double>>& extra, const std::string& key) {
  for (const auto& [k, v] : extra)
    if (k == key) return v;
  ADD_FAILURE() << "no statistic " << key;
  return NAN;
}

// (2, 9) token ids below 97 from a fixed generator: the input the units compare logits on.
inline at::Tensor tiny_ids() {
  at::Generator gen = at::detail::createCPUGenerator(7);
  return at::randint(97, {2, 9}, gen, at::TensorOptions(at::kLong));
}

// The model's logits on tiny_ids(), without autograd.
inline at::Tensor tiny_logits(const Model& m) {
  at::NoGradGuard g;
  return m.forward(tiny_ids());
}

// Adds N(0, 0.1) noise to every adapter weight (LoRA's B starts at zero, which would hide most bugs).
inline void perturb_adapters(Model& m, uint64_t seed) {
  at::NoGradGuard g;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  for (auto& [name, t] : m.adapter_parameters()) t->add_(at::normal(0.0, 0.1, t->sizes(), gen));
}

// A small LM-head problem for the chunked losses: hidden states h (13, 8) and head weights w (11, 8)
// that need gradients, and 13 targets t below 11, drawn from `gen` in that order.
struct TinyHead {
  at::Tensor h, w, t;

  // The reference logits h w^T, soft-capped as Gemma 2 does (softcap * tanh(x / softcap)) when
  // softcap > 0.
  at::Tensor logits(double softcap) const {
    at::Tensor x = at::matmul(h, w.t());
    return softcap > 0 ? at::tanh(x / softcap) * softcap : x;
  }

  // The gradients h and w hold, moved out: a second backward (the reference's) starts from none.
  std::pair<at::Tensor, at::Tensor> take_grads() {
    std::pair<at::Tensor, at::Tensor> g{h.grad().clone(), w.grad().clone()};
    h.mutable_grad() = at::Tensor();
    w.mutable_grad() = at::Tensor();
    return g;
  }
};

inline TinyHead tiny_head(at::Generator& gen) {
  TinyHead p;
  p.h = at::randn({13, 8}, gen, at::TensorOptions(at::kFloat)).requires_grad_(true);
  p.w = at::randn({11, 8}, gen, at::TensorOptions(at::kFloat)).requires_grad_(true);
  p.t = at::randint(11, {13}, gen, at::TensorOptions(at::kLong));
  return p;
}

// Every state tensor of `b` equals `a`'s bit for bit (a resumed run against a straight one).
inline void expect_same_state(const Model& a, const Model& b) {
  auto sa = a.state(), sb = b.state();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); i++) EXPECT_TRUE(at::equal(sa[i].second, sb[i].second)) << sa[i].first;
}

}  // namespace luatune
