// Unstructured and N:M sparsity (host/prune/unstructured.h): exact counts and patterns, Wanda's
// choice on a hand-computed example, SparseGPT's reconstruction advantage on correlated inputs
// (the property the method exists for), the layer-by-layer protocol against a by-hand version,
// and the one-line errors that fire before any weight changes.
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <map>

#include "host/adapt/lora.h"
#include "host/core/error.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/prune/unstructured.h"
#include "tests/cpp/test_batch.h"
#include "tests/cpp/test_tiny.h"
#include "tests/cpp/test_util.h"

using namespace luatune;

namespace {

// The shared 61-token model; Gemma 2 with query_pre_attn_scalar 8.
std::shared_ptr<Model> tiny(const std::string& arch = "llama", uint64_t seed = 1) {
  return tiny_model61(seed, arch, arch == "gemma2" ? R"(, "query_pre_attn_scalar": 8)" : "");
}

std::vector<Batch> calibration(int64_t n = 3) {
  std::vector<Batch> out;
  for (int64_t i = 0; i < n; i++) out.push_back(random_batch(61, 2, 12, 10 + i));
  return out;
}

std::vector<at::Tensor> snapshot(Model& m) {
  std::vector<at::Tensor> out;
  for (auto& [name, t] : m.named_parameters()) out.push_back(t->clone());
  return out;
}

bool same_weights(Model& m, const std::vector<at::Tensor>& before) {
  auto now = m.named_parameters();
  for (size_t i = 0; i < now.size(); i++)
    if (!at::equal(*now[i].second, before[i])) return false;
  return true;
}

std::vector<at::Tensor*> decoder_weights(Model& m) {
  std::vector<at::Tensor*> out;
  for (auto& L : m.layers)
    for (Linear* lin : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) out.push_back(&lin->weight);
  return out;
}

// Every group of m consecutive inputs in every row has at least n zeros.
bool nm_holds(const at::Tensor& w, int64_t n, int64_t m) {
  at::Tensor zeros = w.eq(0).reshape({w.size(0), w.size(1) / m, m}).sum(2);
  return zeros.ge(n).all().item<bool>();
}

SparsityOptions opts(const std::string& method, double sparsity = 0.5, int64_t n = 0, int64_t m = 0) {
  SparsityOptions o;
  o.method = method;
  o.sparsity = sparsity;
  o.n = n;
  o.m = m;
  return o;
}

// ||X W^T - X W'^T||_F for X (tokens, in).
double recon_error(const at::Tensor& X, const at::Tensor& W, const at::Tensor& Wp) {
  return (at::matmul(X, W.t()) - at::matmul(X, Wp.t())).norm().item<double>();
}

}  // namespace

// ---- masks -----------------------------------------------------------------------------------

TEST(Unstructured, WandaZeroesExactlyHalfOfEveryRow) {
  auto m = tiny();
  auto report = prune_unstructured(*m, calibration(), opts("wanda", 0.5));
  ASSERT_EQ(report.size(), 14u);
  for (at::Tensor* w : decoder_weights(*m)) {
    at::Tensor per_row = w->eq(0).sum(1);
    EXPECT_TRUE(per_row.eq(w->size(1) / 2).all().item<bool>()) << per_row;
  }
  for (const auto& r : report) EXPECT_DOUBLE_EQ(r.sparsity(), 0.5) << r.name;
  EXPECT_EQ(report[0].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(report[6].name, "model.layers.0.mlp.down_proj.weight");
  // measure_sparsity sees the same.
  auto measured = measure_sparsity(*m);
  ASSERT_EQ(measured.size(), report.size());
  for (size_t i = 0; i < report.size(); i++) EXPECT_EQ(measured[i].zeros, report[i].zeros);
}

TEST(Unstructured, MagnitudeIsLayerWiseOverTheWholeMatrix) {
  auto m = tiny();
  SparsityOptions o = opts("magnitude", 0.3);
  auto report = prune_unstructured(*m, {}, o);
  for (const auto& r : report) EXPECT_EQ(r.zeros, static_cast<int64_t>(r.total * 3 / 10)) << r.name;
  // The kept weights are all at least as large as every zeroed one (one threshold per matrix).
  at::Tensor w0 = tiny()->layers[0].q.weight, w = m->layers[0].q.weight;
  at::Tensor zeroed = w0.abs().masked_select(w.eq(0)), kept = w0.abs().masked_select(w.ne(0));
  EXPECT_LE(zeroed.max().item<float>(), kept.min().item<float>());
}

TEST(Unstructured, NMPatternsHoldForEveryMethod) {
  for (const char* method : {"magnitude", "wanda", "sparsegpt"}) {
    for (auto [n, mm] : {std::pair<int64_t, int64_t>{2, 4}, {4, 8}}) {
      auto m = tiny();
      SparsityOptions o = opts(method, 0.5, n, mm);
      auto report = prune_unstructured(*m, calibration(), o);
      for (at::Tensor* w : decoder_weights(*m))
        EXPECT_TRUE(nm_holds(*w, n, mm)) << method << " " << n << ":" << mm;
      for (const auto& r : report) EXPECT_GE(r.sparsity(), 0.5) << method << " " << r.name;
    }
  }
}

// Activation norms sqrt(sum x^2) = (4, 2, 1, 0.5): in row 0 magnitude drops the small weights of
// the loud inputs (columns 0, 1), Wanda the large weights of the quiet ones (columns 2, 3).
TEST(Unstructured, WandaHandExample) {
  at::Tensor W = at::tensor({1.f, 2.5f, 3.f, 4.f, 4.f, 3.f, 2.f, 1.f}).view({2, 4});
  at::Tensor sum_sq = at::tensor({16.f, 4.f, 1.f, 0.25f});
  at::Tensor wanda = W.clone(), magnitude = W.clone();
  // Scores |W| * sqrt(sum_sq): row 0 = (4, 5, 3, 2), row 1 = (16, 6, 2, 0.5).
  prune_weight_wanda(wanda, sum_sq, opts("wanda", 0.5));
  prune_weight_magnitude(magnitude, opts("magnitude", 0.5));
  EXPECT_TRUE(at::equal(wanda, at::tensor({1.f, 2.5f, 0.f, 0.f, 4.f, 3.f, 0.f, 0.f}).view({2, 4}))) << wanda;
  // Magnitude: the 4 smallest |W| of the matrix (1, 1, 2, 2.5).
  EXPECT_TRUE(at::equal(magnitude, at::tensor({0.f, 0.f, 3.f, 4.f, 4.f, 3.f, 0.f, 0.f}).view({2, 4})))
      << magnitude;
  // 1:2 keeps the higher score of each pair.
  at::Tensor nm = W.clone();
  prune_weight_wanda(nm, sum_sq, opts("wanda", 0.5, 1, 2));
  EXPECT_TRUE(at::equal(nm, at::tensor({0.f, 2.5f, 3.f, 0.f, 4.f, 0.f, 2.f, 0.f}).view({2, 4}))) << nm;
}

// ---- SparseGPT -------------------------------------------------------------------------------

struct LinearProblem {
  at::Tensor W, X, H;  // (out, in), (tokens, in), 2/n X^T X
};

// Strongly correlated inputs with unequal scales, as LLM activations are: (tokens, in) =
// (Z A + 0.1 noise) diag(s) with in/4 latent factors Z.
LinearProblem linear_problem(int64_t out, int64_t in, int64_t tokens, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  auto f = at::TensorOptions(at::kFloat);
  LinearProblem p;
  p.W = at::randn({out, in}, gen, f);
  at::Tensor A = at::randn({in / 4, in}, gen, f);
  at::Tensor s = at::rand({in}, gen, f) * 2 + 0.1;
  p.X = (at::matmul(at::randn({tokens, in / 4}, gen, f), A) + 0.1 * at::randn({tokens, in}, gen, f)) *
        s.unsqueeze(0);
  p.H = at::matmul(p.X.t(), p.X) * (2.0 / static_cast<double>(tokens));
  return p;
}

TEST(Unstructured, SparseGPTReconstructsBetterThanMaskOnlyMethods) {
  LinearProblem p = linear_problem(32, 96, 1024, 7);
  at::Tensor sum_sq = p.X.square().sum(0);
  for (auto [n, m] : {std::pair<int64_t, int64_t>{0, 0}, {2, 4}}) {
    SparsityOptions o = opts("sparsegpt", 0.5, n, m);
    o.blocksize = 32;  // several blocks: the lazy updates matter
    at::Tensor sg = p.W.clone(), wa = p.W.clone(), mg = p.W.clone();
    prune_weight_sparsegpt(sg, p.H, o);
    prune_weight_wanda(wa, sum_sq, o);
    prune_weight_magnitude(mg, o);
    // The same budget: half the weights.
    EXPECT_EQ(sg.eq(0).sum().item<int64_t>(), p.W.numel() / 2);
    EXPECT_EQ(wa.eq(0).sum().item<int64_t>(), p.W.numel() / 2);
    double e_sg = recon_error(p.X, p.W, sg), e_wa = recon_error(p.X, p.W, wa),
           e_mg = recon_error(p.X, p.W, mg);
    EXPECT_LT(e_sg, 0.8 * e_wa) << n << ":" << m << " sparsegpt " << e_sg << " wanda " << e_wa;
    EXPECT_LT(e_wa, e_mg) << n << ":" << m << " wanda " << e_wa << " magnitude " << e_mg;
  }
}

// With n:m the mask is chosen every m columns whatever the block, so the block size only changes
// when the later columns receive their updates (lazily or at once): the results agree.
TEST(Unstructured, SparseGPTLazyBlockUpdatesEqualOneBlock) {
  LinearProblem p = linear_problem(8, 64, 256, 3);
  SparsityOptions o = opts("sparsegpt", 0.5, 2, 4);
  at::Tensor a = p.W.clone(), b = p.W.clone();
  o.blocksize = 8;
  prune_weight_sparsegpt(a, p.H, o);
  o.blocksize = 128;
  prune_weight_sparsegpt(b, p.H, o);
  EXPECT_TRUE(at::equal(a.eq(0), b.eq(0)));
  EXPECT_TRUE(at::allclose(a, b, 1e-4, 1e-5)) << (a - b).abs().max();
}

TEST(Unstructured, SparseGPTAtZeroSparsityLeavesTheWeight) {
  LinearProblem p = linear_problem(16, 48, 200, 5);
  at::Tensor w = p.W.clone();
  SparsityOptions o = opts("sparsegpt", 0.0);
  o.blocksize = 16;
  prune_weight_sparsegpt(w, p.H, o);
  EXPECT_TRUE(at::allclose(w, p.W, 1e-5, 1e-6)) << (w - p.W).abs().max();
}

TEST(Unstructured, SparseGPTZeroesDeadInputs) {
  LinearProblem p = linear_problem(4, 16, 64, 9);
  p.X.select(1, 3).zero_();
  at::Tensor H = at::matmul(p.X.t(), p.X) * (2.0 / 64);
  at::Tensor w = p.W.clone();
  prune_weight_sparsegpt(w, H, opts("sparsegpt", 0.0));
  EXPECT_TRUE(w.select(1, 3).eq(0).all().item<bool>());
}

// ---- the layer-by-layer protocol ---------------------------------------------------------------

// By hand: for each layer in turn, statistics from a full forward of the partly pruned model, then
// prune that layer's weights. Layer l's inputs depend only on layers < l, so this is the protocol.
TEST(Unstructured, LayerByLayerMatchesByHand) {
  for (const char* method : {"wanda", "sparsegpt"}) {
    auto fast = tiny(), slow = tiny();
    auto cal = calibration(2);
    SparsityOptions o = opts(method, 0.5);
    prune_unstructured(*fast, cal, o);
    at::NoGradGuard g;
    for (size_t l = 0; l < slow->layers.size(); l++) {
      std::map<Site, at::Tensor> stats;
      int64_t rows = 0;
      for (const Batch& b : cal) {
        ForwardOptions fo;
        fo.positions = b.positions;
        fo.segments = b.segments;
        fo.observe = [&](int64_t layer, Site site, const at::Tensor& x) {
          if (layer != static_cast<int64_t>(l) || site == Site::layer_in || site == Site::layer_out) return;
          at::Tensor X = x.reshape({-1, x.size(-1)});
          at::Tensor add = std::string(method) == "wanda" ? X.square().sum(0) : at::matmul(X.t(), X);
          stats[site] = stats[site].defined() ? stats[site] + add : add;
        };
        slow->hidden(b.ids, fo);
        rows += b.ids.size(0);
      }
      LayerWeights& L = slow->layers[l];
      std::vector<std::pair<Linear*, Site>> lins = {
          {&L.q, Site::attn_in},   {&L.k, Site::attn_in}, {&L.v, Site::attn_in},   {&L.o, Site::attn_ctx},
          {&L.gate, Site::mlp_in}, {&L.up, Site::mlp_in}, {&L.down, Site::mlp_act}};
      for (auto [lin, site] : lins) {
        if (std::string(method) == "wanda")
          prune_weight_wanda(lin->weight, stats[site], o);
        else
          prune_weight_sparsegpt(lin->weight, stats[site] * (2.0 / rows), o);
      }
    }
    auto a = decoder_weights(*fast), b = decoder_weights(*slow);
    for (size_t i = 0; i < a.size(); i++) {
      EXPECT_TRUE(at::equal(a[i]->eq(0), b[i]->eq(0))) << method << " weight " << i;
      EXPECT_TRUE(at::allclose(*a[i], *b[i], 1e-4, 1e-5)) << method << " weight " << i;
    }
  }
}

TEST(Unstructured, GqaLlamaAndGemma2PruneAndStillRun) {
  for (const char* arch : {"llama", "gemma2"}) {
    for (const char* method : {"magnitude", "wanda", "sparsegpt"}) {
      auto m = tiny(arch);
      auto report = prune_unstructured(*m, calibration(), opts(method, 0.5));
      int64_t zeros = 0, total = 0;
      for (const auto& r : report) zeros += r.zeros, total += r.total;
      EXPECT_NEAR(static_cast<double>(zeros) / total, 0.5, 0.01) << arch << " " << method;
      at::Tensor logits = m->forward(random_batch(61, 2, 9, 99).ids);
      EXPECT_TRUE(logits.isfinite().all().item<bool>()) << arch << " " << method;
    }
  }
}

TEST(Unstructured, TargetsLimitWhatIsPruned) {
  auto m = tiny();
  SparsityOptions o = opts("sparsegpt", 0.5);
  o.targets = {"o_proj", "down_proj"};
  auto report = prune_unstructured(*m, calibration(), o);
  ASSERT_EQ(report.size(), 4u);
  EXPECT_EQ(report[1].name, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(m->layers[0].q.weight.eq(0).sum().item<int64_t>(), 0);
  EXPECT_GT(m->layers[1].o.weight.eq(0).sum().item<int64_t>(), 0);
}

// Packed rows (two documents) with trailing padding in its own segment.
TEST(Unstructured, PackedAndPaddedCalibrationRows) {
  Batch b = random_batch(61, 2, 16, 4);
  b.positions = at::tensor({0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3}, at::kLong).repeat({2, 1});
  b.segments = at::tensor({0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2}, at::kLong).repeat({2, 1});
  b.ids.narrow(1, 12, 4).zero_();
  for (const char* method : {"wanda", "sparsegpt"}) {
    auto m = tiny("llama");
    auto report = prune_unstructured(*m, {b, random_batch(61, 1, 5, 8)}, opts(method, 0.5, 2, 4));
    EXPECT_EQ(report.size(), 14u);
    EXPECT_TRUE(m->forward(b.ids).isfinite().all().item<bool>()) << method;
  }
}

TEST(Unstructured, ErrorsFireBeforeAnyChange) {
  auto m = tiny();
  auto before = snapshot(*m);
  auto cal = calibration(1);
  auto run = [&](SparsityOptions o, bool with_cal = true) {
    return error_of([&] { prune_unstructured(*m, with_cal ? cal : std::vector<Batch>{}, o); });
  };
  EXPECT_EQ(run(opts("wanda", 1.2)), "prune.unstructured: sparsity 1.2 outside [0, 1)");
  EXPECT_EQ(run(opts("wanda", -0.1)), "prune.unstructured: sparsity -0.1 outside [0, 1)");
  EXPECT_EQ(run(opts("wanda", 0.5, 4, 4)), "prune.unstructured: pattern 4:4 needs 0 < n < m (2:4, 4:8)");
  EXPECT_EQ(run(opts("wanda", 0.5, 2, 0)), "prune.unstructured: pattern 2:0 needs 0 < n < m (2:4, 4:8)");
  EXPECT_EQ(run(opts("wanda", 0.5, 1, 3)),
            "prune.unstructured: pattern 1:3 needs input widths divisible by 3; "
            "model.layers.0.self_attn.q_proj.weight has 32");
  EXPECT_EQ(run(opts("movement")),
            "prune.unstructured: unknown method \"movement\" (magnitude, wanda, sparsegpt)");
  SparsityOptions bad_target = opts("wanda");
  bad_target.targets = {"qkv_proj"};
  EXPECT_EQ(run(bad_target),
            "prune.unstructured: unknown target \"qkv_proj\" (q_proj, k_proj, v_proj, o_proj, "
            "gate_proj, up_proj, down_proj)");
  EXPECT_EQ(run(opts("wanda"), false),
            "prune.unstructured: method wanda needs calibration batches (only magnitude works without)");
  EXPECT_EQ(run(opts("sparsegpt"), false),
            "prune.unstructured: method sparsegpt needs calibration batches (only magnitude works without)");
  SparsityOptions bs = opts("sparsegpt", 0.5, 2, 4);
  bs.blocksize = 6;
  EXPECT_EQ(run(bs), "prune.unstructured: blocksize 6 must be a multiple of m (4) for pattern 2:4");
  EXPECT_TRUE(same_weights(*m, before));

  LoraConfig lc;
  lc.targets = {"v_proj"};
  lora_apply(*m, lc, 0);
  auto with_adapter = snapshot(*m);
  EXPECT_EQ(
      run(opts("magnitude"), false),
      "prune.unstructured: model.layers.0.self_attn.v_proj.weight has an adapter; merge the adapters first "
      "(lora.merge)");
  EXPECT_TRUE(same_weights(*m, with_adapter));
}
