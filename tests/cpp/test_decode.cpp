// The fast CPU decode step (host/model/decode_cpu.h) against the model's own forward pass: the
// matrix-vector product against at::mv on odd shapes; every step's logits against model.forward with
// the same KV cache, for each family it takes (Llama, Mistral with a sliding window shorter than the
// sequence, Qwen2's biases, Qwen3's q/k norms); greedy generation token for token; and the models it
// leaves to the LibTorch path, each with its reason.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include "host/adapt/lora.h"
#include "host/core/error.h"
#include "host/model/decode_cpu.h"
#include "host/model/generate.h"
#include "test_tiny.h"

namespace luatune {
namespace {

TEST(DecodeCpu, MatvecEqualsAtenOnOddShapes) {
  at::manual_seed(3);
  for (int64_t rows : {1, 3, 4, 5, 9, 64, 131})
    for (int64_t cols : {1, 7, 8, 15, 16, 17, 37, 576}) {
      at::Tensor W = at::randn({rows, cols}), x = at::randn({cols}), b = at::randn({rows});
      at::Tensor y = at::empty({rows});
      decode_matvec(W.data_ptr<float>(), x.data_ptr<float>(), y.data_ptr<float>(), rows, cols, nullptr);
      EXPECT_TRUE(at::allclose(y, at::mv(W, x), 1e-5, 1e-5)) << rows << " x " << cols;
      decode_matvec(W.data_ptr<float>(), x.data_ptr<float>(), y.data_ptr<float>(), rows, cols,
                    b.data_ptr<float>());
      EXPECT_TRUE(at::allclose(y, at::mv(W, x) + b, 1e-5, 1e-5)) << rows << " x " << cols << " with bias";
    }
}

// initializer_range 0.4: logits far enough apart that float32 summation order cannot flip an argmax.
const char* kSpread = R"(, "initializer_range": 0.4)";

std::shared_ptr<Model> family(const std::string& arch) {
  std::string extra = kSpread;
  if (arch == "mistral") extra += R"(, "sliding_window": 6)";
  if (arch == "qwen2") extra += R"(, "use_sliding_window": false)";
  return tiny_model(arch, 32, 48, at::kFloat, 5, extra);
}

TEST(DecodeCpu, EveryStepGivesTheForwardPassLogits) {
  at::NoGradGuard g;
  for (const char* arch : {"llama", "mistral", "qwen2", "qwen3"}) {
    auto m = family(arch);
    ASSERT_EQ(decode_cpu_unsupported(*m), "") << arch;
    const std::vector<int64_t> prompt = {3, 17, 42, 8, 91};
    KVCache slow = m->new_cache(1, 32), quick = m->new_cache(1, 32);
    ForwardOptions fs, fq;
    fs.cache = &slow, fq.cache = &quick;
    fs.last_only = fq.last_only = true;
    at::Tensor ids = at::tensor(prompt, at::kLong).unsqueeze(0);
    m->forward(ids, fs);
    m->forward(ids, fq);
    DecodeCpu fast(*m, &quick);
    int64_t token = 11;
    for (int step = 0; step < 20; step++) {  // past the sliding window of 6
      at::Tensor want = m->forward(at::tensor({token}, at::kLong).unsqueeze(0), fs);
      at::Tensor got = fast.step(token);
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-5))
          << arch << " step " << step << ": max diff " << (got - want).abs().max().item<float>();
      EXPECT_EQ(quick.length, slow.length);
      token = (token * 7 + 3) % 97;
    }
  }
}

TEST(DecodeCpu, GreedyGenerationIsTheSameTokenForToken) {
  for (const char* arch : {"llama", "qwen3"}) {
    auto m = family(arch);
    GenerateOptions o;
    o.max_new_tokens = 40;
    GenerateResult fast = model_generate_ids(*m, {5, 6, 7}, o, nullptr);
    o.fast_decode = false;
    GenerateResult slow = model_generate_ids(*m, {5, 6, 7}, o, nullptr);
    EXPECT_EQ(fast.new_ids, slow.new_ids) << arch;
    EXPECT_EQ(fast.finish_reason, slow.finish_reason);
  }
}

// A batch step gives every sequence the bits it gets alone, whatever else is in the batch.
TEST(DecodeCpu, ABatchStepEqualsEachSequenceAlone) {
  at::NoGradGuard g;
  auto m = family("llama");
  const std::vector<std::vector<int64_t>> prompts = {{3, 4}, {9, 8, 7, 6, 5}, {1}};
  std::vector<KVCache> together, alone;
  for (const auto& p : prompts) {
    for (auto* list : {&together, &alone}) {
      list->push_back(m->new_cache(1, 16));
      ForwardOptions fo;
      fo.cache = &list->back();
      m->forward(at::tensor(p, at::kLong).unsqueeze(0), fo);
    }
  }
  DecodeCpu batch(*m, std::vector<KVCache*>{&together[0], &together[1], &together[2]});
  for (int step = 0; step < 6; step++) {
    // sequence 1 sits out every other step, as a finished one would
    std::vector<int64_t> seqs = step % 2 ? std::vector<int64_t>{2, 0} : std::vector<int64_t>{0, 1, 2};
    std::vector<int64_t> toks;
    for (int64_t s : seqs) toks.push_back((s * 13 + step * 5 + 1) % 97);
    at::Tensor rows = batch.step(seqs, toks).clone();
    for (size_t j = 0; j < seqs.size(); j++) {
      DecodeCpu one(*m, &alone[seqs[j]]);
      EXPECT_TRUE(at::equal(rows[static_cast<int64_t>(j)], one.step(toks[j]).flatten()))
          << "step " << step << " sequence " << seqs[j];
    }
  }
  EXPECT_THROW(batch.step({0, 0}, {1, 2}), Error);  // a sequence twice
}

// 64 prompts of 1-12 tokens, some ending early on an EOS id: batched generation equals one-at-a-time
// generation token for token, greedy and sampled.
TEST(DecodeCpu, BatchedGenerationEqualsOneAtATime) {
  auto m = family("qwen3");
  std::vector<std::vector<int64_t>> prompts;
  for (int i = 0; i < 64; i++) {
    std::vector<int64_t> p;
    for (int j = 0; j <= i % 12; j++) p.push_back((i * 31 + j * 7 + 2) % 97);
    prompts.push_back(p);
  }
  // An EOS id the greedy run of prompt 0 reaches at its fourth token: some sequences end early.
  GenerateOptions plain;
  plain.max_new_tokens = 4;
  const int64_t eos = model_generate_ids(*m, prompts[0], plain, nullptr).new_ids.back();
  for (double temperature : {0.0, 0.8}) {
    GenerateOptions o;
    o.max_new_tokens = 16;
    o.temperature = temperature;
    o.top_k = temperature > 0 ? 20 : 0;
    o.stop_ids = {eos};
    size_t calls = 0;
    std::vector<GenerateResult> batch =
        model_generate_batch(*m, prompts, o, nullptr, [&](size_t done, size_t total) {
          calls++;
          EXPECT_EQ(total, 64u);
        });
    ASSERT_EQ(batch.size(), prompts.size());
    EXPECT_EQ(calls, 64u);
    int early = 0;
    for (size_t i = 0; i < prompts.size(); i++) {
      GenerateResult one = model_generate_ids(*m, prompts[i], o, nullptr);
      EXPECT_EQ(batch[i].new_ids, one.new_ids) << "prompt " << i << " temperature " << temperature;
      EXPECT_EQ(batch[i].finish_reason, one.finish_reason) << i;
      EXPECT_EQ(batch[i].prompt_ids, prompts[i]);
      early += one.finish_reason == "eos";
    }
    if (temperature == 0) EXPECT_GT(early, 0) << "no sequence dropped out early: the test would not see one";
  }
  // One prompt n times with a seed each (rejection sampling's candidates): each as it is alone.
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.temperature = 1.0;
  const std::vector<uint64_t> seeds = {11, 12, 13, 14};
  std::vector<GenerateResult> batch =
      model_generate_batch(*m, {prompts[5], prompts[5], prompts[5], prompts[5]}, o, nullptr, {}, seeds);
  for (size_t k = 0; k < seeds.size(); k++) {
    o.seed = seeds[k];
    EXPECT_EQ(batch[k].new_ids, model_generate_ids(*m, prompts[5], o, nullptr).new_ids)
        << "seed " << seeds[k];
  }
  EXPECT_NE(batch[0].new_ids, batch[1].new_ids);  // the seeds differ, so do the samples
}

TEST(DecodeCpu, OtherModelsKeepTheLibTorchPathAndSayWhy) {
  EXPECT_EQ(decode_cpu_unsupported(*tiny_model("llama", 32, 48, at::kBFloat16)), "the model is not float32");
  EXPECT_EQ(decode_cpu_unsupported(*tiny_model61(1, "gemma2")), "Gemma 2's norms and softcaps");
  auto m = family("llama");
  LoraConfig lo;
  lo.r = 4;
  lora_apply(*m, lo, 1);
  EXPECT_EQ(decode_cpu_unsupported(*m), "an enabled adapter (merge it first)");
  m->set_adapters_enabled(false);
  EXPECT_EQ(decode_cpu_unsupported(*m), "");
  m->set_adapters_enabled(true);
  // generate still works on such a model, through model.forward
  GenerateOptions o;
  o.max_new_tokens = 5;
  EXPECT_EQ(model_generate_ids(*m, {1, 2}, o, nullptr).new_ids.size(), 5u);
  KVCache c = m->new_cache(1, 8);
  EXPECT_THROW({ DecodeCpu d(*m, &c); }, Error);
}

}  // namespace
}  // namespace luatune
