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
