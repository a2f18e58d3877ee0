// A frozen model's layers sharded (host/dist/frozen_shards.h) and the trainer's collective micro-batch
// slots, in one process: the sharded forward equals the whole model's, released weights are NaN views,
// reading the weights gathers them, the trainer calls empty_micro_batch for a micro-batch without
// targets, and shard_teacher without ranks changes nothing. 2 ranks: tests/dist/test_teacher_shard.sh.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "host/core/error.h"
#include "host/dist/frozen_shards.h"
#include "host/distill/distill.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/train/trainer.h"

using namespace luatune;

namespace {

std::shared_ptr<Model> tiny(uint64_t seed, int64_t layers = 3) {
  std::string fields =
      R"({"vocab_size": 61, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": )" +
      std::to_string(layers) + R"(, "num_attention_heads": 4, "num_key_value_heads": 2})";
  return model_init(model_config_with("llama", fields, "test"), seed, at::kFloat, at::kCPU);
}

Batch random_batch(int64_t rows, int64_t len, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  Batch b;
  b.ids = at::randint(61, {rows, len}, gen, at::TensorOptions(at::kLong));
  b.targets = at::full({rows, len}, kIgnoreTarget, at::kLong);
  b.targets.narrow(1, 0, len - 1).copy_(b.ids.narrow(1, 1, len - 1));
  b.target_tokens = rows * (len - 1);
  b.tokens = rows * len;
  return b;
}

int64_t layer_numel(Model& m) {
  int64_t n = 0;
  for (auto& [name, p] : m.named_parameters())
    if (name.rfind("model.layers.", 0) == 0) n += p->numel();
  return n;
}

// Counts the trainer's calls; its micro-batches are collective.
struct CountingHook : TrainerHook {
  int64_t losses = 0, empties = 0;
  at::Tensor micro_loss(const MicroBatch& mb, const at::Tensor& ce_sum) override {
    losses++;
    return {};
  }
  bool collective_micro_batches() const override { return true; }
  void empty_micro_batch(bool training) override { empties++; }
};

}  // namespace

TEST(FrozenShards, ShardedForwardEqualsTheWholeModelAndReadingGathers) {
  auto whole = tiny(3), sharded = tiny(3);
  const int64_t full = layer_numel(*whole);
  auto shards = std::make_shared<FrozenShards>(sharded->named_parameters(), 3);
  sharded->residency = shards;
  // Released: every layer weight is a view of one NaN (its storage a single element).
  const at::Tensor& q = sharded->layers[1].q.weight;
  EXPECT_EQ(q.sizes(), whole->layers[1].q.weight.sizes());
  EXPECT_TRUE(at::isnan(q).all().item<bool>());
  EXPECT_EQ(q.storage().nbytes(), sizeof(float));
  FrozenShardsMemory m = shards->memory();
  EXPECT_EQ(m.full_layer_elements, full);
  EXPECT_EQ(m.full_layer_bytes, 4 * full);
  // One process holds its slice, the whole layer, plus the NaN element of each of the 3 groups.
  EXPECT_EQ(m.layer_elements, full + 3);

  at::NoGradGuard no_grad;
  at::Tensor ids = random_batch(2, 9, 4).ids;
  at::Tensor want = whole->hidden(ids);
  ForwardOptions fo;
  fo.run_layer = [&](int64_t l, const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& x) {
    return shards->run_layer(l, fn, x);
  };
  fo.run_layer_gathers = true;
  EXPECT_TRUE(at::equal(sharded->hidden(ids, fo), want));
  EXPECT_TRUE(at::isnan(sharded->layers[2].down.weight).all().item<bool>()) << "freed after its forward";
  shards->empty_forward();  // the gathers alone: nothing changes
  // A plain forward (and anything reading the weights) gathers every layer through the residency.
  EXPECT_TRUE(at::equal(sharded->hidden(ids), want));
  EXPECT_TRUE(at::equal(sharded->layers[2].down.weight, whole->layers[2].down.weight));
  EXPECT_EQ(shards->memory().layer_elements, 2 * full);    // slices + gathered layers
  EXPECT_TRUE(at::equal(sharded->hidden(ids, fo), want));  // frees them again
  EXPECT_EQ(shards->memory().layer_elements, full + 3);
}

TEST(FrozenShards, ForwardWithAutogradIsRefused) {
  auto m = tiny(5, 1);
  FrozenShards shards(m->named_parameters(), 1);
  at::Tensor x = at::zeros({1, 2, 32});
  EXPECT_THROW(shards.run_layer(
                   0, [](const at::Tensor& y) { return y; }, x),
               Error);
}

TEST(TrainerCollectiveHooks, AMicroBatchWithoutTargetsIsAnEmptySlot) {
  auto model = tiny(6, 2);
  auto hook = std::make_shared<CountingHook>();
  TrainOptions to;
  to.schedule = "constant";
  to.batch_size = 1;
  Trainer t(model, to, {hook});
  Batch b = random_batch(3, 6, 7);
  b.targets[1].fill_(kIgnoreTarget);  // the middle micro-batch has nothing to learn
  b.target_tokens = 2 * 5;
  t.step(b);
  EXPECT_EQ(hook->losses, 2);
  EXPECT_EQ(hook->empties, 1);
  t.evaluate(std::vector<Batch>{b, b});  // one process: no padding
  EXPECT_EQ(hook->losses, 6);
  EXPECT_EQ(hook->empties, 3);
}

TEST(DistillerShardTeacher, OneProcessChangesNothing) {
  auto teacher_a = tiny(8), teacher_b = tiny(8);
  std::vector<double> losses;
  std::vector<std::shared_ptr<Model>> students;
  for (bool shard : {false, true}) {
    DistillOptions o;
    o.shard_teacher = shard;
    auto student = tiny(9, 2);
    auto kd = std::make_shared<Distiller>(shard ? teacher_b : teacher_a, student, o);
    EXPECT_FALSE(kd->teacher_sharded());
    EXPECT_FALSE(kd->collective_micro_batches());
    FrozenShardsMemory m = kd->teacher_memory();
    EXPECT_EQ(m.layer_elements, m.full_layer_elements);
    EXPECT_GT(m.full_layer_elements, 0);
    TrainOptions to;
    to.schedule = "constant";
    Trainer t(student, to, {kd});
    for (uint64_t s = 0; s < 2; s++) losses.push_back(t.step(random_batch(2, 7, 10 + s)).loss);
    students.push_back(student);
  }
  EXPECT_EQ(losses[0], losses[2]);
  EXPECT_EQ(losses[1], losses[3]);
  EXPECT_TRUE(at::equal(students[0]->layers[0].q.weight, students[1]->layers[0].q.weight));
}
