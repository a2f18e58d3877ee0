// Data parallel pieces that need no second process (host/dist): DDP's bucket assignment, and the
// gradient hooks firing as gradients land (with one process the sums are the gradients themselves).
// Two-process behaviour is tests/dist/test_ddp.sh.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "host/dist/dist.h"
#include "host/dist/grad_sync.h"

using namespace luatune;

namespace {

std::vector<at::Tensor> tensors(const std::vector<std::pair<int64_t, at::ScalarType>>& spec) {
  std::vector<at::Tensor> out;
  for (auto& [n, t] : spec) out.push_back(at::zeros({n}, at::TensorOptions(t)).requires_grad_(true));
  return out;
}

std::vector<at::Tensor*> ptrs(std::vector<at::Tensor>& v) {
  std::vector<at::Tensor*> out;
  for (auto& t : v) out.push_back(&t);
  return out;
}

}  // namespace

TEST(GradBuckets, ReverseOrderCappedBySizeAndSplitByDtype) {
  // float32: 100 elements = 400 bytes. Cap 1000 bytes.
  auto v = tensors({{100, at::kFloat},
                    {100, at::kFloat},
                    {100, at::kFloat},
                    {50, at::kBFloat16},
                    {100, at::kFloat},
                    {600, at::kFloat}});
  auto b = grad_buckets(ptrs(v), 1000);
  // Walked from the last: 5 (2400 B, alone: larger than the cap), 4, then 3 (bf16: new bucket),
  // then 2 and 1 (800 B), then 0 (would pass 1000).
  std::vector<std::vector<size_t>> want = {{5}, {4}, {3}, {2, 1}, {0}};
  EXPECT_EQ(b, want);
  auto one = grad_buckets(ptrs(v), int64_t{1} << 30);
  std::vector<std::vector<size_t>> want_one = {{5, 4}, {3}, {2, 1, 0}};
  EXPECT_EQ(one, want_one);
  EXPECT_TRUE(grad_buckets({}, 100).empty());
}

TEST(GradSync, HooksStartBucketsAsGradientsLandOnlyWhenArmed) {
  ASSERT_FALSE(dist_active());
  at::Tensor w1 = at::randn({8, 4}).requires_grad_(true), w2 = at::randn({4, 3}).requires_grad_(true);
  std::vector<at::Tensor> params = {w1, w2};
  GradSync sync(ptrs(params), 64);  // 8*4*4 = 128 B: each weight its own bucket
  ASSERT_EQ(sync.buckets().size(), 2u);
  at::Tensor x = at::randn({5, 8});
  auto loss = [&] { return at::matmul(at::matmul(x, params[0]), params[1]).pow(2).sum(); };

  // Not armed (an accumulation micro-step): nothing starts during backward.
  loss().backward();
  sync.finish();
  at::Tensor g1 = params[0].grad().clone(), g2 = params[1].grad().clone();

  // Armed: both buckets start from the hooks, during backward.
  params[0].mutable_grad() = at::Tensor();
  params[1].mutable_grad() = at::Tensor();
  sync.arm();
  loss().backward();
  EXPECT_EQ(sync.started_during_backward(), 2);
  sync.finish();
  // One process: the sums are the gradients.
  EXPECT_TRUE(at::equal(params[0].grad(), g1));
  EXPECT_TRUE(at::equal(params[1].grad(), g2));
  EXPECT_EQ(sync.redone(), 0);

  // A parameter with no gradient this step gets zeros (a rank's batch may not reach it).
  params[0].mutable_grad() = at::Tensor();
  params[1].mutable_grad() = at::Tensor();
  sync.arm();
  at::matmul(x, params[0]).sum().backward();
  EXPECT_EQ(sync.started_during_backward(), 0);  // bucket 0 (w2) never filled, so none started in order
  sync.finish();
  EXPECT_TRUE(at::equal(params[1].grad(), at::zeros({4, 3})));
  EXPECT_TRUE(params[0].grad().defined());
}

TEST(GradSync, ALateGradientRedoesItsBucket) {
  // w is reached by two separate backward passes while armed (as a weight used inside and outside
  // a recomputed layer is): the bucket that started on the first is summed again.
  at::Tensor w = at::randn({3}).requires_grad_(true);
  std::vector<at::Tensor> params = {w};
  GradSync sync(ptrs(params), kDefaultBucketBytes);
  sync.arm();
  (params[0] * 2).sum().backward();
  EXPECT_EQ(sync.started_during_backward(), 1);
  (params[0] * 3).sum().backward();
  sync.finish();
  EXPECT_EQ(sync.redone(), 1);
  EXPECT_TRUE(at::allclose(params[0].grad(), at::full({3}, 5.0f)));
}

TEST(Dist, SingleProcessIsRankZeroOfOne) {
  EXPECT_FALSE(dist_active());
  EXPECT_EQ(dist_rank(), 0);
  EXPECT_EQ(dist_world_size(), 1);
  EXPECT_TRUE(dist_is_main());
  EXPECT_EQ(dist_sum(2.5), 2.5);
  EXPECT_EQ(dist_sum(int64_t{7}), 7);
  at::Tensor t = at::arange(4, at::kFloat);
  dist_all_reduce_sum_(t);
  EXPECT_TRUE(at::equal(t, at::arange(4, at::kFloat)));
  DistMainOnly main_only;
  EXPECT_TRUE(static_cast<bool>(main_only));
}
