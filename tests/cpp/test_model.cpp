// The transformer against itself under transformations that must not change its output (KV cache
// vs full recompute, packed vs separate documents, save -> load), RoPE scaling properties, config
// parsing, and the one-line errors for bad checkpoints.
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/model/attention.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/model/generate.h"
#include "host/model/rope.h"
#include "host/model/transformer.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
namespace fs = std::filesystem;

namespace {

// A tiny model of each family, exercising its switches: GQA everywhere, Mistral's window smaller
// than the test sequences, Qwen2 biases, Qwen3 q/k norms, Gemma 2 softcaps and alternating windows.
ModelConfig tiny(const std::string& arch) {
  std::string fields = R"({"vocab_size": 97, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2)";
  if (arch == "mistral") fields += R"(, "sliding_window": 5)";
  if (arch == "qwen3") fields += R"(, "head_dim": 8)";
  if (arch == "gemma2") fields += R"(, "head_dim": 16, "sliding_window": 4, "query_pre_attn_scalar": 16)";
  if (arch == "llama")
    fields += R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                 "high_freq_factor": 4.0, "original_max_position_embeddings": 16}, "rope_theta": 500000.0)";
  return model_config_with(arch, fields + "}", "test");
}

std::shared_ptr<Model> tiny_model(const std::string& arch, uint64_t seed = 1) {
  auto m = model_init(tiny(arch), seed, at::kFloat, at::kCPU);
  // Gemma 2 norms init to 0 (= scale 1) and biases to 0; perturb them so the test sees them.
  at::NoGradGuard g;
  at::Generator gen = at::detail::createCPUGenerator(seed + 100);
  for (auto& [name, t] : m->named_parameters())
    if (t->dim() == 1) t->add_(at::normal(0.0, 0.1, t->sizes(), gen));
  return m;
}

at::Tensor random_ids(int64_t b, int64_t t, int64_t vocab, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::randint(vocab, {b, t}, gen, at::TensorOptions(at::kLong));
}

std::string temp_dir(const std::string& name) {
  return test_temp_dir("model_" + name, /*create=*/true);
}

const char* const kArchs[] = {"llama", "mistral", "qwen2", "qwen3", "gemma2"};

}  // namespace

TEST(ModelConfig, ParsesLlama31AndBothRopeForms) {
  std::string v4 = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "tie_word_embeddings": false,
    "transformers_version": "4.43.0"})";
  ModelConfig a = model_config_parse(v4, "v4.json");
  EXPECT_EQ(a.arch, ModelArch::llama);
  EXPECT_EQ(a.head_dim, 128);
  EXPECT_EQ(a.num_kv_heads, 8);
  EXPECT_EQ(a.rope.type, RopeType::rope_llama3);
  EXPECT_EQ(a.rope.original_max_position, 8192);
  EXPECT_EQ(a.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  std::string v5 = R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 128256, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-5, "max_position_embeddings": 131072, "dtype": "bfloat16",
    "rope_parameters": {"rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192, "rope_type": "llama3"}})";
  ModelConfig b = model_config_parse(v5, "v5.json");
  EXPECT_TRUE(at::equal(rope_inv_freq(a), rope_inv_freq(b)));
  EXPECT_DOUBLE_EQ(b.rope.theta, 500000.0);
  EXPECT_EQ(b.torch_dtype, "bfloat16");
  EXPECT_NE(model_config_to_json(b).find("\"rope_parameters\""),
            std::string::npos);  // written back in its form
  // Fields we do not model survive a round trip through config.json.
  EXPECT_NE(model_config_to_json(a).find("\"transformers_version\": \"4.43.0\""), std::string::npos);
  ModelConfig again = model_config_parse(model_config_to_json(a), "again.json");
  EXPECT_EQ(model_config_to_json(again), model_config_to_json(a));
}

TEST(ModelConfig, ErrorsNameTheField) {
  auto msg = [](const std::string& text) {
    return error_of([&] { model_config_parse(text, "dir/config.json"); });
  };
  const std::string base =
      R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 8, "num_attention_heads": 2)";
  EXPECT_EQ(msg(R"({"architectures": ["LlamaForCausalLM"], )" + base + "}"),
            "dir/config.json: missing required field \"num_hidden_layers\" (an integer)");
  EXPECT_EQ(msg(R"({"architectures": ["GPT2LMHeadModel"], "num_hidden_layers": 1, )" + base + "}")
                .rfind("dir/config.json: architecture \"GPT2LMHeadModel\" is not supported", 0),
            0u);
  EXPECT_EQ(
      msg(R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}, )" +
          base + "}"),
      "dir/config.json: rope_scaling: rope_type \"dynamic\" is not supported (supported: default, linear, "
      "llama3, yarn)");
  EXPECT_EQ(
      msg(R"({"architectures": ["MistralForCausalLM"], "num_hidden_layers": 1, "num_local_experts": 8, )" +
          base + "}"),
      "dir/config.json: field \"num_local_experts\" is not supported (mixture-of-experts models are not "
      "implemented)");
  EXPECT_EQ(
      msg(R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1, "quantization_config": {"quant_method": "gptq", "bits": 4}, )" +
          base + "}"),
      "dir/config.json: quantization_config gptq is not supported (only bitsandbytes 4-bit, nf4 or fp4)");
  EXPECT_EQ(msg(R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": "2", )" + base + "}"),
            "dir/config.json: field \"num_hidden_layers\" must be an integer, got \"2\"");
  EXPECT_THROW(model_config_with("llama", R"({"hiden_size": 8})", "models.init"), UsageError);
}

TEST(ModelConfig, MissingKeysTakeHFDefaultsAndNullsSwitchOff) {
  const std::string sizes =
      R"("vocab_size": 10, "hidden_size": 32, "intermediate_size": 8, "num_hidden_layers": 2,
    "num_attention_heads": 4, "head_dim": 8)";
  ModelConfig m = model_config_parse(
      R"({"architectures": ["MistralForCausalLM"], "num_key_value_heads": 2, )" + sizes + "}", "m");
  EXPECT_EQ(m.sliding_window, 4096);  // missing: Mistral's default window
  ModelConfig m0 = model_config_parse(
      R"({"architectures": ["MistralForCausalLM"], "num_key_value_heads": null, "sliding_window": null, )" +
          sizes + "}",
      "m0");
  EXPECT_EQ(m0.sliding_window, 0);  // null: no window
  EXPECT_EQ(m0.num_kv_heads, 4);    // null: as many as the query heads
  ModelConfig g = model_config_parse(
      R"({"architectures": ["Gemma2ForCausalLM"], "num_key_value_heads": 2, )" + sizes + "}", "g");
  EXPECT_DOUBLE_EQ(g.attn_logit_softcap, 50.0);
  EXPECT_DOUBLE_EQ(g.final_logit_softcap, 30.0);
  EXPECT_NE(model_config_to_json(g).find("\"query_pre_attn_scalar\": 256,"), std::string::npos);  // an int
  ModelConfig g0 = model_config_parse(R"({"architectures": ["Gemma2ForCausalLM"], "num_key_value_heads": 2,
    "attn_logit_softcapping": null, "final_logit_softcapping": null, )" +
                                          sizes + "}",
                                      "g0");
  EXPECT_EQ(g0.attn_logit_softcap, 0.0);
  // Qwen3 with attention_bias: o_proj has a bias too, as in HF's Qwen3Attention.
  ModelConfig q = model_config_parse(R"({"architectures": ["Qwen3ForCausalLM"], "num_key_value_heads": 2,
    "attention_bias": true, "hidden_act": "silu", )" +
                                         sizes + "}",
                                     "q");
  bool has_o_bias = false;
  for (const auto& [name, shape] : model_expected_tensors(q))
    has_o_bias |= name == "model.layers.0.self_attn.o_proj.bias";
  EXPECT_TRUE(has_o_bias);
  // Qwen2's window only exists with use_sliding_window.
  ModelConfig q2 = model_config_parse(R"({"architectures": ["Qwen2ForCausalLM"], "num_key_value_heads": 2,
    "layer_types": ["sliding_attention", "full_attention"], )" +
                                          sizes + "}",
                                      "q2");
  EXPECT_EQ(q2.layer_sliding, (std::vector<bool>{false, false}));
}

TEST(ModelConfig, LayerTypesPerFamily) {
  ModelConfig g = tiny("gemma2");
  EXPECT_EQ(g.layer_sliding, (std::vector<bool>{true, false}));  // even layers slide
  EXPECT_DOUBLE_EQ(g.softmax_scale(), 0.25);                     // query_pre_attn_scalar^-0.5
  EXPECT_DOUBLE_EQ(g.attn_logit_softcap, 50.0);
  ModelConfig m = tiny("mistral");
  EXPECT_EQ(m.layer_sliding, (std::vector<bool>{true, true}));
  EXPECT_EQ(tiny("qwen2").layer_sliding, (std::vector<bool>{false, false}));
}

TEST(Rope, Llama3ScalingKeepsHighAndDividesLowFrequencies) {
  ModelConfig c =
      model_config_parse(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 8, "hidden_size": 1024,
    "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 8, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192}})",
                         "c");
  ModelConfig plain = c;
  plain.rope.type = RopeType::rope_default;
  at::Tensor base = rope_inv_freq(plain), scaled = rope_inv_freq(c);
  ASSERT_EQ(base.size(0), 64);
  for (int64_t i = 0; i < 64; i++) {
    double f = base[i].item<double>(), s = scaled[i].item<double>();
    double wavelen = 2 * M_PI / f;
    if (wavelen < 8192.0 / 4)
      EXPECT_FLOAT_EQ(s, f) << i;  // high frequency: unchanged
    else if (wavelen > 8192.0)
      EXPECT_FLOAT_EQ(s, f / 8) << i;  // low frequency: divided by factor
    else
      EXPECT_TRUE(s < f && s > f / 8) << i;  // blended
  }
  EXPECT_FLOAT_EQ(base[1].item<float>(), static_cast<float>(1.0 / std::pow(500000.0, 2.0 / 128)));
}

TEST(Model, KVCacheMatchesFullForward) {
  for (const char* arch : kArchs) {
    SCOPED_TRACE(arch);
    auto m = tiny_model(arch);
    at::NoGradGuard g;
    at::Tensor ids = random_ids(2, 11, m->config.vocab_size, 7);
    at::Tensor full = m->forward(ids);
    ASSERT_EQ(full.sizes(), (std::vector<int64_t>{2, 11, 97}));
    KVCache cache = m->new_cache(2, 16);
    ForwardOptions o;
    o.cache = &cache;
    std::vector<at::Tensor> parts = {m->forward(ids.narrow(1, 0, 6), o)};
    for (int64_t t = 6; t < 11; t++) parts.push_back(m->forward(ids.narrow(1, t, 1), o));
    EXPECT_EQ(cache.length, 11);
    EXPECT_TRUE(at::allclose(at::cat(parts, 1), full, 1e-4, 1e-5));
  }
}

TEST(Model, SlidingWindowLimitsWhatIsSeen) {
  // Changing a token more than `window` positions back must not change Mistral's output at the last
  // position of the first layer... across 2 layers the receptive field is 2 * (window - 1).
  auto m = tiny_model("mistral");
  at::NoGradGuard g;
  at::Tensor ids = random_ids(1, 14, 97, 3);
  at::Tensor other = ids.clone();
  other[0][0] = (ids[0][0].item<int64_t>() + 1) % 97;
  at::Tensor a = m->forward(ids), b = m->forward(other);
  EXPECT_FALSE(at::allclose(a.select(1, 1), b.select(1, 1)));         // inside the window: changes
  EXPECT_TRUE(at::allclose(a.select(1, 13), b.select(1, 13), 0, 0));  // 13 > 2 * 4: unchanged
}

TEST(Model, CausalByTokenOrderEvenWithRestartingPositions) {
  // Positions only feed RoPE: with positions restarting mid-row (and no segments), a token still
  // never sees the tokens after it.
  auto m = tiny_model("llama");
  at::NoGradGuard g;
  at::Tensor ids = random_ids(1, 10, 97, 21), other = ids.clone();
  other[0][9] = (ids[0][9].item<int64_t>() + 1) % 97;
  ForwardOptions o;
  o.positions = at::cat({at::arange(5, at::kLong), at::arange(5, at::kLong)}).unsqueeze(0);
  at::Tensor a = m->forward(ids, o), b = m->forward(other, o);
  EXPECT_TRUE(at::equal(a.narrow(1, 0, 9), b.narrow(1, 0, 9)));
  EXPECT_FALSE(at::allclose(a.select(1, 9), b.select(1, 9)));
}

TEST(Model, PackedDocumentsEqualSeparateForwards) {
  for (const char* arch : kArchs) {
    SCOPED_TRACE(arch);
    auto m = tiny_model(arch);
    at::NoGradGuard g;
    at::Tensor a = random_ids(1, 5, 97, 11), b = random_ids(1, 7, 97, 12);
    ForwardOptions o;
    o.positions = at::cat({at::arange(5, at::kLong), at::arange(7, at::kLong)}).unsqueeze(0);
    o.segments = at::cat({at::zeros({5}, at::kLong), at::ones({7}, at::kLong)}).unsqueeze(0);
    at::Tensor packed = m->forward(at::cat({a, b}, 1), o);
    EXPECT_TRUE(at::allclose(packed.narrow(1, 0, 5), m->forward(a), 1e-4, 1e-5));
    EXPECT_TRUE(at::allclose(packed.narrow(1, 5, 7), m->forward(b), 1e-4, 1e-5));
  }
}

TEST(Model, GenerationWithCacheEqualsWithout) {
  for (const char* arch : kArchs) {
    SCOPED_TRACE(arch);
    auto m = tiny_model(arch);
    m->config.eos_token_ids.clear();
    GenerateOptions o;
    o.max_new_tokens = 12;
    GenerateResult cached = model_generate_ids(*m, {1, 5, 9}, o, nullptr);
    o.use_cache = false;
    GenerateResult plain = model_generate_ids(*m, {1, 5, 9}, o, nullptr);
    EXPECT_EQ(cached.new_ids.size(), 12u);
    EXPECT_EQ(cached.new_ids, plain.new_ids);
    // Sampling is reproducible from the seed, with or without the cache.
    o.temperature = 1.0, o.top_k = 20, o.top_p = 0.9, o.seed = 5;
    GenerateResult s1 = model_generate_ids(*m, {1, 5, 9}, o, nullptr);
    o.use_cache = true;
    GenerateResult s2 = model_generate_ids(*m, {1, 5, 9}, o, nullptr);
    EXPECT_EQ(s1.new_ids, s2.new_ids);
  }
}

TEST(Model, TopKOneIsGreedyAndTopPKeepsTheNucleus) {
  at::Tensor logits = at::tensor({0.0f, 3.0f, 1.0f, 2.9f});
  at::Generator gen = at::detail::createCPUGenerator(0);
  GenerateOptions o;
  o.temperature = 1.0, o.top_k = 1;
  for (int i = 0; i < 20; i++) EXPECT_EQ(sample_next(logits, o, gen), 1);
  o.top_k = 0, o.top_p = 0.5;  // p(1) ~ 0.46 < 0.5, so {1, 3} is the nucleus
  for (int i = 0; i < 50; i++) {
    int64_t s = sample_next(logits, o, gen);
    EXPECT_TRUE(s == 1 || s == 3) << s;
  }
}

TEST(Model, PerplexityOfUniformModelIsVocabSize) {
  auto m = model_init(tiny("llama"), 0, at::kFloat, at::kCPU);
  {
    at::NoGradGuard g;
    m->norm.zero_();  // zero hidden state -> all-equal logits -> uniform distribution
  }
  PerplexityResult r = model_perplexity(*m, {{1, 2, 3, 4, 5}, {6, 7, 8}}, 4);
  EXPECT_EQ(r.tokens, 3 + 2);  // windows [1..4] and [6..8] predict 3 and 2; [5] alone predicts none
  EXPECT_NEAR(r.perplexity, 97.0, 1e-3);
}

// An attention branch the model has never heard of: adds a learned vector to o_proj's output.
struct BiasBranch : AttentionBranch {
  at::Tensor bias;  // (C)
  at::Tensor forward(const LayerWeights&, const ModelConfig&, const at::Tensor& q) const override {
    return bias.to(q.scalar_type()).expand({q.size(0), q.size(2), bias.size(0)});  // (B, T, C)
  }
  std::vector<std::pair<std::string, at::Tensor*>> parameters() override { return {{"test_bias", &bias}}; }
};

TEST(Model, AttentionBranchesRunListAndSwitchThroughTheirInterface) {
  auto m = tiny_model("llama");
  at::Tensor ids = random_ids(2, 6, 97, 3);
  at::NoGradGuard g;
  at::Tensor before = m->forward(ids);
  auto b = std::make_shared<BiasBranch>();
  b->bias = at::full({m->config.hidden_size}, 0.5);
  m->layers[1].attn_branch = b;
  EXPECT_FALSE(at::allclose(m->forward(ids), before));
  auto params = m->adapter_parameters();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0].first, "model.layers.1.self_attn.test_bias");
  EXPECT_EQ(params[0].second, &b->bias);
  EXPECT_EQ(m->count_parameters().adapter, m->config.hidden_size);
  m->set_training(true);
  EXPECT_TRUE(b->training);
  m->set_adapters_enabled(false);
  EXPECT_TRUE(at::equal(m->forward(ids), before));
}

TEST(Model, CountsParametersPerComponent) {
  auto m = model_init(tiny("qwen2"), 0, at::kFloat, at::kCPU);
  ParamCounts n = m->count_parameters();
  EXPECT_EQ(n.embedding, 97 * 32);
  EXPECT_EQ(n.lm_head, 97 * 32);  // qwen2 default: untied
  // q (32x32 + 32) k, v (16x32 + 16 each) o (32x32) per layer.
  EXPECT_EQ(n.attention, 2 * (32 * 32 + 32 + 2 * (16 * 32 + 16) + 32 * 32));
  EXPECT_EQ(n.mlp, 2 * 3 * 48 * 32);
  EXPECT_EQ(n.norm, 2 * 2 * 32 + 32);
  EXPECT_EQ(n.total, n.embedding + n.lm_head + n.attention + n.mlp + n.norm);
  EXPECT_EQ(n.trainable, n.total);
}

TEST(Checkpoint, SaveLoadRoundTripIsBitExact) {
  for (const char* arch : kArchs) {
    SCOPED_TRACE(arch);
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      auto m = tiny_model(arch);
      m->to(at::kCPU, dtype);
      std::string dir = temp_dir(std::string(arch) + "_" + std::to_string(static_cast<int>(dtype)));
      SaveOptions so;
      so.max_shard_bytes = 20000;  // several shards
      model_save(*m, dir, so);
      EXPECT_TRUE(file_exists(dir + "/model.safetensors.index.json"));
      EXPECT_TRUE(file_exists(dir + "/generation_config.json"));
      auto back = model_load(dir, {});
      EXPECT_EQ(back->dtype(), dtype);
      auto a = m->state(), b = back->state();
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); i++) {
        EXPECT_EQ(a[i].first, b[i].first);
        EXPECT_TRUE(at::equal(a[i].second, b[i].second)) << a[i].first;
      }
      at::NoGradGuard g;
      at::Tensor ids = random_ids(1, 6, 97, 1);
      EXPECT_TRUE(at::equal(m->forward(ids), back->forward(ids)));
      // Load with conversion: float32 on request.
      auto f32 = model_load(dir, {"float32", "cpu"});
      EXPECT_EQ(f32->dtype(), at::kFloat);
      fs::remove_all(dir);
    }
  }
}

TEST(Checkpoint, BadCheckpointsFailWithOneLine) {
  auto m = tiny_model("llama");
  std::string dir = temp_dir("bad");
  model_save(*m, dir);
  auto load_error = [&]() { return error_of([&] { model_load(dir); }); };
  EXPECT_EQ(load_error(), "(no error)");
  // The config says a bigger hidden size than the weights have.
  std::string config = file_read(dir + "/config.json");
  std::string bigger = config;
  bigger.replace(bigger.find("\"intermediate_size\": 48"), 23, "\"intermediate_size\": 64");
  file_write_atomic(dir + "/config.json", bigger);
  EXPECT_EQ(load_error(),
            dir +
                "/model.safetensors: tensor model.layers.0.mlp.gate_proj.weight has shape [48, 32], "
                "expected [64, 32] from config.json");
  // One layer more than the checkpoint has.
  std::string deeper = config;
  deeper.replace(deeper.find("\"num_hidden_layers\": 2"), 22, "\"num_hidden_layers\": 3");
  file_write_atomic(dir + "/config.json", deeper);
  EXPECT_EQ(load_error(), dir + "/config.json: num_hidden_layers is 3, but the weights in " + dir +
                              " have 2 layers (model.layers.0 to model.layers.1)");
  // One layer fewer: the checkpoint has tensors the config does not explain.
  std::string shallower = config;
  shallower.replace(shallower.find("\"num_hidden_layers\": 2"), 22, "\"num_hidden_layers\": 1");
  file_write_atomic(dir + "/config.json", shallower);
  EXPECT_EQ(load_error(), dir + "/config.json: num_hidden_layers is 1, but the weights in " + dir +
                              " have 2 layers (model.layers.0 to model.layers.1)");
  // A missing config field.
  std::string no_heads = config;
  no_heads.replace(no_heads.find("\"num_attention_heads\""), 21, "\"num_attention_headz\"");
  file_write_atomic(dir + "/config.json", no_heads);
  EXPECT_EQ(load_error(), dir + "/config.json: missing required field \"num_attention_heads\" (an integer)");
  fs::remove_all(dir);
}

TEST(Attention, FusedPathMatchesExplicit) {
  // Without a softcap attention_forward is SDPA (flash / memory-efficient on CUDA): it must agree
  // with the explicit maths, masks and T != S included.
  at::Generator gen = at::detail::createCPUGenerator(4);
  std::vector<c10::Device> devices = {at::kCPU};
  if (at::hasCUDA()) devices.push_back(c10::Device(at::kCUDA, 0));
  for (const c10::Device& dev : devices) {
    for (at::ScalarType dt : {at::kFloat, at::kBFloat16}) {
      auto opts = at::TensorOptions(at::kFloat);
      at::Tensor q = at::randn({2, 4, 5, 16}, gen, opts).to(dev, dt);
      at::Tensor k = at::randn({2, 4, 9, 16}, gen, opts).to(dev, dt);
      at::Tensor v = at::randn({2, 4, 9, 16}, gen, opts).to(dev, dt);
      at::Tensor allowed =
          (at::arange(9).unsqueeze(0) <= at::arange(4, 9).unsqueeze(1)).view({1, 1, 5, 9}).to(dev);
      double tol = dt == at::kFloat ? 1e-5 : 2e-2;
      EXPECT_TRUE(at::allclose(attention_forward(q, k, v, allowed, 0.25, 0).to(at::kFloat),
                               attention_explicit(q, k, v, allowed, 0.25, 0).to(at::kFloat), tol, tol));
      at::Tensor kk = k.narrow(2, 0, 5), vv = v.narrow(2, 0, 5);
      EXPECT_TRUE(at::allclose(attention_forward(q, kk, vv, at::Tensor(), 0.25, 0).to(at::kFloat),
                               attention_explicit(q, kk, vv, at::Tensor(), 0.25, 0).to(at::kFloat), tol,
                               tol));
    }
  }
}
