// LLaMA-Adapter (host/adapt/adaption_prompt.h) on tiny models: a zero gate leaves the logits
// bit-identical (o_proj bias included), one layer's adapter branch against a reference written here
// with plain ops (RMSNorm, RoPE, per-head attention over the prompt), gradients into the prompts and
// gates only (with and without recomputed layers), KV-cache decoding against full recomputation,
// PEFT's files and names, save -> load, and the one-line errors.
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <set>

#include "host/adapt/adaption_prompt.h"
#include "host/adapt/lora.h"
#include "host/adapt/peft.h"
#include "host/core/files.h"
#include "host/io/safetensors.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/model/transformer.h"
#include "host/train/recompute.h"
#include "tests/cpp/test_tiny.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Hidden 32, 4 heads of 8, 2 KV heads (GQA), 2 layers. `extra` adds config.json fields.
std::shared_ptr<Model> tiny(const std::string& arch = "llama", at::ScalarType dtype = at::kFloat,
                            const std::string& extra = "") {
  return tiny_model(arch, 32, 48, dtype, 1, extra);
}

// Larger projection weights (init's 0.02 makes every attention nearly uniform) and nonzero biases,
// so a bias used twice or a wrong head pairing shows.
void randomize_base(Model& m) {
  at::NoGradGuard g;
  at::Generator gen = at::detail::createCPUGenerator(21);
  for (auto& [name, t] : m.named_parameters()) {
    bool proj = name.find("_proj.") != std::string::npos;
    bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (proj) t->copy_(at::normal(0.0, bias ? 0.1 : 0.2, t->sizes(), gen));
  }
}

AdaptionPromptConfig cfg(int64_t len, int64_t layers) {
  AdaptionPromptConfig c;
  c.adapter_len = len;
  c.adapter_layers = layers;
  return c;
}

void set_gates(Model& m, double value) {
  at::NoGradGuard g;
  for (LayerWeights& L : m.layers)
    if (AdaptionPrompt* a = adaption_prompt_of(L)) a->gate.fill_(value);
}

std::string temp_dir(const std::string& name) {
  return test_temp_dir("adaption_" + name);
}

// Layer l's adapter branch, from the layer's input h (B, T, C) at positions 0..T-1, written from
// the paper / PEFT's description: Llama RMSNorm, q_proj, HF RoPE (rotate_half), then per query head
// softmax(q K_prompt^T / sqrt(D)) * gate @ V_prompt with KV head hh / (H / KV), heads concatenated,
// o_proj's weight without its bias. Float32 throughout.
at::Tensor reference_branch(const Model& m, int64_t l, const at::Tensor& h) {
  const ModelConfig& c = m.config;
  const LayerWeights& L = m.layers[l];
  const int64_t B = h.size(0), T = h.size(1), H = c.num_heads, KV = c.num_kv_heads, D = c.head_dim;
  auto linear = [](const at::Tensor& x, const Linear& lin) {
    at::Tensor y = at::matmul(x, lin.weight.t());
    return lin.bias.defined() ? y + lin.bias : y;
  };
  at::Tensor x = L.input_norm * (h * at::rsqrt(h.pow(2).mean(-1, true) + c.rms_norm_eps));
  at::Tensor q = linear(x, L.q).view({B, T, H, D});
  at::Tensor inv_freq =
      at::pow(c.rope.theta, at::arange(0, D, 2, at::kDouble) / static_cast<double>(D)).reciprocal();
  at::Tensor angle = at::arange(T, at::kDouble).unsqueeze(1) * inv_freq.unsqueeze(0);  // (T, D/2)
  at::Tensor cos = at::cat({angle.cos(), angle.cos()}, -1).to(at::kFloat).view({1, T, 1, D});
  at::Tensor sin = at::cat({angle.sin(), angle.sin()}, -1).to(at::kFloat).view({1, T, 1, D});
  at::Tensor rotated = at::cat({-q.slice(-1, D / 2, D), q.slice(-1, 0, D / 2)}, -1);
  q = q * cos + rotated * sin;  // (B, T, H, D)

  at::Tensor prompt = adaption_prompt_of(L)->prompt[0];         // (A, C)
  at::Tensor k = linear(prompt, L.k), v = linear(prompt, L.v);  // (A, KV*D)
  const double gate = adaption_prompt_of(L)->gate.item<double>();
  std::vector<at::Tensor> heads;
  for (int64_t hh = 0; hh < H; hh++) {
    int64_t kv = hh / (H / KV);
    at::Tensor kh = k.slice(1, kv * D, (kv + 1) * D), vh = v.slice(1, kv * D, (kv + 1) * D);      // (A, D)
    at::Tensor scores = at::matmul(q.select(2, hh), kh.t()) / std::sqrt(static_cast<double>(D));  // (B, T, A)
    heads.push_back(at::matmul(at::softmax(scores, -1) * gate, vh));                              // (B, T, D)
  }
  return at::matmul(at::cat(heads, -1), L.o.weight.t());  // (B, T, C)
}

}  // namespace

TEST(AdaptionPrompt, ZeroGateLeavesTheOutputUnchanged) {
  // llama with attention_bias has an o_proj bias: adding it in the branch too would show here.
  struct Case {
    const char* arch;
    const char* extra;
  };
  for (Case k : {Case{"llama", ""}, Case{"llama", R"(, "attention_bias": true)"}, Case{"mistral", ""},
                 Case{"qwen2", ""}}) {
    auto m = tiny(k.arch, at::kFloat, k.extra);
    randomize_base(*m);
    at::Tensor before = tiny_logits(*m);
    EXPECT_EQ(adaption_prompt_apply(*m, cfg(4, 2), 3), 2);
    EXPECT_TRUE(at::equal(tiny_logits(*m), before)) << k.arch << k.extra;
  }
  // bf16 base: prompt and gate stay float32, the output is bf16 and bit-identical.
  auto m = tiny("llama", at::kBFloat16);
  at::Tensor before = tiny_logits(*m);
  adaption_prompt_apply(*m, cfg(4, 1), 3);
  EXPECT_EQ(adaption_prompt_of(m->layers[1])->prompt.scalar_type(), at::kFloat);
  at::Tensor after = tiny_logits(*m);
  EXPECT_EQ(after.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(after, before));
  // A nonzero gate changes the output; adapters off gives the base back exactly.
  set_gates(*m, 0.5);
  EXPECT_FALSE(at::equal(tiny_logits(*m), before));
  m->set_adapters_enabled(false);
  EXPECT_TRUE(at::equal(tiny_logits(*m), before));
  m->set_adapters_enabled(true);
  EXPECT_FALSE(at::equal(tiny_logits(*m), before));
}

TEST(AdaptionPrompt, InitIsNormalPromptsAndZeroGatesInTheTopLayers) {
  auto m = tiny();
  adaption_prompt_apply(*m, cfg(50, 1), 5);
  EXPECT_FALSE(adaption_prompt_of(m->layers[0]));
  ASSERT_TRUE(adaption_prompt_of(m->layers[1]));
  const AdaptionPrompt& a = *adaption_prompt_of(m->layers[1]);
  EXPECT_EQ(a.prompt.sizes(), (at::IntArrayRef{1, 50, 32}));  // PEFT's (1, adapter_len, hidden)
  EXPECT_EQ(a.gate.sizes(), (at::IntArrayRef{1}));
  EXPECT_EQ(a.gate.item<float>(), 0.0f);
  EXPECT_TRUE(a.prompt.requires_grad() && a.gate.requires_grad());
  EXPECT_NEAR(a.prompt.mean().item<double>(), 0.0, 0.1);  // N(0, 1), 1600 draws
  EXPECT_NEAR(a.prompt.std().item<double>(), 1.0, 0.1);
  for (auto& [name, t] : m->named_parameters()) EXPECT_FALSE(t->requires_grad()) << name;
  // Same seed, same prompt; another seed, another one.
  auto m2 = tiny(), m3 = tiny();
  adaption_prompt_apply(*m2, cfg(50, 1), 5);
  adaption_prompt_apply(*m3, cfg(50, 1), 6);
  EXPECT_TRUE(at::equal(adaption_prompt_of(m2->layers[1])->prompt, a.prompt));
  EXPECT_FALSE(at::equal(adaption_prompt_of(m3->layers[1])->prompt, a.prompt));
  AdaptionPromptConfig c = adaption_prompt_config_of(*m);
  EXPECT_EQ(c.adapter_len, 50);
  EXPECT_EQ(c.adapter_layers, 1);
}

TEST(AdaptionPrompt, ForwardMatchesAHandWrittenReference) {
  for (const char* arch : {"llama", "qwen2"}) {  // qwen2: k_proj / v_proj biases reach the prompt's K, V
    auto m = tiny(arch);
    randomize_base(*m);
    {
      // Without the MLP's output a layer returns h + attention (+ the adapter's branch) exactly.
      at::NoGradGuard g;
      m->layers[1].down.weight.zero_();
    }
    adaption_prompt_apply(*m, cfg(3, 1), 5);
    set_gates(*m, 0.7);
    at::Generator gen = at::detail::createCPUGenerator(4);
    at::Tensor h = at::normal(0.0, 1.0, {2, 6, 32}, gen);
    at::NoGradGuard g;
    at::Tensor with = m->run_layers(h, 1, 2);
    m->set_adapters_enabled(false);
    at::Tensor without = m->run_layers(h, 1, 2);
    m->set_adapters_enabled(true);
    at::Tensor branch = with - without, ref = reference_branch(*m, 1, h);
    EXPECT_GT(ref.norm().item<double>(), 0.1) << arch;  // a branch worth comparing
    EXPECT_TRUE(at::allclose(branch, ref, 1e-4, 1e-5))
        << arch << ": max diff " << (branch - ref).abs().max().item<double>();
  }
}

TEST(AdaptionPrompt, GradientsReachPromptsAndGatesOnly) {
  auto m = tiny();
  randomize_base(*m);
  adaption_prompt_apply(*m, cfg(3, 2), 5);
  std::set<std::string> names;
  for (auto& [name, t] : m->trainable_parameters()) names.insert(name);
  EXPECT_EQ(names,
            (std::set<std::string>{
                "model.layers.0.self_attn.adaption_prompt", "model.layers.0.self_attn.adaption_gate",
                "model.layers.1.self_attn.adaption_prompt", "model.layers.1.self_attn.adaption_gate"}));
  EXPECT_EQ(m->count_parameters().adapter, 2 * (3 * 32 + 1));
  EXPECT_EQ(m->count_parameters().trainable, 2 * (3 * 32 + 1));
  at::Tensor x = tiny_ids();
  auto loss_of = [&](const ForwardOptions& o) {
    return at::cross_entropy_loss(m->forward(x, o).view({-1, 97}), x.view({-1}));
  };
  auto zero_grads = [&] {
    for (auto& [name, t] : m->adapter_parameters()) t->mutable_grad() = at::Tensor();
  };

  // Zero-init: at gate 0 only the gates learn (the prompts' gradient is exactly zero).
  loss_of({}).backward();
  for (LayerWeights& L : m->layers) {
    EXPECT_GT(adaption_prompt_of(L)->gate.grad().abs().item<double>(), 0.0);
    EXPECT_EQ(adaption_prompt_of(L)->prompt.grad().abs().max().item<double>(), 0.0);
  }
  zero_grads();

  set_gates(*m, 0.5);
  loss_of({}).backward();
  std::vector<at::Tensor> grads;
  for (auto& [name, t] : m->adapter_parameters()) {
    ASSERT_TRUE(t->grad().defined()) << name;
    EXPECT_GT(t->grad().abs().max().item<double>(), 0.0) << name;
    grads.push_back(t->grad().clone());
  }
  for (auto& [name, t] : m->named_parameters()) EXPECT_FALSE(t->grad().defined()) << name;
  zero_grads();

  // Activation checkpointing: recomputed layers give the same gradients.
  ForwardOptions o;
  o.run_layer = [](int64_t, const LayerFn& fn, const at::Tensor& x) { return recompute_forward(fn, x); };
  loss_of(o).backward();
  size_t i = 0;
  for (auto& [name, t] : m->adapter_parameters())
    EXPECT_TRUE(at::allclose(t->grad(), grads[i++], 1e-5, 1e-7)) << name;
}

TEST(AdaptionPrompt, KvCacheDecodingEqualsFullRecompute) {
  auto m = tiny();
  randomize_base(*m);
  adaption_prompt_apply(*m, cfg(4, 2), 5);
  set_gates(*m, 0.6);
  at::NoGradGuard g;
  at::Tensor x = tiny_ids(), full = m->forward(x);
  m->set_adapters_enabled(false);
  EXPECT_FALSE(at::allclose(m->forward(x), full, 1e-3, 1e-4));  // the adapters matter here
  m->set_adapters_enabled(true);
  KVCache cache = m->new_cache(2, 9);
  ForwardOptions o;
  o.cache = &cache;
  at::Tensor prefix = m->forward(x.narrow(1, 0, 5), o);
  EXPECT_TRUE(at::allclose(prefix, full.narrow(1, 0, 5), 1e-4, 1e-5));
  for (int64_t t = 5; t < 9; t++) {
    at::Tensor step = m->forward(x.narrow(1, t, 1), o);
    EXPECT_TRUE(at::allclose(step, full.narrow(1, t, 1), 1e-4, 1e-5)) << "position " << t;
  }
}

TEST(AdaptionPrompt, SaveLoadRoundTripInPeftsLayout) {
  auto m = tiny("mistral");
  adaption_prompt_apply(*m, cfg(3, 1), 5);
  set_gates(*m, 0.25);
  const std::string dir = temp_dir("rt");
  adaption_prompt_save(*m, dir, "mistralai/Mistral-7B-v0.1");

  json expected = {{"adapter_layers", 1},     {"adapter_len", 3},
                   {"auto_mapping", nullptr}, {"base_model_name_or_path", "mistralai/Mistral-7B-v0.1"},
                   {"inference_mode", true},  {"peft_type", "ADAPTION_PROMPT"},
                   {"revision", nullptr},     {"target_modules", "self_attn"},
                   {"task_type", "CAUSAL_LM"}};
  EXPECT_EQ(json::parse(file_read(dir + "/adapter_config.json")), expected);
  // PeftModel.base_model (AdaptionPromptModel) .model (MistralForCausalLM) .model.layers.1.self_attn
  // (AdaptedAttention) holds adaption_prompt and adaption_gate.
  auto file = SafetensorsFile::open(dir + "/adapter_model.safetensors");
  ASSERT_EQ(file->entries().size(), 2u);
  const SafetensorsEntry* p = file->find("base_model.model.model.layers.1.self_attn.adaption_prompt");
  const SafetensorsEntry* g = file->find("base_model.model.model.layers.1.self_attn.adaption_gate");
  ASSERT_TRUE(p && g);
  EXPECT_EQ(p->shape, (std::vector<int64_t>{1, 3, 32}));
  EXPECT_EQ(g->shape, (std::vector<int64_t>{1}));
  EXPECT_EQ(p->dtype_name, "F32");
  EXPECT_EQ(peft_adapter_type(dir), "ADAPTION_PROMPT");

  auto fresh = tiny("mistral");
  AdaptionPromptConfig c = adaption_prompt_load(*fresh, dir);
  EXPECT_EQ(c.adapter_len, 3);
  EXPECT_EQ(c.adapter_layers, 1);
  EXPECT_FALSE(adaption_prompt_of(fresh->layers[0]));
  EXPECT_TRUE(
      at::equal(adaption_prompt_of(fresh->layers[1])->prompt, adaption_prompt_of(m->layers[1])->prompt));
  EXPECT_EQ(adaption_prompt_of(fresh->layers[1])->gate.item<float>(), 0.25f);
  EXPECT_TRUE(adaption_prompt_of(fresh->layers[1])->prompt.requires_grad());
  EXPECT_TRUE(at::equal(tiny_logits(*fresh), tiny_logits(*m)));
  fs::remove_all(dir);
}

TEST(AdaptionPrompt, ErrorsNameWhatWasWrong) {
  const std::string where = "lora.adaption_prompt: ";
  auto m = tiny();
  EXPECT_EQ(error_of([&] { adaption_prompt_apply(*m, cfg(10, 3), 0); }),
            where + "adapter_layers must be in 1..2 (the model's layers), got 3");
  EXPECT_EQ(error_of([&] { adaption_prompt_apply(*m, cfg(10, 0), 0); }),
            where + "adapter_layers must be in 1..2 (the model's layers), got 0");
  EXPECT_EQ(error_of([&] { adaption_prompt_apply(*m, cfg(0, 1), 0); }),
            where + "adapter_len must be a positive integer, got 0");
  EXPECT_EQ(error_of([&] { adaption_prompt_apply(*tiny("qwen3"), cfg(10, 1), 0); }),
            where +
                "qwen3 models are not supported (adaption prompts follow PEFT's maths for llama and mistral; "
                "luatune also takes qwen2; expected one of those)");
  EXPECT_FALSE(adaption_prompt_present(*m));  // nothing applied by the failures
  for (auto& [name, t] : m->named_parameters()) EXPECT_TRUE(t->requires_grad()) << name;

  // LoRA and adaption prompts are not combined, in either order; prompts do not merge.
  adaption_prompt_apply(*m, cfg(2, 1), 0);
  const std::string already =
      "the model already has adapters (LoRA and adaption prompts are not combined, nor applied twice; start "
      "from a fresh model)";
  EXPECT_EQ(error_of([&] { adaption_prompt_apply(*m, cfg(2, 1), 0); }), where + already);
  LoraConfig lc;
  EXPECT_EQ(
      error_of([&] { lora_apply(*m, lc, 0); }),
      "lora.apply: the model already has an adaption prompt (LLaMA-Adapter); LoRA and adaption prompts are "
      "not combined (start from a fresh model)");
  EXPECT_EQ(error_of([&] { lora_merge(*m); }),
            "lora.merge: the model has an adaption prompt (LLaMA-Adapter), which cannot be merged into the "
            "weights (its attention over the prompt depends on each input); save it with lora.save instead");
  auto with_lora = tiny();
  lora_apply(*with_lora, lc, 0);
  EXPECT_EQ(error_of([&] { adaption_prompt_apply(*with_lora, cfg(2, 1), 0); }), where + already);

  // Each loader points at the other kind's.
  const std::string ap_dir = temp_dir("ap"), lora_dir = temp_dir("lora");
  adaption_prompt_save(*m, ap_dir, "");
  lora_save(*with_lora, lora_dir, "");
  EXPECT_EQ(error_of([&] { lora_load(*tiny(), ap_dir); }),
            ap_dir +
                "/adapter_config.json: peft_type \"ADAPTION_PROMPT\" is an adaption prompt (LLaMA-Adapter), "
                "not LoRA\n  HINT: load it with adaption_prompt_load (in Lua, lora.load reads both kinds)");
  EXPECT_EQ(error_of([&] { adaption_prompt_load(*tiny(), lora_dir); }),
            lora_dir +
                "/adapter_config.json: peft_type \"LORA\" is not an adaption prompt (expected "
                "\"ADAPTION_PROMPT\"; LoRA adapters load with lora_load)");

  // A config that disagrees with the weights: the error names both shapes, and the model is left
  // as it was (no prompts, base weights trainable again).
  const std::string config_path = ap_dir + "/adapter_config.json";
  json j = json::parse(file_read(config_path));
  j["adapter_len"] = 4;
  file_write_atomic(config_path, j.dump());
  auto target = tiny();
  EXPECT_EQ(
      error_of([&] { adaption_prompt_load(*target, ap_dir); }),
      ap_dir +
          "/adapter_model.safetensors: tensor base_model.model.model.layers.1.self_attn.adaption_prompt "
          "has shape [1, 2, 32], expected [1, 4, 32] (adapter_len=4 from adapter_config.json)");
  EXPECT_FALSE(adaption_prompt_present(*target));
  for (auto& [name, t] : target->named_parameters()) EXPECT_TRUE(t->requires_grad()) << name;
  j.erase("adapter_len");
  file_write_atomic(config_path, j.dump());
  EXPECT_EQ(error_of([&] { adaption_prompt_load(*target, ap_dir); }),
            config_path + ": adapter_len must be a positive integer, got nothing");
  j["adapter_len"] = 2;
  j["adapter_layers"] = 5;
  file_write_atomic(config_path, j.dump());
  EXPECT_EQ(error_of([&] { adaption_prompt_load(*target, ap_dir); }),
            config_path + ": adapter_layers must be in 1..2 (the model's layers), got 5");
  fs::remove_all(ap_dir);
  fs::remove_all(lora_dir);
}
