// Reward models: the trainer's Bradley-Terry step against plain autograd of the same loss, rewards
// read at each row's last token (padding after it changes nothing), HF's sequence-classification
// layout (config.json, tensor names) and its round trip, and the config checks for such models.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "host/core/files.h"
#include "host/io/safetensors.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/train/reward.h"
#include "host/train/trainer.h"
#include "tests/cpp/test_batch.h"
#include "tests/cpp/test_tiny.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
namespace fs = std::filesystem;

namespace {

// `pairs` pairs of random rows of length `len`; row r is lengths[r] tokens then padding (id 0);
// targets on every real token after the first 3 (the reward ignores them; the trainer needs some).
Batch pair_batch(int64_t pairs, int64_t len, uint64_t seed) {
  Batch b = random_batch(61, 2 * pairs, len, seed);
  b.lengths = at::empty({2 * pairs}, at::kLong);
  for (int64_t r = 0; r < 2 * pairs; r++) {
    const int64_t n = len - (r * 3) % 4;  // 4 different lengths
    b.lengths[r] = n;
    b.ids[r].narrow(0, n, len - n).fill_(0);
    b.targets[r].narrow(0, 0, 3).fill_(kIgnoreTarget);
    b.targets[r].narrow(0, n - 1, len - n + 1).fill_(kIgnoreTarget);
  }
  b.segments = at::Tensor();
  b.target_tokens = b.targets.ne(kIgnoreTarget).sum().item<int64_t>();
  b.pairs = pairs;
  b.pair_ids = at::arange(pairs, at::kLong);
  return b;
}

std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("luatune_test_reward_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

}  // namespace

TEST(Reward, ScoreReadsEachRowsLastTokenOnly) {
  auto model = tiny_model61();
  RewardModel rm(model, 3);
  Batch b = pair_batch(2, 12, 5);
  at::Tensor s = rm.score(b);
  ASSERT_EQ(s.sizes(), (std::vector<int64_t>{4}));
  // By hand: the final-norm hidden state at lengths - 1, times the head.
  at::Tensor h = model->hidden(b.ids);
  for (int64_t r = 0; r < 4; r++) {
    double want = at::dot(h[r][b.lengths[r].item<int64_t>() - 1], rm.head()[0]).item<double>();
    EXPECT_NEAR(s[r].item<double>(), want, 1e-5) << "row " << r;
  }
  // What follows a row's end (padding) does not change its reward; its last token does.
  Batch c = b;
  c.ids = b.ids.clone();
  const int64_t n1 = b.lengths[1].item<int64_t>();
  c.ids[1].narrow(0, n1, 12 - n1).fill_(7);
  EXPECT_TRUE(at::allclose(rm.score(c), s, 1e-6, 1e-6));
  c.ids[1][n1 - 1] = (b.ids[1][n1 - 1].item<int64_t>() + 1) % 61;
  EXPECT_GT(std::abs(rm.score(c)[1].item<double>() - s[1].item<double>()), 1e-6);
}

TEST(Reward, TrainerStepIsBradleyTerryByPlainAutograd) {
  auto model = tiny_model61(2), ref_model = tiny_model61(2);
  auto rm = std::make_shared<RewardModel>(model, 4);
  RewardModel ref(ref_model, 4);
  Batch b = pair_batch(3, 10, 7);
  TrainOptions o;
  o.optimizer = "sgd";
  o.learning_rate = 0.1;
  o.schedule = "constant";
  o.max_grad_norm = 0;
  o.batch_size = 2;  // one pair per micro-batch: the loss is still the mean over the 3 pairs
  Trainer t(model, o, {rm});
  StepStats st = t.step(b);

  // The same loss by hand: rewards at the last tokens, mean over pairs of -log sigmoid(rc - rr).
  at::Tensor h = ref_model->hidden(b.ids);
  at::Tensor last = h.index({at::arange(6), b.lengths - 1});
  at::Tensor r = at::matmul(last, ref.head().t()).squeeze(1);
  at::Tensor rc = r.slice(0, 0, 6, 2), rr = r.slice(0, 1, 6, 2);
  at::Tensor loss = -at::log_sigmoid(rc - rr).mean();
  loss.backward();
  EXPECT_NEAR(st.loss, loss.item<double>(), 1e-5);
  double acc = rc.gt(rr).to(at::kDouble).mean().item<double>();
  double margin = (rc - rr).mean().item<double>();
  int seen = 0;
  for (auto& [k, v] : st.extra) {
    if (k == "preference_accuracy") {
      EXPECT_NEAR(v, acc, 1e-9);
      seen++;
    } else if (k == "reward_margin") {
      EXPECT_NEAR(v, margin, 1e-5);
      seen++;
    }
  }
  EXPECT_EQ(seen, 2);
  // SGD without momentum: new = old - lr * grad, for the head and a body weight.
  EXPECT_TRUE(at::allclose(rm->head(), ref.head() - 0.1 * ref.head().grad(), 1e-5, 1e-6));
  at::Tensor& w = ref_model->layers[1].down.weight;
  EXPECT_TRUE(at::allclose(model->layers[1].down.weight, w - 0.1 * w.grad(), 1e-5, 1e-6));
}

TEST(Reward, SavesAsHfSequenceClassificationAndLoadsBack) {
  auto model = tiny_model61(3);
  RewardModel rm(model, 5);
  std::string dir = temp_dir("save");
  reward_save(rm, dir, 60);
  nlohmann::json cfg = nlohmann::json::parse(file_read(dir + "/config.json"));
  EXPECT_EQ(cfg["architectures"][0], "LlamaForSequenceClassification");
  EXPECT_EQ(cfg["pad_token_id"], 60);
  EXPECT_EQ(cfg["id2label"].size(), 1u);
  EXPECT_EQ(cfg["label2id"]["LABEL_0"], 0);
  SafetensorsReader st(dir);
  EXPECT_TRUE(st.contains("score.weight"));
  EXPECT_FALSE(st.contains("lm_head.weight"));
  EXPECT_TRUE(st.contains("model.embed_tokens.weight"));
  EXPECT_EQ(st.entry("score.weight").shape, (std::vector<int64_t>{1, 32}));

  auto back = reward_load(dir, LoadOptions("float32"));
  EXPECT_TRUE(back->model()->config.score_head);
  EXPECT_FALSE(back->model()->lm_head.defined());
  EXPECT_TRUE(at::equal(back->head(), rm.head()));
  Batch b = pair_batch(2, 9, 11);
  EXPECT_TRUE(at::equal(back->score(b), rm.score(b)));
  // Saved again from the loaded one: the same architecture, not a CausalLM without its head.
  reward_save(*back, dir, 60);
  EXPECT_EQ(nlohmann::json::parse(file_read(dir + "/config.json"))["architectures"][0],
            "LlamaForSequenceClassification");
  fs::remove_all(dir);
}

TEST(Reward, ErrorsNameWhatIsWrong) {
  auto model = tiny_model61(4);
  RewardModel rm(model, 1);
  std::string dir = temp_dir("errors");
  // A causal LM directory has no score head.
  model_save(*model, dir);
  EXPECT_NE(error_of([&] { reward_load(dir, LoadOptions("float32")); })
                .find("expected a reward model (architectures <Family>ForSequenceClassification), got "
                      "LlamaForCausalLM"),
            std::string::npos);
  EXPECT_NE(error_of([&] { reward_load_head(rm, dir); }).find("tensor score.weight is missing"),
            std::string::npos);
  // Classifiers with more than one label are not reward models.
  nlohmann::json cfg = nlohmann::json::parse(file_read(dir + "/config.json"));
  cfg["architectures"] = {"LlamaForSequenceClassification"};
  EXPECT_NE(error_of([&] {
              model_config_parse(cfg.dump(), "c.json");
            }).find("c.json: LlamaForSequenceClassification with 2 labels is not supported"),
            std::string::npos);
  cfg["num_labels"] = 1;
  EXPECT_TRUE(model_config_parse(cfg.dump(), "c.json").score_head);
  EXPECT_NE(error_of([&] { reward_save(rm, dir, -1); }).find("pad_token_id must be >= 0"), std::string::npos);
  // A batch without pairs.
  Batch plain = random_batch(61, 2, 6, 1);
  EXPECT_NE(error_of([&] { rm.loss_units(plain); }).find("needs preference batches"), std::string::npos);
  fs::remove_all(dir);
}
