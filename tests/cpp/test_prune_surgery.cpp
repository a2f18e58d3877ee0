// Structured surgery (host/prune/surgery.h): the pruned model must compute exactly what the masked
// model computes (StructureMasks with the removed structures at 0 and the kept ones at their soft
// values), for GQA, MHA with tied embeddings, Qwen2 biases, Qwen3 q/k norms and Gemma 2's norms,
// with LoRA adapters too; the saved directory reloads to the same logits; the target arithmetic
// follows docs/pruning.md; bad specs fail before anything changes.
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>

#include "host/adapt/lora.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/prune/surgery.h"
#include "tests/cpp/test_tiny.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
namespace fs = std::filesystem;

namespace {

// 3 layers, hidden 32, 4 heads of 8 in 2 KV groups (unless overridden), intermediate 48.
std::shared_ptr<Model> tiny(const std::string& arch, const std::string& extra = "", uint64_t seed = 1) {
  std::string fields = R"({"vocab_size": 61, "hidden_size": 32, "intermediate_size": 48,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8)" +
                       extra + "}";
  auto m = model_init(model_config_with(arch, fields, "test"), seed, at::kFloat, at::kCPU);
  // Norm weights start at 1 (or 0 for Gemma); give them values so folding into them is visible.
  at::NoGradGuard g;
  at::Generator gen = at::detail::createCPUGenerator(seed + 100);
  for (auto& [name, t] : m->named_parameters())
    if (t->dim() == 1) t->add_(at::normal(0.0, 0.2, t->sizes(), gen));
  return m;
}

at::Tensor ids() {
  at::Generator gen = at::detail::createCPUGenerator(5);
  return at::randint(61, {2, 7}, gen, at::TensorOptions(at::kLong));
}

at::Tensor uniform(std::vector<int64_t> shape, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::rand(shape, gen) + 0.5;  // soft values in [0.5, 1.5)
}

// A per-layer (L, n) mask: `scale` (or 1) where `kept[l]` lists the index, 0 elsewhere; all kept
// when `kept` is empty.
at::Tensor per_layer_mask(const at::Tensor& scale, const std::vector<std::vector<int64_t>>& kept, int64_t L,
                          int64_t n) {
  at::Tensor z = scale.defined() ? scale.clone() : at::ones({L, n});
  if (kept.empty()) return z;
  at::Tensor keep = at::zeros({L, n});
  for (int64_t l = 0; l < L; l++)
    for (int64_t j : kept[l]) keep[l][j] = 1;
  return z * keep;
}

// The masks equal to `spec`: removed structures 0, kept ones their scale (or 1).
StructureMasks masks_of(const Model& m, const PruneSpec& spec) {
  const ModelConfig& c = m.config;
  const int64_t L = c.num_layers, H = c.num_heads, I = c.intermediate_size, C = c.hidden_size;
  StructureMasks z;
  z.layer = at::zeros({L});
  for (int64_t l = 0; l < L; l++)
    if (spec.layers.empty() || std::count(spec.layers.begin(), spec.layers.end(), l))
      z.layer[l] = spec.layer_scale.defined() ? spec.layer_scale[l].item<double>() : 1.0;
  z.head = per_layer_mask(spec.head_scale, spec.heads, L, H);
  z.intermediate = per_layer_mask(spec.intermediate_scale, spec.intermediate, L, I);
  z.hidden = spec.hidden_scale.defined() ? spec.hidden_scale.clone() : at::ones({C});
  if (!spec.hidden.empty()) {
    at::Tensor keep = at::zeros({C});
    for (int64_t j : spec.hidden) keep[j] = 1;
    z.hidden = z.hidden * keep;
  }
  return z;
}

at::Tensor masked_logits(const Model& m, const PruneSpec& spec) {
  at::NoGradGuard g;
  StructureMasks z = masks_of(m, spec);
  ForwardOptions fo;
  fo.masks = &z;
  return m.forward(ids(), fo);
}

at::Tensor logits(const Model& m) {
  at::NoGradGuard g;
  return m.forward(ids());
}

// Drops layer 1, keeps heads {0, 3} (one per KV group) in layer 0 and {1, 2} in layer 2, 40 of 48
// MLP channels per layer, 24 of 32 hidden channels; soft values everywhere.
PruneSpec full_spec(const Model& m, bool scales = true) {
  PruneSpec s;
  s.layers = {0, 2};
  s.heads = {{0, 3}, {}, {1, 2}};
  for (int64_t l = 0; l < 3; l++) {
    std::vector<int64_t> keep;
    for (int64_t j = 0; j < 48; j++)
      if ((j + l) % 6 != 0) keep.push_back(j);
    s.intermediate.push_back(keep);
  }
  for (int64_t j = 0; j < 32; j++)
    if (j % 4 != 1) s.hidden.push_back(j);
  if (scales) {
    s.layer_scale = uniform({3}, 1);
    s.head_scale = uniform({3, m.config.num_heads}, 2);
    s.intermediate_scale = uniform({3, 48}, 3);
    s.hidden_scale = uniform({32}, 4);
  }
  return s;
}

void expect_pruned_equals_masked(const std::string& arch, const std::string& extra, bool lora = false) {
  auto m = tiny(arch, extra);
  if (lora) {
    LoraConfig lc;
    lc.r = 4;
    lc.targets = {"all-linear"};
    lora_apply(*m, lc, 3);
    perturb_adapters(*m, 9);
  }
  PruneSpec spec = full_spec(*m);
  at::Tensor want = masked_logits(*m, spec);
  ModelShape s = prune_apply(*m, spec);
  EXPECT_EQ(s.layers, 2);
  EXPECT_EQ(s.heads, 2);
  EXPECT_EQ(s.kv_heads, 2);
  EXPECT_EQ(s.head_dim, 8);
  EXPECT_EQ(s.hidden, 24);
  EXPECT_EQ(s.intermediate, 40);
  EXPECT_EQ(m->layers.size(), 2u);
  EXPECT_EQ(m->layers[0].q.weight.sizes(), (std::vector<int64_t>{16, 24}));
  EXPECT_EQ(m->layers[0].o.weight.sizes(), (std::vector<int64_t>{24, 16}));
  EXPECT_EQ(m->layers[1].down.weight.sizes(), (std::vector<int64_t>{24, 40}));
  at::Tensor got = logits(*m);
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-5))
      << arch << ": max diff " << (got - want).abs().max().item<double>();
}

std::string temp_dir(const std::string& name) {
  return test_temp_dir("prune_" + name);
}

}  // namespace

TEST(PruneSurgery, LlamaGqaEqualsMaskedModel) {
  expect_pruned_equals_masked("llama", "");
}
TEST(PruneSurgery, TiedMhaEqualsMaskedModel) {
  // MHA: 4 KV heads, so one head per group; the tied embedding is not hidden-masked.
  auto m = tiny("llama", R"(, "num_key_value_heads": 4, "tie_word_embeddings": true)");
  PruneSpec spec = full_spec(*m);
  spec.heads = {{0, 3}, {}, {1, 2}};
  at::Tensor want = masked_logits(*m, spec);
  ModelShape s = prune_apply(*m, spec);
  EXPECT_EQ(s.heads, 2);
  EXPECT_EQ(s.kv_heads, 2);
  EXPECT_FALSE(m->lm_head.defined());
  EXPECT_TRUE(at::allclose(logits(*m), want, 1e-4, 1e-5));
}
TEST(PruneSurgery, Qwen2BiasesEqualMaskedModel) {
  expect_pruned_equals_masked("qwen2", "");
}
TEST(PruneSurgery, Qwen3QkNormEqualsMaskedModel) {
  expect_pruned_equals_masked("qwen3", R"(, "attention_bias": true)");
}
TEST(PruneSurgery, Gemma2EqualsMaskedModel) {
  expect_pruned_equals_masked("gemma2", R"(, "sliding_window": 4, "query_pre_attn_scalar": 8)");
}
TEST(PruneSurgery, LoraWrappedEqualsMaskedModel) {
  expect_pruned_equals_masked("llama", "", true);
}
TEST(PruneSurgery, LoraWrappedGemma2EqualsMaskedModel) {
  expect_pruned_equals_masked("gemma2", R"(, "sliding_window": 4)", true);
}

TEST(PruneSurgery, WholeGroupsDropKeyValueHeads) {
  auto m = tiny("llama", "");
  PruneSpec spec;
  spec.heads = {{2, 3}, {0, 1}, {2, 3}};  // one whole group per layer
  at::Tensor want = masked_logits(*m, spec);
  ModelShape s = prune_apply(*m, spec);
  EXPECT_EQ(s.heads, 2);
  EXPECT_EQ(s.kv_heads, 1);
  EXPECT_EQ(m->layers[0].k.weight.size(0), 8);
  EXPECT_TRUE(m->config.head_dim_explicit);  // 8 * 2 != 32
  EXPECT_TRUE(at::allclose(logits(*m), want, 1e-4, 1e-5));
}

TEST(PruneSurgery, SavedModelReloadsWithTheNewConfig) {
  auto m = tiny("gemma2", R"(, "sliding_window": 4)");
  prune_apply(*m, full_spec(*m));
  std::string dir = temp_dir("save");
  model_save(*m, dir);
  LoadOptions lo;
  lo.dtype = "float32";
  auto back = model_load(dir, lo);
  EXPECT_EQ(back->config.num_layers, 2);
  EXPECT_EQ(back->config.hidden_size, 24);
  EXPECT_EQ(back->config.head_dim, 8);
  EXPECT_EQ(back->config.num_heads, 2);
  // Layers 0 and 2 of Gemma 2 both slide; the kept pattern is written as layer_types.
  EXPECT_EQ(back->config.layer_sliding, (std::vector<bool>{true, true}));
  EXPECT_TRUE(at::equal(logits(*back), logits(*m)));
  fs::remove_all(dir);
}

TEST(PruneSurgery, GradientFlagsAndDtypeKept) {
  auto m = tiny("llama", "");
  for (auto& [name, t] : m->named_parameters()) t->requires_grad_(false);
  m->layers[0].q.weight.requires_grad_(true);
  prune_apply(*m, full_spec(*m, false));
  EXPECT_TRUE(m->layers[0].q.weight.requires_grad());
  EXPECT_TRUE(m->layers[0].q.weight.is_leaf());
  EXPECT_FALSE(m->layers[1].q.weight.requires_grad());
  EXPECT_EQ(m->embed.scalar_type(), at::kFloat);
}

TEST(PruneSurgery, BadSpecsFailBeforeAnyChange) {
  auto m = tiny("llama", "");
  at::Tensor before = logits(*m);
  auto run = [&](PruneSpec s) { return error_of([&] { prune_apply(*m, s); }); };
  PruneSpec uneven;
  uneven.heads = {{0, 1, 2}, {0, 1, 2}, {0, 1, 2}};
  EXPECT_EQ(run(uneven),
            "prune: layer 0 keeps 1 query heads in KV group 1 and 2 in group 0; every kept group must keep "
            "the same "
            "number (docs/pruning.md, grouped-query attention)");
  PruneSpec differ;
  differ.heads = {{0, 2}, {0, 1, 2, 3}, {0, 2}};
  EXPECT_EQ(run(differ),
            "prune: layer 1 keeps 2 KV groups of 2 query heads, layer 0 keeps 2 of 1; every layer must keep "
            "the same shape");
  PruneSpec range;
  range.layers = {0, 3};
  EXPECT_EQ(run(range), "prune: layers number 3 outside [0, 3)");
  PruneSpec order;
  order.hidden = {3, 1};
  EXPECT_EQ(run(order), "prune: hidden channels must be strictly ascending (3 then 1)");
  PruneSpec inter;
  inter.intermediate = {{0, 1}, {0, 1, 2}, {0, 1}};
  EXPECT_EQ(
      run(inter),
      "prune: layer 1 keeps 3 intermediate channels, layer 0 keeps 2; every layer must keep the same number");
  PruneSpec scale;
  scale.head_scale = at::ones({3, 5});
  EXPECT_EQ(run(scale), "prune: head_scale must have shape [3, 4], got [3, 5]");
  EXPECT_TRUE(at::equal(logits(*m), before));
  EXPECT_EQ(m->config.num_layers, 3);

  LoraConfig dora;
  dora.dora = true;
  lora_apply(*m, dora, 1);
  EXPECT_EQ(run(full_spec(*m)),
            "prune: model.layers.0.self_attn.q_proj.weight has a DoRA adapter, whose magnitude "
            "normalisation slicing would change; merge it first (lora.merge)");
}

TEST(PruneTargets, Llama31EightBToTheShearedRecipeShape) {
  ModelConfig c = model_config_with("llama", R"({"vocab_size": 128256, "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8})",
                                    "t");
  TargetSparsity t;
  t.layers = 0.2, t.heads = 0.3, t.hidden = 0.1, t.intermediate = 0.4, t.round_to = 128;
  TargetShape s = prune_targets(c, t);
  EXPECT_EQ(s.shape.layers, 26);  // round(25.6)
  EXPECT_EQ(s.shape.heads, 24);   // 8 groups x round(4 x 0.7 = 2.8)
  EXPECT_EQ(s.shape.kv_heads, 8);
  EXPECT_EQ(s.shape.hidden, 3712);        // 3686.4 -> 29 x 128
  EXPECT_EQ(s.shape.intermediate, 8576);  // 8601.6 -> 67 x 128
  EXPECT_EQ(s.shape.head_dim, 128);
  EXPECT_FALSE(s.whole_groups);
  t.round_to = 1;
  EXPECT_EQ(prune_targets(c, t).shape.hidden, 3686);
  // Fewer heads than groups: whole groups go.
  t.heads = 0.9;
  s = prune_targets(c, t);
  EXPECT_TRUE(s.whole_groups);
  EXPECT_EQ(s.shape.kv_heads, 1);
  EXPECT_EQ(s.shape.heads, 4);
}

TEST(PruneTargets, SmallWidthsRoundToIntegersAndErrorsNameTheTarget) {
  ModelConfig c = tiny("llama", "")->config;
  TargetSparsity t;
  t.hidden = 0.1, t.round_to = 128;  // 32 < 8 x 128: nearest integer
  EXPECT_EQ(prune_targets(c, t).shape.hidden, 29);
  t.heads = 0.5;  // MHA-like rounding inside groups of 2: one per group
  EXPECT_EQ(prune_targets(c, t).shape.heads, 2);
  t.layers = 1.0;
  EXPECT_EQ(error_of([&] { prune_targets(c, t); }), "prune: target layer sparsity 1 outside [0, 1)");
  t.layers = -0.1;
  EXPECT_EQ(error_of([&] { prune_targets(c, t); }), "prune: target layer sparsity -0.1 outside [0, 1)");
  ModelShape want;
  want.heads = 6;
  EXPECT_EQ(error_of([&] { prune_targets_counts(c, want); }),
            "prune: target attention heads 6 outside [1, 4] (the model has 4)");
  want.heads = 3;
  EXPECT_EQ(
      error_of([&] { prune_targets_counts(c, want); }),
      "prune: 3 attention heads with 2 key/value heads is not reachable from 4 heads in 2 groups: keep every "
      "group with the same number of heads (a multiple of 2), or whole groups (2 heads per kept group)");
  want.heads = 2, want.kv_heads = 1;
  EXPECT_TRUE(prune_targets_counts(c, want).whole_groups);
  want = ModelShape();
  want.head_dim = 4;
  EXPECT_EQ(error_of([&] { prune_targets_counts(c, want); }),
            "prune: head_dim cannot change (RoPE); the model has 8, the target says 4");
}

TEST(PruneSelect, KeepsTheBestByScorePerGroupAndLayer) {
  auto m = tiny("llama", "");
  StructureScores sc;
  sc.layer = at::tensor({3.0, 1.0, 2.0});
  sc.head = at::tensor({0.1, 0.9, 0.8, 0.2, 5.0, 4.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0}).view({3, 4});
  sc.hidden = at::arange(32, at::kFloat).neg();  // lower channels better
  sc.intermediate = at::zeros({3, 48});          // ties: lower numbers win
  TargetShape t;
  t.shape = model_shape(m->config);
  t.shape.layers = 2, t.shape.heads = 2, t.shape.hidden = 30, t.shape.intermediate = 40;
  PruneSpec s = prune_select(m->config, sc, t);
  EXPECT_EQ(s.layers, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(s.heads[0], (std::vector<int64_t>{1, 2}));  // best of {0,1} and of {2,3}
  EXPECT_EQ(s.heads[1], (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(s.heads[2], (std::vector<int64_t>{0, 2}));  // ties to the lower number
  EXPECT_EQ(s.hidden.size(), 30u);
  EXPECT_EQ(s.hidden.back(), 29);
  EXPECT_EQ(s.intermediate[1].back(), 39);
  t.whole_groups = true, t.shape.kv_heads = 1;
  s = prune_select(m->config, sc, t);
  EXPECT_EQ(s.heads[0], (std::vector<int64_t>{0, 1}));  // group sums 1.0 vs 1.0: the lower group
  EXPECT_EQ(s.heads[1], (std::vector<int64_t>{0, 1}));  // 9.0 vs 1.0
  EXPECT_EQ(error_of([&] { prune_select(m->config, StructureScores{}, t); }),
            "prune: layer scores are needed to prune layer");
}
