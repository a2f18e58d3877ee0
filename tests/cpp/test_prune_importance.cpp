// Importance scores (host/prune/importance.h) against hand computations on tiny models: Minitron's
// activation statistics from the observed activations, structures whose weights are zero scoring
// lowest, an identity layer having no block influence and no removal loss, Taylor scores equal to
// |w * dL/dw| from a separate autograd pass, and the model left exactly as it was.
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/prune/importance.h"
#include "host/prune/surgery.h"
#include "tests/cpp/test_util.h"

using namespace luatune;

namespace {

constexpr int64_t kVocab = 61;

std::shared_ptr<Model> tiny(int64_t layers, const std::string& arch = "llama", uint64_t seed = 1) {
  std::string extra = arch == "gemma2" ? R"(, "head_dim": 8, "sliding_window": 4)" : "";
  return model_init(model_config_with(arch,
                                      R"({"vocab_size": 61, "hidden_size": 32, "intermediate_size": 40,
      "num_hidden_layers": )" + std::to_string(layers) +
                                          R"(, "num_attention_heads": 4, "num_key_value_heads": 2)" + extra +
                                          "}",
                                      "test"),
                    seed, at::kFloat, at::kCPU);
}

// Random rows; row r has its last `r` positions without a target (as padding would), and the last
// row none at all when `empty_row`, so the token rule and empty rows are exercised.
Batch random_batch(int64_t rows, int64_t len, uint64_t seed, bool empty_row = false) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  Batch b;
  b.ids = at::randint(kVocab, {rows, len}, gen, at::TensorOptions(at::kLong));
  b.targets = at::full({rows, len}, kIgnoreTarget, at::kLong);
  for (int64_t r = 0; r < rows; r++) {
    int64_t n = len - 1 - r;
    if (empty_row && r == rows - 1) n = 0;
    if (n > 0) b.targets[r].narrow(0, 0, n).copy_(b.ids[r].narrow(0, 1, n));
  }
  b.positions = at::arange(len, at::kLong).unsqueeze(0).repeat({rows, 1});
  b.segments = at::zeros({rows, len}, at::kLong);
  b.target_tokens = b.targets.ne(kIgnoreTarget).sum().item<int64_t>();
  b.tokens = rows * len;
  return b;
}

std::vector<at::Tensor> snapshot(Model& m) {
  std::vector<at::Tensor> out;
  for (auto& [name, t] : m.named_parameters()) out.push_back(t->detach().clone());
  return out;
}

void expect_unchanged(Model& m, const std::vector<at::Tensor>& before) {
  auto now = m.named_parameters();
  ASSERT_EQ(now.size(), before.size());
  for (size_t i = 0; i < now.size(); i++) EXPECT_TRUE(at::equal(*now[i].second, before[i])) << now[i].first;
}

// Minitron's statistic by loops: sqrt(sum over rows of (mean over counted tokens of |x|)^2).
at::Tensor hand_statistic(const std::vector<std::pair<at::Tensor, at::Tensor>>& xs_and_targets) {
  at::Tensor acc;
  for (auto& [x, targets] : xs_and_targets) {
    const int64_t B = x.size(0), T = x.size(1);
    if (!acc.defined()) acc = at::zeros({x.size(2)}, at::kDouble);
    for (int64_t b = 0; b < B; b++) {
      at::Tensor sum = at::zeros({x.size(2)}, at::kDouble);
      int64_t n = 0;
      for (int64_t t = 0; t < T; t++) {
        if (targets[b][t].item<int64_t>() == kIgnoreTarget) continue;
        sum += x[b][t].abs().to(at::kDouble);
        n++;
      }
      if (n > 0) acc += (sum / static_cast<double>(n)).pow(2);
    }
  }
  return acc.sqrt().to(at::kFloat);
}

at::Tensor rms(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

}  // namespace

// ============================================================================================
// Activation importance

TEST(ImportanceActivation, EqualsHandComputationOnOneLayer) {
  auto m = tiny(1);
  std::vector<Batch> calib = {random_batch(3, 9, 1, true), random_batch(2, 7, 2)};
  // The activations themselves, observed on a separate forward, checked against model pieces.
  std::map<Site, std::vector<std::pair<at::Tensor, at::Tensor>>> seen;
  for (const Batch& b : calib) {
    ForwardOptions fo;
    fo.observe = [&](int64_t, Site site, const at::Tensor& x) {
      seen[site].push_back({x.detach().clone(), b.targets});
    };
    at::NoGradGuard no_grad;
    m->hidden(b.ids, fo);
  }
  const LayerWeights& w = m->layers[0];
  const double eps = m->config.rms_norm_eps;
  for (size_t i = 0; i < calib.size(); i++) {
    at::NoGradGuard no_grad;
    at::Tensor x = rms(at::embedding(m->embed, calib[i].ids), w.input_norm, eps);
    EXPECT_TRUE(at::allclose(seen[Site::attn_in][i].first, x, 1e-5, 1e-6));
    at::Tensor mlp_in = seen[Site::mlp_in][i].first;
    at::Tensor act = at::silu(at::linear(mlp_in, w.gate.weight)) * at::linear(mlp_in, w.up.weight);
    EXPECT_TRUE(at::allclose(seen[Site::mlp_act][i].first, act, 1e-5, 1e-6));
    at::Tensor h1 =
        at::embedding(m->embed, calib[i].ids) + at::linear(seen[Site::attn_ctx][i].first, w.o.weight);
    EXPECT_TRUE(at::allclose(mlp_in, rms(h1, w.post_attn_norm, eps), 1e-5, 1e-6));
  }

  StructureScores s = activation_importance(*m, calib);
  at::Tensor hidden = hand_statistic(seen[Site::attn_in]) + hand_statistic(seen[Site::mlp_in]);
  at::Tensor heads = hand_statistic(seen[Site::attn_ctx]).view({4, 8}).norm(2, 1);
  at::Tensor channels = hand_statistic(seen[Site::mlp_act]);
  ASSERT_EQ(s.hidden.sizes(), (std::vector<int64_t>{32}));
  ASSERT_EQ(s.head.sizes(), (std::vector<int64_t>{1, 4}));
  ASSERT_EQ(s.intermediate.sizes(), (std::vector<int64_t>{1, 40}));
  ASSERT_EQ(s.layer.sizes(), (std::vector<int64_t>{1}));
  EXPECT_TRUE(at::allclose(s.hidden, hidden, 1e-4, 1e-6));
  EXPECT_TRUE(at::allclose(s.head[0], heads, 1e-4, 1e-6));
  EXPECT_TRUE(at::allclose(s.intermediate[0], channels, 1e-4, 1e-6));
  EXPECT_TRUE(at::allclose(s.layer, block_influence(*m, calib), 1e-5, 1e-7));
}

TEST(ImportanceActivation, ZeroedStructuresScoreLowest) {
  auto m = tiny(2);
  {
    at::NoGradGuard no_grad;
    for (auto& w : m->layers) {
      w.gate.weight[7].zero_();            // MLP channel 7: act = silu(0) * up = 0
      w.v.weight.narrow(0, 8, 8).zero_();  // KV group 1: heads 2 and 3 read zero values
      w.input_norm[5].zero_();             // hidden channel 5 is zero in every norm output
      w.post_attn_norm[5].zero_();
    }
  }
  auto before = snapshot(*m);
  StructureScores s = activation_importance(*m, {random_batch(2, 8, 3)});
  expect_unchanged(*m, before);
  EXPECT_EQ(s.hidden.argmin().item<int64_t>(), 5);
  EXPECT_EQ(s.hidden[5].item<float>(), 0.0f);
  for (int64_t l = 0; l < 2; l++) {
    EXPECT_EQ(s.intermediate[l].argmin().item<int64_t>(), 7);
    EXPECT_EQ(s.intermediate[l][7].item<float>(), 0.0f);
    EXPECT_EQ(s.head[l][2].item<float>(), 0.0f);
    EXPECT_EQ(s.head[l][3].item<float>(), 0.0f);
    EXPECT_GT(s.head[l][0].item<float>(), 0.0f);
  }
}

TEST(ImportanceActivation, Gemma2AndEmptyCalibration) {
  auto m = tiny(2, "gemma2");
  StructureScores s = activation_importance(*m, {random_batch(2, 8, 4)});
  EXPECT_EQ(s.head.sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE(at::isfinite(s.hidden).all().item<bool>());
  EXPECT_EQ(error_of([&] { activation_importance(*m, {}); }),
            "activation_importance: the calibration set is empty; pass a list of batches");
  Batch none = random_batch(1, 4, 5, true);
  EXPECT_EQ(error_of([&] { block_influence(*m, {none}); }),
            "block_influence: the calibration batches have no target tokens (every target is -100)");
}

// ============================================================================================
// Depth: block influence and layer-removal loss

namespace {
// Layer `l` becomes the identity: both branch outputs are zero.
void make_identity(Model& m, int64_t l) {
  at::NoGradGuard no_grad;
  m.layers[l].o.weight.zero_();
  m.layers[l].down.weight.zero_();
}
}  // namespace

TEST(ImportanceDepth, IdentityLayerHasNoInfluenceAndNoRemovalLoss) {
  auto m = tiny(3);
  make_identity(*m, 1);
  std::vector<Batch> calib = {random_batch(2, 8, 6), random_batch(2, 8, 7)};
  auto before = snapshot(*m);
  at::Tensor bi = block_influence(*m, calib);
  at::Tensor loss = layer_removal_loss(*m, calib);
  expect_unchanged(*m, before);
  ASSERT_EQ(bi.sizes(), (std::vector<int64_t>{3}));
  EXPECT_NEAR(bi[1].item<double>(), 0.0, 1e-6);
  EXPECT_GT(bi[0].item<double>(), 1e-3);
  EXPECT_GT(bi[2].item<double>(), 1e-3);
  EXPECT_EQ(bi.argmin().item<int64_t>(), 1);
  EXPECT_NEAR(loss[1].item<double>(), 0.0, 1e-6);
  EXPECT_GT(std::abs(loss[0].item<double>()), 1e-4);
}

TEST(ImportanceDepth, BlockInfluenceIsMeanOneMinusCosine) {
  auto m = tiny(2);
  std::vector<Batch> calib = {random_batch(3, 6, 8)};
  std::vector<at::Tensor> in(2), out(2);
  ForwardOptions fo;
  fo.observe = [&](int64_t l, Site site, const at::Tensor& x) {
    if (site == Site::layer_in) in[l] = x.detach();
    if (site == Site::layer_out) out[l] = x.detach();
  };
  {
    at::NoGradGuard no_grad;
    m->hidden(calib[0].ids, fo);
  }
  at::Tensor mask = calib[0].targets.ne(kIgnoreTarget);
  at::Tensor bi = block_influence(*m, calib);
  for (int64_t l = 0; l < 2; l++) {
    at::Tensor cos = (in[l] * out[l]).sum(-1) / (in[l].norm(2, -1) * out[l].norm(2, -1));
    double expected = (1 - cos).masked_select(mask).mean().item<double>();
    EXPECT_NEAR(bi[l].item<double>(), expected, 1e-5);
  }
}

TEST(ImportanceDepth, LayerRemovalLossEqualsSkippedForward) {
  auto m = tiny(3);
  std::vector<Batch> calib = {random_batch(2, 8, 9)};
  const Batch& b = calib[0];
  auto mean_ce = [&](const at::Tensor& h) {
    at::Tensor logits = m->logits(m->final_norm(h));
    return at::cross_entropy_loss(logits.reshape({-1, kVocab}), b.targets.reshape({-1}), {},
                                  at::Reduction::Mean, kIgnoreTarget)
        .item<double>();
  };
  at::NoGradGuard no_grad;
  at::Tensor e = m->embed_input(b.ids);
  double full = mean_ce(m->run_layers(e, 0, 3));
  double without_1 = mean_ce(m->run_layers(m->run_layers(e, 0, 1), 2, 3));
  at::Tensor loss = layer_removal_loss(*m, calib);
  EXPECT_NEAR(loss[1].item<double>(), without_1 - full, 1e-4);
}

// ============================================================================================
// Taylor importance

namespace {
// Mean cross-entropy per target token over `calib` and its gradients, by plain autograd on logits.
std::map<std::string, at::Tensor> reference_grads(Model& m, const std::vector<Batch>& calib) {
  auto params = m.named_parameters();
  for (auto& [name, t] : params) t->set_requires_grad(true);
  int64_t n = 0;
  for (const Batch& b : calib) n += b.targets.ne(kIgnoreTarget).sum().item<int64_t>();
  for (const Batch& b : calib) {
    at::Tensor logits = m.forward(b.ids);
    at::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, kVocab}), b.targets.reshape({-1}), {},
                                             at::Reduction::Sum, kIgnoreTarget);
    (loss / static_cast<double>(n)).backward();
  }
  std::map<std::string, at::Tensor> g;
  for (auto& [name, t] : params) {
    g[name] = t->grad().clone();
    t->mutable_grad() = at::Tensor();
  }
  return g;
}
}  // namespace

TEST(ImportanceTaylor, EqualsHandComputedGroupSums) {
  auto m = tiny(2);
  std::vector<Batch> calib = {random_batch(2, 8, 10), random_batch(1, 6, 11)};
  auto g = reference_grads(*m, calib);
  StructureScores s = taylor_importance(*m, calib);
  auto sal = [&](const std::string& name, const at::Tensor& w) { return (w.detach() * g.at(name)).abs(); };
  const std::string p = "model.layers.1.";
  const LayerWeights& w = m->layers[1];
  // Head 3 (KV group 1 of 2 heads): q rows 24..31, o columns 24..31, half of k/v rows 8..15.
  double head3 = sal(p + "self_attn.q_proj.weight", w.q.weight).narrow(0, 24, 8).sum().item<double>() +
                 sal(p + "self_attn.o_proj.weight", w.o.weight).narrow(1, 24, 8).sum().item<double>() +
                 0.5 * (sal(p + "self_attn.k_proj.weight", w.k.weight).narrow(0, 8, 8).sum().item<double>() +
                        sal(p + "self_attn.v_proj.weight", w.v.weight).narrow(0, 8, 8).sum().item<double>());
  EXPECT_NEAR(s.head[1][3].item<double>(), head3, 1e-4 * head3);
  // MLP channel 11: gate and up row 11, down column 11.
  double ch11 = sal(p + "mlp.gate_proj.weight", w.gate.weight)[11].sum().item<double>() +
                sal(p + "mlp.up_proj.weight", w.up.weight)[11].sum().item<double>() +
                sal(p + "mlp.down_proj.weight", w.down.weight).select(1, 11).sum().item<double>();
  EXPECT_NEAR(s.intermediate[1][11].item<double>(), ch11, 1e-4 * ch11);
  // Hidden channel 4: embedding and LM head columns, every norm entry, and every projection.
  double c4 = sal("model.embed_tokens.weight", m->embed).select(1, 4).sum().item<double>() +
              sal("lm_head.weight", m->lm_head).select(1, 4).sum().item<double>() +
              sal("model.norm.weight", m->norm)[4].item<double>();
  for (int64_t l = 0; l < 2; l++) {
    const std::string q = "model.layers." + std::to_string(l) + ".";
    const LayerWeights& x = m->layers[l];
    c4 += sal(q + "input_layernorm.weight", x.input_norm)[4].item<double>() +
          sal(q + "post_attention_layernorm.weight", x.post_attn_norm)[4].item<double>();
    for (auto [name, lin] : {std::pair<const char*, const Linear*>{"self_attn.q_proj", &x.q},
                             {"self_attn.k_proj", &x.k},
                             {"self_attn.v_proj", &x.v},
                             {"mlp.gate_proj", &x.gate},
                             {"mlp.up_proj", &x.up}})
      c4 += sal(q + name + ".weight", lin->weight).select(1, 4).sum().item<double>();
    c4 += sal(q + "self_attn.o_proj.weight", x.o.weight)[4].sum().item<double>() +
          sal(q + "mlp.down_proj.weight", x.down.weight)[4].sum().item<double>();
  }
  EXPECT_NEAR(s.hidden[4].item<double>(), c4, 1e-4 * c4);
  // Layer 0: every weight of the layer.
  double layer0 = 0;
  for (auto& [name, t] : m->named_parameters())
    if (name.rfind("model.layers.0.", 0) == 0) layer0 += sal(name, *t).sum().item<double>();
  EXPECT_NEAR(s.layer[0].item<double>(), layer0, 1e-4 * layer0);

  // "vector": |sum of w * g| per row or column, summed over members.
  StructureScores v = taylor_importance(*m, calib, "vector");
  auto signed_sal = [&](const std::string& name, const at::Tensor& t) { return t.detach() * g.at(name); };
  double ch11v =
      signed_sal(p + "mlp.gate_proj.weight", w.gate.weight)[11].sum().abs().item<double>() +
      signed_sal(p + "mlp.up_proj.weight", w.up.weight)[11].sum().abs().item<double>() +
      signed_sal(p + "mlp.down_proj.weight", w.down.weight).select(1, 11).sum().abs().item<double>();
  EXPECT_NEAR(v.intermediate[1][11].item<double>(), ch11v, 1e-3 * ch11v + 1e-9);
}

TEST(ImportanceTaylor, ZeroedGroupScoresZeroAndBatchingDoesNotMatter) {
  auto m = tiny(2);
  {
    at::NoGradGuard no_grad;
    LayerWeights& w = m->layers[0];
    w.gate.weight[9].zero_();
    w.up.weight[9].zero_();
    w.down.weight.select(1, 9).zero_();
  }
  Batch both = random_batch(2, 8, 12);
  Batch first, second;
  for (auto [part, r] : {std::pair<Batch*, int64_t>{&first, 0}, {&second, 1}}) {
    part->ids = both.ids.narrow(0, r, 1);
    part->targets = both.targets.narrow(0, r, 1);
    part->positions = both.positions.narrow(0, r, 1);
    part->segments = both.segments.narrow(0, r, 1);
  }
  StructureScores one = taylor_importance(*m, {both});
  StructureScores two = taylor_importance(*m, {first, second});
  EXPECT_EQ(one.intermediate[0][9].item<float>(), 0.0f);
  EXPECT_EQ(one.intermediate[0].argmin().item<int64_t>(), 9);
  EXPECT_TRUE(at::allclose(one.head, two.head, 1e-4, 1e-8));
  EXPECT_TRUE(at::allclose(one.hidden, two.hidden, 1e-4, 1e-8));
  EXPECT_TRUE(at::allclose(one.intermediate, two.intermediate, 1e-4, 1e-8));
}

TEST(ImportanceTaylor, LeavesWeightsFlagsAndGradientsAlone) {
  auto m = tiny(2, "qwen2");  // with q/k/v biases
  m->embed.set_requires_grad(false);
  m->layers[1].q.weight.set_requires_grad(false);
  at::Tensor old_grad = at::full_like(m->norm, 3.0);
  m->norm.mutable_grad() = old_grad;
  std::vector<bool> flags;
  for (auto& [name, t] : m->named_parameters()) flags.push_back(t->requires_grad());
  auto before = snapshot(*m);
  StructureScores s = taylor_importance(*m, {random_batch(2, 8, 13)});
  expect_unchanged(*m, before);
  size_t i = 0;
  for (auto& [name, t] : m->named_parameters()) {
    EXPECT_EQ(t->requires_grad(), flags[i++]) << name;
    if (t != &m->norm) {
      EXPECT_FALSE(t->grad().defined()) << name;
    }
  }
  EXPECT_TRUE(m->norm.grad().is_same(old_grad));
  // The frozen weights were scored all the same.
  EXPECT_GT(s.head[1].min().item<float>(), 0.0f);
  EXPECT_EQ(error_of([&] { taylor_importance(*m, {random_batch(1, 4, 1)}, "param_mix"); }),
            "taylor_importance: unknown variant 'param_mix' (expected param_first or vector)");
}

// ============================================================================================
// Selection: the scores drive prune_select as the header promises

TEST(ImportanceSelect, IdentityLayerIsTheOneRemoved) {
  auto m = tiny(3);
  make_identity(*m, 1);
  std::vector<Batch> calib = {random_batch(2, 8, 14)};
  ModelShape want = model_shape(m->config);
  want.layers = 2;
  TargetShape target = prune_targets_counts(m->config, want);
  // (Block influence only: on random weights, skipping another layer may lower the loss, so the
  // layer-removal score of the identity layer, 0, need not be the lowest.)
  StructureScores s;
  s.layer = block_influence(*m, calib);
  PruneSpec spec = prune_select(m->config, s, target);
  EXPECT_EQ(spec.layers, (std::vector<int64_t>{0, 2}));
  // After the cut, the model computes what the full model did (the layer was the identity).
  at::Tensor ids = calib[0].ids;
  at::Tensor full;
  {
    at::NoGradGuard no_grad;
    full = m->forward(ids);
  }
  prune_apply(*m, spec);
  at::NoGradGuard no_grad;
  EXPECT_EQ(m->config.num_layers, 2);
  EXPECT_TRUE(at::allclose(m->forward(ids), full, 1e-5, 1e-6));
}

TEST(ImportanceSelect, ZeroedMlpChannelIsPrunedFirst) {
  auto m = tiny(2);
  {
    at::NoGradGuard no_grad;
    for (auto& w : m->layers) w.gate.weight[7].zero_();
  }
  std::vector<Batch> calib = {random_batch(2, 8, 15)};
  TargetSparsity t;
  t.intermediate = 1.0 / 40;  // one channel goes
  TargetShape target = prune_targets(m->config, t);
  ASSERT_EQ(target.shape.intermediate, 39);
  for (const StructureScores& s : {activation_importance(*m, calib), taylor_importance(*m, calib)}) {
    PruneSpec spec = prune_select(m->config, s, target);
    for (const auto& kept : spec.intermediate) {
      ASSERT_EQ(kept.size(), 39u);
      EXPECT_TRUE(std::find(kept.begin(), kept.end(), 7) == kept.end());
    }
  }
}
