// LoRA and DoRA (host/adapt/lora.h) on tiny models: identity at init, the forward against the
// formula computed by hand, dropout only while training, frozen base and gradients only into the
// adapters, PEFT's files read back independently of our reader, save -> load and merge -> save ->
// load round trips, and the one-line errors for bad adapter directories.
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "host/adapt/lora.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/io/safetensors.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/model/transformer.h"
#include "host/quant/quant.h"
#include "host/train/trainer.h"
#include "tests/cpp/test_batch.h"
#include "tests/cpp/test_tiny.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Hidden 32, 4 heads of 8, 2 KV heads: q (32, 32), k/v (16, 32), o (32, 32), gate/up (48, 32), down (32, 48).
std::shared_ptr<Model> tiny(const std::string& arch = "llama", at::ScalarType dtype = at::kFloat,
                            uint64_t seed = 1) {
  return tiny_model(arch, 32, 48, dtype, seed);
}

// Gives every adapter weight random values (B starts at zero, which would hide most bugs).
void perturb(Model& m, uint64_t seed = 11) {
  perturb_adapters(m, seed);
}

std::string temp_dir(const std::string& name) {
  return test_temp_dir("lora_" + name);
}

LoraConfig cfg(int64_t r, double alpha, std::vector<std::string> targets, bool dora = false) {
  LoraConfig c;
  c.r = r;
  c.alpha = alpha;
  c.dropout = 0.0;
  c.targets = std::move(targets);
  c.dora = dora;
  return c;
}

// The safetensors header read by hand (8-byte little-endian length, then JSON), not by our reader.
json safetensors_header(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  unsigned char len_bytes[8];
  f.read(reinterpret_cast<char*>(len_bytes), 8);
  uint64_t len = 0;
  for (int i = 7; i >= 0; i--) len = (len << 8) | len_bytes[i];
  std::string text(len, '\0');
  f.read(&text[0], static_cast<std::streamsize>(len));
  return json::parse(text);
}

}  // namespace

TEST(Lora, OutputUnchangedAtInit) {
  for (const char* arch : {"llama", "qwen2", "gemma2"}) {  // qwen2: q/k/v biases
    for (bool dora : {false, true}) {
      auto m = tiny(arch);
      at::Tensor before = tiny_logits(*m);
      LoraConfig c = cfg(4, 8, {"all-linear"}, dora);
      EXPECT_EQ(lora_apply(*m, c, 3), 2 * 7);
      EXPECT_TRUE(at::equal(tiny_logits(*m), before)) << arch << (dora ? " dora" : " lora");
    }
  }
  // bf16 base: adapters stay float32 and the output is still bit-identical.
  for (bool dora : {false, true}) {
    auto m = tiny("llama", at::kBFloat16);
    at::Tensor before = tiny_logits(*m);
    lora_apply(*m, cfg(4, 8, {"q_proj", "down_proj"}, dora), 3);
    EXPECT_EQ(m->layers[0].q.adapter->parameters()[0].second->scalar_type(), at::kFloat);
    at::Tensor after = tiny_logits(*m);
    EXPECT_EQ(after.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(at::equal(after, before));
  }
}

TEST(Lora, InitIsPeftsKaimingUniformAndZeroB) {
  auto m = tiny();
  lora_apply(*m, cfg(8, 16, {"down_proj"}), 5);
  auto* a = dynamic_cast<LoraAdapter*>(m->layers[1].down.adapter.get());
  ASSERT_TRUE(a);
  EXPECT_EQ(a->lora_A.sizes(), (at::IntArrayRef{8, 48}));
  EXPECT_EQ(a->lora_B.sizes(), (at::IntArrayRef{32, 8}));
  EXPECT_TRUE(at::equal(a->lora_B, at::zeros({32, 8})));
  const double bound = 1.0 / std::sqrt(48.0);  // kaiming_uniform_(a=sqrt(5)) with fan_in 48
  EXPECT_LE(a->lora_A.abs().max().item<double>(), bound);
  EXPECT_GT(a->lora_A.abs().max().item<double>(), 0.9 * bound);
  // Same seed, same adapter; another seed, another one.
  auto m2 = tiny(), m3 = tiny();
  lora_apply(*m2, cfg(8, 16, {"down_proj"}), 5);
  lora_apply(*m3, cfg(8, 16, {"down_proj"}), 6);
  auto* a2 = dynamic_cast<LoraAdapter*>(m2->layers[1].down.adapter.get());
  auto* a3 = dynamic_cast<LoraAdapter*>(m3->layers[1].down.adapter.get());
  EXPECT_TRUE(at::equal(a->lora_A, a2->lora_A));
  EXPECT_FALSE(at::equal(a->lora_A, a3->lora_A));
}

TEST(Lora, ForwardIsBasePlusScaledBA) {
  at::Generator gen = at::detail::createCPUGenerator(3);
  at::Tensor x = at::normal(0.0, 1.0, {2, 5, 32}, gen);
  for (bool rslora : {false, true}) {
    auto m = tiny("qwen2");  // q_proj has a bias
    LoraConfig c = cfg(4, 6, {"q_proj", "v_proj"});
    c.rslora = rslora;
    lora_apply(*m, c, 1);
    perturb(*m);
    const Linear& q = m->layers[0].q;
    auto* a = dynamic_cast<LoraAdapter*>(q.adapter.get());
    const double scale = rslora ? 6.0 / 2.0 : 6.0 / 4.0;  // alpha/sqrt(r) or alpha/r
    EXPECT_DOUBLE_EQ(a->scale, scale);
    at::NoGradGuard g;
    at::Tensor expected =
        at::linear(x, q.weight, q.bias) + at::matmul(at::matmul(x, a->lora_A.t()), a->lora_B.t()) * scale;
    EXPECT_TRUE(at::allclose(q.forward(x), expected, 1e-5, 1e-6));
    EXPECT_FALSE(at::allclose(q.forward(x), at::linear(x, q.weight, q.bias), 1e-3, 1e-3));
  }
}

TEST(Lora, DoraForwardIsTheWeightDecomposition) {
  at::Generator gen = at::detail::createCPUGenerator(4);
  at::Tensor x = at::normal(0.0, 1.0, {3, 32}, gen);
  auto m = tiny("qwen2");
  lora_apply(*m, cfg(4, 8, {"k_proj"}, true), 1);
  const Linear& k = m->layers[1].k;
  auto* a = dynamic_cast<LoraAdapter*>(k.adapter.get());
  // Magnitude starts at the row norms of W (the norm of each output row).
  EXPECT_TRUE(at::allclose(a->magnitude, k.weight.pow(2).sum(1).sqrt(), 1e-6, 1e-6));
  EXPECT_EQ(a->magnitude.sizes(), (at::IntArrayRef{16}));
  perturb(*m);
  at::NoGradGuard g;
  // The paper's W' = m * (W + sBA) / ||W + sBA|| (row-wise), plus the bias.
  at::Tensor v = k.weight + at::matmul(a->lora_B, a->lora_A) * 2.0;
  at::Tensor w = (a->magnitude / v.pow(2).sum(1).sqrt()).unsqueeze(1) * v;
  EXPECT_TRUE(at::allclose(k.forward(x), at::linear(x, w, k.bias), 1e-5, 1e-5));
}

TEST(Lora, DropoutOnlyWhileTraining) {
  auto m = tiny();
  LoraConfig c = cfg(4, 8, {"q_proj"});
  c.dropout = 0.5;
  lora_apply(*m, c, 1);
  perturb(*m);
  at::Generator gen = at::detail::createCPUGenerator(5);
  at::Tensor x = at::normal(0.0, 1.0, {4, 32}, gen);
  const Linear& q = m->layers[0].q;
  auto* a = dynamic_cast<LoraAdapter*>(q.adapter.get());
  at::NoGradGuard g;
  at::Tensor no_dropout =
      at::linear(x, q.weight) + at::matmul(at::matmul(x, a->lora_A.t()), a->lora_B.t()) * 2.0;
  EXPECT_TRUE(at::allclose(q.forward(x), no_dropout, 1e-5, 1e-6));
  m->set_training(true);
  EXPECT_TRUE(a->training);
  at::Tensor t1 = q.forward(x), t2 = q.forward(x);
  EXPECT_FALSE(at::allclose(t1, no_dropout, 1e-3, 1e-3));
  EXPECT_FALSE(at::equal(t1, t2));
  m->set_training(false);
  EXPECT_TRUE(at::allclose(q.forward(x), no_dropout, 1e-5, 1e-6));
  EXPECT_TRUE(at::equal(tiny_logits(*m), tiny_logits(*m)));
  // Dropout touches the adapter's input only: with B = 0 a training forward is the base, exactly.
  for (bool dora : {false, true}) {
    auto fresh = tiny();
    at::Tensor base = tiny_logits(*fresh);
    LoraConfig d = cfg(4, 8, {"all-linear"}, dora);
    d.dropout = 0.5;
    lora_apply(*fresh, d, 1);
    fresh->set_training(true);
    EXPECT_TRUE(at::allclose(tiny_logits(*fresh), base, 1e-5, 1e-6));
  }
}

TEST(Lora, FreezesBaseAndGradientsReachOnlyAdapters) {
  for (bool dora : {false, true}) {
    auto m = tiny("gemma2");  // tied embeddings, four norms per layer
    lora_apply(*m, cfg(2, 4, {"q_proj", "v_proj", "up_proj"}, dora), 1);
    perturb(*m);
    for (auto& [name, t] : m->named_parameters()) EXPECT_FALSE(t->requires_grad()) << name;
    auto adapters = m->adapter_parameters();
    EXPECT_EQ(adapters.size(), 2u * 3u * (dora ? 3u : 2u));
    for (auto& [name, t] : adapters) EXPECT_TRUE(t->requires_grad()) << name;
    EXPECT_EQ(m->trainable_parameters().size(), adapters.size());
    EXPECT_EQ(adapters[0].first, "model.layers.0.self_attn.q_proj.lora_A.weight");
    if (dora) {
      EXPECT_EQ(adapters[2].first, "model.layers.0.self_attn.q_proj.lora_magnitude_vector");
    }

    ParamCounts n = m->count_parameters();
    int64_t adapter_numel = 0;
    for (auto& [name, t] : adapters) adapter_numel += t->numel();
    EXPECT_EQ(n.adapter, adapter_numel);
    EXPECT_EQ(n.trainable, adapter_numel);
    EXPECT_EQ(n.total, n.embedding + n.attention + n.mlp + n.norm + n.lm_head + n.adapter);

    m->forward(tiny_ids()).pow(2).mean().backward();
    for (auto& [name, t] : m->named_parameters()) EXPECT_FALSE(t->grad().defined()) << name;
    for (auto& [name, t] : adapters) {
      ASSERT_TRUE(t->grad().defined()) << name;
      EXPECT_GT(t->grad().abs().sum().item<double>(), 0) << name;
    }
  }
}

TEST(Lora, LayersSelectWhereAdaptersGo) {
  auto m = tiny();
  LoraConfig c = cfg(2, 4, {"o_proj", "gate_proj"});
  c.layers = {1};
  EXPECT_EQ(lora_apply(*m, c, 1), 2);
  EXPECT_FALSE(m->layers[0].o.adapter);
  EXPECT_TRUE(m->layers[1].o.adapter);
  EXPECT_TRUE(m->layers[1].gate.adapter);
  LoraConfig back = lora_config_of(*m);
  EXPECT_EQ(back.targets, (std::vector<std::string>{"o_proj", "gate_proj"}));
  EXPECT_EQ(back.layers, (std::vector<int64_t>{1}));
}

TEST(Lora, SavesPeftFilesAndLoadsThemBackBitExact) {
  for (bool dora : {false, true}) {
    auto m = tiny("qwen2");
    LoraConfig c = cfg(4, 8, {"q_proj", "k_proj", "down_proj"}, dora);
    c.dropout = 0.1;
    c.rslora = true;
    lora_apply(*m, c, 1);
    perturb(*m);
    const std::string dir = temp_dir(dora ? "dora" : "lora");
    lora_save(*m, dir, "Qwen/Qwen2-0.5B");

    json cj = json::parse(file_read(dir + "/adapter_config.json"));
    EXPECT_EQ(cj["peft_type"], "LORA");
    EXPECT_EQ(cj["task_type"], "CAUSAL_LM");
    EXPECT_EQ(cj["r"], 4);
    EXPECT_EQ(cj["lora_alpha"], 8);
    EXPECT_TRUE(cj["lora_alpha"].is_number_integer());
    EXPECT_DOUBLE_EQ(cj["lora_dropout"].get<double>(), 0.1);
    EXPECT_EQ(cj["target_modules"], json({"q_proj", "k_proj", "down_proj"}));
    EXPECT_EQ(cj["use_rslora"], true);
    EXPECT_EQ(cj["use_dora"], dora);
    EXPECT_EQ(cj["bias"], "none");
    EXPECT_EQ(cj["fan_in_fan_out"], false);
    EXPECT_EQ(cj["inference_mode"], true);
    EXPECT_EQ(cj["base_model_name_or_path"], "Qwen/Qwen2-0.5B");
    EXPECT_TRUE(cj["layers_to_transform"].is_null());
    EXPECT_TRUE(cj["modules_to_save"].is_null());

    json h = safetensors_header(dir + "/adapter_model.safetensors");
    EXPECT_EQ(h["__metadata__"], json({{"format", "pt"}}));
    EXPECT_EQ(h.size(), 1u + 2u * 3u * (dora ? 3u : 2u));
    const std::string p = "base_model.model.model.layers.";
    EXPECT_EQ(h[p + "0.self_attn.q_proj.lora_A.weight"]["shape"], json({4, 32}));
    EXPECT_EQ(h[p + "0.self_attn.q_proj.lora_B.weight"]["shape"], json({32, 4}));
    EXPECT_EQ(h[p + "1.self_attn.k_proj.lora_B.weight"]["shape"], json({16, 4}));
    EXPECT_EQ(h[p + "1.mlp.down_proj.lora_A.weight"]["shape"], json({4, 48}));
    EXPECT_EQ(h[p + "1.mlp.down_proj.lora_A.weight"]["dtype"], "F32");
    if (dora) {
      EXPECT_EQ(h[p + "1.self_attn.k_proj.lora_magnitude_vector"]["shape"], json({16}));
      EXPECT_FALSE(h.contains(p + "1.self_attn.k_proj.lora_magnitude_vector.weight"));
    }

    auto fresh = tiny("qwen2");
    LoraConfig read = lora_load(*fresh, dir);
    EXPECT_EQ(read.r, 4);
    EXPECT_TRUE(read.rslora);
    EXPECT_EQ(read.dora, dora);
    EXPECT_DOUBLE_EQ(read.dropout, 0.1);
    EXPECT_TRUE(at::equal(tiny_logits(*fresh), tiny_logits(*m)));
    auto a = m->adapter_parameters(), b = fresh->adapter_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); i++) {
      EXPECT_EQ(a[i].first, b[i].first);
      EXPECT_TRUE(at::equal(*a[i].second, *b[i].second)) << a[i].first;
      EXPECT_TRUE(b[i].second->requires_grad());
    }
    for (auto& [name, t] : fresh->named_parameters()) EXPECT_FALSE(t->requires_grad()) << name;
    fs::remove_all(dir);
  }
}

TEST(Lora, LayersAndRegexTargetsRoundTrip) {
  auto m = tiny();
  LoraConfig c = cfg(2, 4, {"v_proj"});
  c.layers = {0};
  lora_apply(*m, c, 1);
  perturb(*m);
  const std::string dir = temp_dir("layers");
  lora_save(*m, dir, "");
  json cj = json::parse(file_read(dir + "/adapter_config.json"));
  EXPECT_EQ(cj["layers_to_transform"], json({0}));
  EXPECT_TRUE(cj["base_model_name_or_path"].is_null());
  auto fresh = tiny();
  lora_load(*fresh, dir);
  EXPECT_TRUE(fresh->layers[0].v.adapter);
  EXPECT_FALSE(fresh->layers[1].v.adapter);
  EXPECT_TRUE(at::equal(tiny_logits(*fresh), tiny_logits(*m)));

  // PEFT's regex form of target_modules: a full match on the module name.
  cj["target_modules"] = R"(.*\.0\.self_attn\.(v|q)_proj)";
  cj["layers_to_transform"] = nullptr;
  file_write_atomic(dir + "/adapter_config.json", cj.dump());
  auto tensors = std::vector<std::pair<std::string, at::Tensor>>{};
  for (auto& [name, t] : m->adapter_parameters())
    tensors.emplace_back("base_model.model." + name, t->detach());
  tensors.emplace_back("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", at::zeros({2, 32}));
  tensors.emplace_back("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", at::zeros({32, 2}));
  safetensors_save_file(dir + "/adapter_model.safetensors", tensors);
  auto re = tiny();
  LoraConfig read = lora_load(*re, dir);
  EXPECT_EQ(read.target_regex, R"(.*\.0\.self_attn\.(v|q)_proj)");
  EXPECT_TRUE(re->layers[0].q.adapter && re->layers[0].v.adapter);
  EXPECT_FALSE(re->layers[1].q.adapter || re->layers[0].k.adapter);
  // q's adapter is zero; q and v now share one stacked down-projection (lora_linear_group), whose
  // sums may round v's term differently from v alone: equal to float rounding, not bit for bit.
  EXPECT_TRUE(at::allclose(tiny_logits(*re), tiny_logits(*m), 1e-5, 1e-6));
  fs::remove_all(dir);
}

TEST(Lora, MergeFoldsAdaptersAndSavesAPlainModel) {
  for (bool dora : {false, true}) {
    auto m = tiny("qwen2");
    lora_apply(*m, cfg(4, 8, {"all-linear"}, dora), 1);
    perturb(*m);
    at::Tensor with_adapter = tiny_logits(*m);
    lora_merge(*m);
    EXPECT_TRUE(m->adapter_parameters().empty());
    EXPECT_EQ(m->count_parameters().adapter, 0);
    at::Tensor merged = tiny_logits(*m);
    EXPECT_TRUE(at::allclose(merged, with_adapter, 1e-4, 1e-5))
        << (merged - with_adapter).abs().max().item<double>();
    EXPECT_FALSE(at::allclose(merged, tiny_logits(*tiny("qwen2")), 1e-3, 1e-3));  // the update is in there

    const std::string dir = temp_dir("merged");
    model_save(*m, dir);
    auto back = model_load(dir);
    EXPECT_TRUE(at::equal(tiny_logits(*back), merged));
    fs::remove_all(dir);
  }
  // bf16: merged in float32, cast back once.
  auto m = tiny("llama", at::kBFloat16);
  lora_apply(*m, cfg(4, 8, {"q_proj", "o_proj"}), 1);
  perturb(*m);
  at::Tensor with_adapter = tiny_logits(*m).to(at::kFloat);
  lora_merge(*m);
  EXPECT_EQ(m->layers[0].q.weight.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::allclose(tiny_logits(*m).to(at::kFloat), with_adapter, 0.05, 0.05));
}

TEST(Lora, ModelToKeepsAdaptersFloat32) {
  auto m = tiny();
  lora_apply(*m, cfg(2, 4, {"q_proj"}), 1);
  m->to(at::kCPU, at::kBFloat16);
  EXPECT_EQ(m->layers[0].q.weight.scalar_type(), at::kBFloat16);
  for (auto& [name, t] : m->adapter_parameters()) {
    EXPECT_EQ(t->scalar_type(), at::kFloat) << name;
    EXPECT_TRUE(t->requires_grad()) << name;
  }
  EXPECT_EQ(tiny_logits(*m).scalar_type(), at::kBFloat16);
}

TEST(Lora, BadConfigsAndAdapterDirsFailWithOneLine) {
  auto m = tiny();
  EXPECT_EQ(
      error_of([&] {
        lora_apply(*m, cfg(4, 8, {"q_proj", "qkv_proj"}), 0);
      }),
      "lora.apply: unknown target \"qkv_proj\" (expected q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
      "down_proj, all-linear, or a module name such as model.layers.0.self_attn.q_proj)");
  EXPECT_EQ(error_of([&] { lora_apply(*m, cfg(0, 8, {"q_proj"}), 0); }),
            "lora.apply: r must be a positive integer, got 0");
  LoraConfig far = cfg(4, 8, {"q_proj"});
  far.layers = {2};
  EXPECT_EQ(error_of([&] { lora_apply(*m, far, 0); }),
            "lora.apply: layer 2 does not exist (the model has layers 0..1)");
  EXPECT_FALSE(m->layers[0].q.adapter);  // failed applies change nothing
  EXPECT_TRUE(m->embed.requires_grad());
  lora_apply(*m, cfg(4, 8, {"q_proj"}), 0);
  EXPECT_EQ(error_of([&] { lora_apply(*m, cfg(4, 8, {"v_proj"}), 0); }),
            "lora.apply: the model already has an adapter on model.layers.0.self_attn.q_proj (merge it with "
            "lora.merge, or start from a fresh model)");
  EXPECT_EQ(error_of([&] { lora_merge(*tiny()); }),
            "lora.merge: the model has no LoRA adapters (call lora.apply or lora.load first)");

  perturb(*m);
  const std::string dir = temp_dir("bad");
  EXPECT_EQ(error_of([&] { lora_load(*tiny(), dir); }),
            dir +
                ": not a directory (expected a PEFT adapter directory with adapter_config.json and "
                "adapter_model.safetensors)");
  lora_save(*m, dir, "base");
  const std::string config_path = dir + "/adapter_config.json", weights = dir + "/adapter_model.safetensors";
  const std::string good_config = file_read(config_path);
  std::vector<std::pair<std::string, at::Tensor>> good;
  for (auto& [name, t] : m->adapter_parameters()) good.emplace_back("base_model.model." + name, t->detach());

  // The model a failed load leaves behind is as it was.
  auto fresh = tiny();
  at::Tensor before = tiny_logits(*fresh);
  auto load_error = [&] {
    std::string e = error_of([&] { lora_load(*fresh, dir); });
    EXPECT_TRUE(fresh->adapter_parameters().empty());
    EXPECT_TRUE(fresh->embed.requires_grad());
    EXPECT_TRUE(at::equal(tiny_logits(*fresh), before));
    return e;
  };

  // Wrong shape (r=3 tensors under an r=4 config).
  auto wrong = good;
  wrong[0].second = at::zeros({3, 32});
  safetensors_save_file(weights, wrong);
  EXPECT_EQ(load_error(), weights +
                              ": tensor base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight has "
                              "shape [3, 32], expected [4, 32] (r=4 from adapter_config.json)");
  // A tensor the config does not create, and one it needs that is absent.
  auto extra = good;
  extra.emplace_back("base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight", at::zeros({4, 32}));
  safetensors_save_file(weights, extra);
  EXPECT_EQ(load_error(), weights +
                              ": tensor base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight "
                              "belongs to no adapter that adapter_config.json creates");
  auto missing = good;
  missing.pop_back();
  safetensors_save_file(weights, missing);
  EXPECT_EQ(load_error(),
            weights + ": tensor base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight is missing");
  safetensors_save_file(weights, good);

  // Config problems.
  json cj = json::parse(good_config);
  auto with = [&](const char* key, json value) {
    json j = cj;
    j[key] = std::move(value);
    file_write_atomic(config_path, j.dump());
    return load_error();
  };
  EXPECT_EQ(with("target_modules", json({"q_proj", "c_attn"})),
            config_path +
                ": unknown target \"c_attn\" (expected q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
                "down_proj, all-linear, or a module name such as model.layers.0.self_attn.q_proj)");
  EXPECT_EQ(with("peft_type", "IA3"),
            config_path + ": peft_type \"IA3\" is not supported (expected \"LORA\")");
  EXPECT_EQ(with("bias", "all"), config_path + ": bias \"all\" is not supported by luatune (only \"none\")");
  EXPECT_EQ(with("modules_to_save", json({"lm_head"})),
            config_path +
                ": modules_to_save [\"lm_head\"] is not supported by luatune (luatune adapts Linear "
                "projections only)");
  EXPECT_EQ(
      with("rank_pattern", json({{"q_proj", 8}})),
      config_path +
          ": rank_pattern {\"q_proj\":8} is not supported by luatune (one r and alpha for every module)");
  EXPECT_EQ(with("r", 0), config_path + ": r must be a positive integer, got 0");
  file_write_atomic(config_path, "{\"peft_type\": ");
  EXPECT_EQ(load_error().rfind(config_path + ": not valid JSON (", 0), 0u);
  fs::remove(config_path);
  EXPECT_EQ(load_error(), config_path + ": missing (expected a PEFT adapter directory)");
  file_write_atomic(config_path, good_config);
  fs::remove(weights);
  EXPECT_EQ(load_error(), weights + ": missing (expected a PEFT adapter directory)");

  // And a good directory loads into the same model afterwards.
  safetensors_save_file(weights, good);
  lora_load(*fresh, dir);
  EXPECT_TRUE(at::equal(tiny_logits(*fresh), tiny_logits(*m)));
  fs::remove_all(dir);
}

// ============================================================================================
// LoRA in the compute dtype (lora_linear) against the composition autograd differentiates, and
// against the float32 path it replaced (PEFT's without autocast, kept here as the reference)

namespace {

at::Tensor randn64(std::vector<int64_t> shape, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::normal(0.0, 1.0, shape, gen).to(at::kDouble);
}

// The adapter as it computed before lora_linear: x cast to float32, float32 products, the sum
// formed in float32 and cast back to the base dtype. Plain LoRA only (DoRA still computes so).
class ReferenceLora : public LinearAdapter {
 public:
  explicit ReferenceLora(std::shared_ptr<LoraAdapter> a) : inner(std::move(a)) {}
  at::Tensor forward(const Linear& base, const at::Tensor& x) const override {
    at::Tensor result = base.base_forward(x);
    at::Tensor xa = x.to(inner->lora_A.scalar_type());
    if (training && inner->dropout > 0) xa = at::dropout(xa, inner->dropout, true);
    at::Tensor update = at::linear(at::linear(xa, inner->lora_A), inner->lora_B);
    return at::add(result, update, inner->scale).to(result.scalar_type());
  }
  std::vector<std::pair<std::string, at::Tensor*>> parameters() override { return inner->parameters(); }
  std::shared_ptr<LoraAdapter> inner;
};

// Puts the reference in front of every LoRA adapter of `m` (same weight tensors).
void use_reference_lora(Model& m) {
  for (Linear* lin : {&m.layers[0].q, &m.layers[0].k, &m.layers[0].v, &m.layers[0].o, &m.layers[0].gate,
                      &m.layers[0].up, &m.layers[0].down, &m.layers[1].q, &m.layers[1].k, &m.layers[1].v,
                      &m.layers[1].o, &m.layers[1].gate, &m.layers[1].up, &m.layers[1].down}) {
    auto a = std::dynamic_pointer_cast<LoraAdapter>(lin->adapter);
    if (a) lin->adapter = std::make_shared<ReferenceLora>(a);
  }
}

}  // namespace

TEST(LoraLinear, Float64OutputAndGradientsEqualAutogradOnTheComposition) {
  const double s = 1.75, p = 0.4;
  for (bool quantized : {false, true}) {
    for (double dropout : {0.0, p}) {
      for (bool x_grad : {true, false}) {  // layer 0's input needs no gradient
        Linear lin;
        lin.weight = randn64({12, 16}, 1) * 0.2;
        lin.bias = randn64({12}, 2);
        at::Tensor w = lin.weight;
        if (quantized) {  // QLoRA: the product is on the dequantized weight, in x's dtype
          auto [packed, state] = quantize_4bit(lin.weight.to(at::kFloat), QuantConfig{});
          lin.weight = packed;
          lin.quant = std::make_shared<QuantState>(state);
          w = dequantize_4bit(packed, state, at::kDouble);
        }
        at::Tensor a = randn64({3, 16}, 3).requires_grad_(true), b = randn64({12, 3}, 4).requires_grad_(true);
        at::Tensor x = randn64({2, 5, 16}, 5).requires_grad_(x_grad), g = randn64({2, 5, 12}, 6);
        at::manual_seed(9);
        at::Tensor y = lora_linear(lin, x, a, b, s, dropout);
        ASSERT_TRUE(y.grad_fn());
        EXPECT_NE(y.grad_fn()->name().find("LoraLinearFn"), std::string::npos) << y.grad_fn()->name();
        (y * g).sum().backward();

        // The same draws give the mask the reference drops x with.
        at::Tensor keep = at::ones_like(x);
        if (dropout > 0) {
          at::manual_seed(9);
          keep = std::get<1>(at::native_dropout(x.detach(), dropout, true)).to(at::kDouble) / (1 - dropout);
          EXPECT_GT((keep == 0).sum().item<int64_t>(), 0);
        }
        at::Tensor xr = x.detach().clone().requires_grad_(x_grad);
        at::Tensor ar = a.detach().clone().requires_grad_(true), br = b.detach().clone().requires_grad_(true);
        at::Tensor yr = at::linear(xr, w, lin.bias) + at::linear(at::linear(xr * keep, ar), br) * s;
        (yr * g).sum().backward();
        const std::string what = std::string(quantized ? "4-bit" : "dense") + " dropout " +
                                 std::to_string(dropout) + (x_grad ? "" : " no dx");
        EXPECT_TRUE(at::allclose(y, yr, 1e-12, 1e-12)) << what;
        if (x_grad) {
          EXPECT_TRUE(at::allclose(x.grad(), xr.grad(), 1e-12, 1e-12)) << what;
        } else {
          EXPECT_FALSE(x.grad().defined()) << what;
        }
        EXPECT_TRUE(at::allclose(a.grad(), ar.grad(), 1e-12, 1e-12)) << what;
        EXPECT_TRUE(at::allclose(b.grad(), br.grad(), 1e-12, 1e-12)) << what;
      }
    }
  }
}

TEST(LoraLinear, Bf16BaseWithFloat32AdaptersIsWithinBf16OfTheFloat32Path) {
  auto m = tiny("qwen2", at::kBFloat16);  // q/k/v biases
  lora_apply(*m, cfg(4, 8, {"all-linear"}), 1);
  perturb(*m);
  const Linear& q = m->layers[0].q;
  auto* a = dynamic_cast<LoraAdapter*>(q.adapter.get());
  at::Generator gen = at::detail::createCPUGenerator(3);
  at::Tensor x = at::normal(0.0, 1.0, {2, 5, 32}, gen).to(at::kBFloat16).requires_grad_(true);
  at::Tensor g = at::normal(0.0, 1.0, {2, 5, 32}, gen);
  at::Tensor y = q.forward(x);
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  (y.to(at::kFloat) * g).sum().backward();
  EXPECT_EQ(x.grad().scalar_type(), at::kBFloat16);
  at::Tensor ga = a->lora_A.grad(), gb = a->lora_B.grad();
  ASSERT_TRUE(ga.defined() && gb.defined());
  EXPECT_EQ(ga.scalar_type(), at::kFloat);  // the optimizer's masters get float32 gradients
  EXPECT_EQ(gb.scalar_type(), at::kFloat);

  // The float32 reference: the same bf16 weights and input, every product in float32.
  at::Tensor xf = x.detach().to(at::kFloat).requires_grad_(true);
  at::Tensor af = a->lora_A.detach().clone().requires_grad_(true);
  at::Tensor bf = a->lora_B.detach().clone().requires_grad_(true);
  at::Tensor yf = at::linear(xf, q.weight.to(at::kFloat), q.bias.to(at::kFloat)) +
                  at::linear(at::linear(xf, af), bf) * a->scale;
  (yf * g).sum().backward();
  auto close = [](const at::Tensor& t, const at::Tensor& ref) {  // bf16: 8 bits of mantissa
    return at::allclose(t.to(at::kFloat), ref, 2e-2, 2e-2 * ref.abs().max().item<double>());
  };
  EXPECT_TRUE(close(y, yf));
  EXPECT_TRUE(close(x.grad(), xf.grad()));
  EXPECT_TRUE(close(ga, af.grad()));
  EXPECT_TRUE(close(gb, bf.grad()));

  // Whole model: logits within bf16 of the float32 adapter path on the same bf16 base.
  at::Tensor logits = tiny_logits(*m).to(at::kFloat);
  use_reference_lora(*m);
  at::Tensor ref = tiny_logits(*m).to(at::kFloat);
  EXPECT_TRUE(at::allclose(logits, ref, 3e-2, 3e-2 * ref.abs().max().item<double>()));
}

TEST(LoraLinear, TrainingStepsGiveTheLossesOfTheFloat32Path) {
  // float32: the same products in another order (addmm), so the losses agree to rounding, with
  // dropout too (on the CPU native_dropout draws what dropout drew) and with recompute; bf16: the
  // compute dtype's rounding, against the float32-adapter path on the same bf16 base.
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (bool recompute : {false, true}) {
      std::vector<double> losses[2];
      for (int ref = 0; ref < 2; ref++) {
        auto m = tiny("llama", dtype);
        LoraConfig c = cfg(4, 8, {"all-linear"});
        c.dropout = 0.1;
        lora_apply(*m, c, 3);
        if (ref) use_reference_lora(*m);
        TrainOptions o = constant_lr(5e-3);
        o.max_steps = 6;
        o.gradient_checkpointing = recompute;
        Trainer t(m, o);
        Batch b = random_batch(97, 4, 12, 1);
        at::manual_seed(21);
        for (int i = 0; i < 6; i++) losses[ref].push_back(t.step(b).loss);
      }
      const double tol = dtype == at::kFloat ? 1e-5 : 2e-2;
      for (size_t i = 0; i < losses[0].size(); i++)
        EXPECT_NEAR(losses[0][i], losses[1][i], tol * losses[1][i])
            << "step " << i << " dtype " << dtype << " recompute " << recompute;
      EXPECT_LT(losses[0].back(), losses[0].front());
    }
  }
}

TEST(LoraLinear, GroupOnASharedInputEqualsEachLinearAlone) {
  // q (bias, r 3), k (4-bit base, r 2), v (r 3) and one Linear with no adapter, all on the same x;
  // float64 so that the stacked products agree with the separate ones to rounding.
  Linear q, k, v, plain;
  q.weight = randn64({12, 16}, 1) * 0.2;
  q.bias = randn64({12}, 2);
  auto [packed, state] = quantize_4bit(randn64({6, 16}, 3).to(at::kFloat) * 0.2, QuantConfig{});
  k.weight = packed;
  k.quant = std::make_shared<QuantState>(state);
  v.weight = randn64({6, 16}, 4) * 0.2;
  plain.weight = randn64({8, 16}, 5) * 0.2;
  uint64_t seed = 10;
  for (auto [lin, r] : {std::pair<Linear*, int64_t>{&q, 3}, {&k, 2}, {&v, 3}}) {
    auto a = std::make_shared<LoraAdapter>(r, 2.0 * r + 1, 0.1, false, false);
    a->lora_A = randn64({r, 16}, seed++).requires_grad_(true);
    a->lora_B = randn64({lin->out_features(), r}, seed++).requires_grad_(true);
    lin->adapter = a;
  }
  const std::vector<const Linear*> linears = {&q, &k, &plain, &v};
  at::Tensor x = randn64({2, 5, 16}, 20).requires_grad_(true);
  std::vector<at::Tensor> gs;
  for (const Linear* lin : linears) gs.push_back(randn64({2, 5, lin->out_features()}, seed++));

  // The outputs, and the gradients of x and of every adapter weight, for one way of computing.
  auto run = [&](bool grouped) {
    std::vector<at::Tensor> ys;
    if (grouped) {
      ys = lora_linear_group(linears, x);
    } else {
      for (const Linear* lin : linears) ys.push_back(lin->forward(x));
    }
    at::Tensor loss = at::zeros({}, at::kDouble);
    for (size_t i = 0; i < ys.size(); i++) loss = loss + (ys[i] * gs[i]).sum();
    loss.backward();
    std::vector<at::Tensor> out = ys;
    out.push_back(x.grad().clone());
    x.mutable_grad() = at::Tensor();
    for (Linear* lin : {&q, &k, &v})
      for (auto& [name, t] : lin->adapter->parameters()) {
        out.push_back(t->grad().clone());
        t->mutable_grad() = at::Tensor();
      }
    return std::make_pair(out, ys);
  };
  auto [separate, ys_separate] = run(false);
  auto [grouped, ys_grouped] = run(true);
  ASSERT_TRUE(ys_grouped[0].grad_fn());
  EXPECT_NE(ys_grouped[0].grad_fn()->name().find("LoraGroupFn"), std::string::npos);
  ASSERT_EQ(separate.size(), grouped.size());
  for (size_t i = 0; i < separate.size(); i++)
    EXPECT_TRUE(at::allclose(grouped[i], separate[i], 1e-12, 1e-12)) << "output/gradient " << i;

  // Without autograd: the same outputs. While training with dropout, each adapter draws its own
  // mask, so the group falls back to the separate functions.
  {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> ys = lora_linear_group(linears, x);
    for (size_t i = 0; i < ys.size(); i++) EXPECT_TRUE(at::allclose(ys[i], ys_separate[i], 1e-12, 1e-12));
  }
  for (Linear* lin : {&q, &k, &v}) lin->adapter->training = true;
  std::vector<at::Tensor> ys = lora_linear_group(linears, x);
  EXPECT_NE(ys[0].grad_fn()->name().find("LoraLinearFn"), std::string::npos) << ys[0].grad_fn()->name();
}
