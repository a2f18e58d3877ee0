// luatune's logits against Hugging Face transformers' on the golden fixtures that
// scripts/make_hf_fixtures.py writes on a machine with transformers (tests/fixtures/hf/<arch>/).
// Skipped, not passed, while those fixtures are absent from the checkout.
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "host/core/files.h"
#include "host/io/safetensors.h"
#include "host/model/checkpoint.h"

using namespace luatune;

namespace {

void check_arch(const std::string& arch) {
  std::string dir = std::string(LUATUNE_SOURCE_DIR) + "/tests/fixtures/hf/" + arch;
  if (!file_exists(dir + "/expected.safetensors"))
    GTEST_SKIP() << dir << " is absent: run scripts/make_hf_fixtures.py where transformers is installed";
  auto expected = SafetensorsFile::open(dir + "/expected.safetensors");
  at::Tensor ids = expected->tensor("ids");
  at::NoGradGuard g;
  // float32: the same maths, so only summation order differs.
  auto f32 = model_load(dir, {"float32", "cpu"});
  at::Tensor got = f32->forward(ids).to(at::kFloat);
  at::Tensor want = expected->tensor("logits_float32");
  EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-4))
      << arch << " float32 max |diff| " << (got - want).abs().max().item<double>();
  // bfloat16: HF rounds at the same points we do; allow bf16's precision.
  auto bf16 = model_load(dir, {"bfloat16", "cpu"});
  got = bf16->forward(ids).to(at::kFloat);
  want = expected->tensor("logits_bfloat16");
  EXPECT_TRUE(at::allclose(got, want, 2e-2, 2e-2))
      << arch << " bfloat16 max |diff| " << (got - want).abs().max().item<double>();
}

}  // namespace

TEST(HFParity, Llama) {
  check_arch("llama");
}
TEST(HFParity, Mistral) {
  check_arch("mistral");
}
TEST(HFParity, Qwen2) {
  check_arch("qwen2");
}
TEST(HFParity, Qwen3) {
  check_arch("qwen3");
}
TEST(HFParity, Gemma2) {
  check_arch("gemma2");
}
