// The group AdamW (host/train/fused_adamw.h) on the CPU against the per-tensor reference,
// optim_update (host/train/optim.cpp, torch.optim.AdamW's arithmetic): float32 weights to the bit
// over several steps with decay; bf16 weights whose float32 masters follow the float32 reference to
// the bit and whose weights are those masters rounded; the skip flag and the lr scale; a malformed
// group. The CUDA kernel against this CPU path: tests/cuda/test_train_kernels.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "host/train/fused_adamw.h"
#include "host/train/optim.h"

using namespace luatune;

namespace {

const std::vector<std::vector<int64_t>> kShapes = {{7, 5}, {13}, {1}, {3, 4, 2}};

struct Group {
  std::vector<at::Tensor> weights, masters, exp_avg, exp_avg_sq;
};

Group make_group(at::ScalarType dtype, bool masters, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  Group g;
  for (const auto& shape : kShapes) {
    at::Tensor w = at::randn(shape, gen, at::TensorOptions(at::kFloat));
    g.weights.push_back(w.to(dtype));
    if (masters) g.masters.push_back(g.weights.back().to(at::kFloat));
    g.exp_avg.push_back(at::zeros(shape, at::TensorOptions(at::kFloat)));
    g.exp_avg_sq.push_back(at::zeros(shape, at::TensorOptions(at::kFloat)));
  }
  return g;
}

std::vector<at::Tensor> make_grads(at::ScalarType dtype, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::vector<at::Tensor> out;
  for (const auto& shape : kShapes)
    out.push_back(at::randn(shape, gen, at::TensorOptions(at::kFloat)).to(dtype));
  return out;
}

void step(Group& g, const std::vector<at::Tensor>& grads, double lr, double wd, int64_t t,
          const at::Tensor& lr_scale = {}, const at::Tensor& skip = {}) {
  adamw_master_step(g.weights, g.masters, grads, g.exp_avg, g.exp_avg_sq, lr, 0.9, 0.999, 1e-8, wd, t,
                    lr_scale, skip);
}

void expect_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); i++)
    EXPECT_TRUE(at::equal(a[i], b[i]))
        << what << " " << i << ": largest |difference| "
        << (a[i].to(at::kDouble) - b[i].to(at::kDouble)).abs().max().item<double>();
}

std::vector<at::Tensor> clones(const std::vector<at::Tensor>& v) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : v) out.push_back(t.clone());
  return out;
}

// The per-tensor reference beside the group: optim_update on its own float32 copies, one state each.
struct Reference {
  std::vector<at::Tensor> weights;
  std::vector<OptimState> states;
  OptimHyper h;

  Reference(std::vector<at::Tensor> w, double lr, double weight_decay) : weights(std::move(w)) {
    for (const at::Tensor& t : weights)
      states.push_back(OptimState::create("adamw", 0, t.sizes(), t.device()));
    h.lr = lr;
    h.weight_decay = weight_decay;
  }

  // Step t with `grads` on the reference, then on the group g.
  void step_both(Group& g, const std::vector<at::Tensor>& grads, int64_t t) {
    h.step = t;
    for (size_t i = 0; i < weights.size(); i++) optim_update(weights[i], grads[i], states[i], h);
    step(g, grads, h.lr, h.weight_decay, t);
  }
};

}  // namespace

TEST(FusedAdamW, Float32WeightsEqualOptimUpdateToTheBit) {
  Group g = make_group(at::kFloat, false, 1);
  Reference ref(clones(g.weights), 1e-2, 0.1);
  // float32 and bf16 gradients: optim_update reads either as float32.
  for (int64_t t = 1; t <= 5; t++)
    ref.step_both(g, make_grads(t % 2 ? at::kFloat : at::kBFloat16, 100 + t), t);
  std::vector<at::Tensor> ref_m, ref_v;
  for (const OptimState& s : ref.states) ref_m.push_back(s.exp_avg), ref_v.push_back(s.exp_avg_sq);
  expect_equal(g.weights, ref.weights, "weight");
  expect_equal(g.exp_avg, ref_m, "exp_avg");
  expect_equal(g.exp_avg_sq, ref_v, "exp_avg_sq");
}

TEST(FusedAdamW, Bf16WeightsFollowTheirFloat32Masters) {
  Group g = make_group(at::kBFloat16, true, 2);
  // One float32 weight in the same group with no master (an undefined entry): updated directly.
  g.weights[1] = g.masters[1].clone();
  g.masters[1] = at::Tensor();
  std::vector<at::Tensor> masters;
  for (size_t i = 0; i < g.weights.size(); i++)
    masters.push_back(g.masters[i].defined() ? g.masters[i].clone() : g.weights[i].clone());
  Reference ref(masters, 3e-2, 0.01);
  for (int64_t t = 1; t <= 4; t++) {
    ref.step_both(g, make_grads(at::kBFloat16, 200 + t), t);
    for (size_t i = 0; i < ref.weights.size(); i++) {
      const std::string what = "step " + std::to_string(t) + " tensor " + std::to_string(i);
      if (g.masters[i].defined()) {
        EXPECT_TRUE(at::equal(g.masters[i], ref.weights[i])) << what << ": master";
        EXPECT_EQ(g.weights[i].scalar_type(), at::kBFloat16) << what;
        EXPECT_TRUE(at::equal(g.weights[i], g.masters[i].to(at::kBFloat16))) << what << ": weight";
      } else {
        EXPECT_TRUE(at::equal(g.weights[i], ref.weights[i])) << what << ": float32 weight";
      }
      EXPECT_TRUE(at::equal(g.exp_avg[i], ref.states[i].exp_avg)) << what << ": exp_avg";
      EXPECT_TRUE(at::equal(g.exp_avg_sq[i], ref.states[i].exp_avg_sq)) << what << ": exp_avg_sq";
    }
  }
}

TEST(FusedAdamW, LowPrecisionWeightWithoutMasterIsUpdatedInFloat32AndRounded) {
  Group g = make_group(at::kHalf, false, 3);
  std::vector<at::Tensor> ref;
  for (const at::Tensor& w : g.weights) ref.push_back(w.to(at::kFloat));
  Group r{ref, {}, clones(g.exp_avg), clones(g.exp_avg_sq)};
  const std::vector<at::Tensor> grads = make_grads(at::kHalf, 300);
  step(g, grads, 1e-2, 0.1, 1);
  step(r, grads, 1e-2, 0.1, 1);
  for (size_t i = 0; i < ref.size(); i++)
    EXPECT_TRUE(at::equal(g.weights[i], r.weights[i].to(at::kHalf))) << "tensor " << i;
}

TEST(FusedAdamW, SkipLeavesEverythingUnchanged) {
  Group g = make_group(at::kBFloat16, true, 4);
  step(g, make_grads(at::kBFloat16, 400), 1e-2, 0.1, 1);  // moments not zero any more
  const Group before{clones(g.weights), clones(g.masters), clones(g.exp_avg), clones(g.exp_avg_sq)};
  const std::vector<at::Tensor> grads = make_grads(at::kBFloat16, 401);
  for (at::Tensor flag : {at::ones({}), at::full({1}, 3.0), at::ones({}, at::kBool), at::full({}, NAN)}) {
    step(g, grads, 1e-2, 0.1, 2, {}, flag);
    expect_equal(g.weights, before.weights, "weight");
    expect_equal(g.masters, before.masters, "master");
    expect_equal(g.exp_avg, before.exp_avg, "exp_avg");
    expect_equal(g.exp_avg_sq, before.exp_avg_sq, "exp_avg_sq");
  }
  step(g, grads, 1e-2, 0.1, 2, {}, at::zeros({}));  // a zero flag updates
  EXPECT_FALSE(at::equal(g.masters[0], before.masters[0]));
}

TEST(FusedAdamW, LrScaleMultipliesTheRate) {
  // 0.02 * 0.5 and 0.01 are the same double (scaling by 2 is exact), so the results are equal.
  Group a = make_group(at::kFloat, false, 5), b = make_group(at::kFloat, false, 5);
  for (int64_t t = 1; t <= 3; t++) {
    const std::vector<at::Tensor> grads = make_grads(at::kFloat, 500 + t);
    step(a, grads, 0.02, 0.1, t, at::full({}, 0.5f));
    step(b, grads, 0.01, 0.1, t);
  }
  expect_equal(a.weights, b.weights, "weight");
  // A zero scale leaves the weights where they are (the moments still move).
  const std::vector<at::Tensor> before = clones(a.weights);
  step(a, make_grads(at::kFloat, 600), 0.02, 0.1, 4, at::zeros({}));
  expect_equal(a.weights, before, "weight at lr_scale 0");
}

TEST(FusedAdamW, MalformedGroupFailsNamingIt) {
  Group g = make_group(at::kFloat, false, 6);
  std::vector<at::Tensor> grads = make_grads(at::kFloat, 700);
  grads.pop_back();
  try {
    step(g, grads, 1e-2, 0.0, 1);
    FAIL() << "a group with a missing gradient was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(
        std::string(e.what()).find("adamw_master_step: expected one grad, exp_avg and exp_avg_sq per weight"),
        std::string::npos)
        << e.what();
  }
  grads = make_grads(at::kFloat, 700);
  g.exp_avg[2] = g.exp_avg[2].to(at::kBFloat16);
  try {
    step(g, grads, 1e-2, 0.0, 1);
    FAIL() << "a bf16 moment was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("adamw_master_step: tensor 2: masters and moments must be float32"),
              std::string::npos)
        << e.what();
  }
}
