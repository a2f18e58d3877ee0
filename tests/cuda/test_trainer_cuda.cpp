// A training step never makes the host wait for the GPU (issue 30): Trainer::launch_step (forward,
// backward, clipping, AdamW) runs under CUDA's synchronisation debug mode set to error, which
// throws at any stream or device synchronisation, blocking copy or item(); the step's one wait is
// finish_step's read of the loss and norm. Full fine-tuning with bf16 weights and fp32 masters,
// LoRA, with and without recomputed layers, and a batch with ignored targets. Exits 77 (skipped)
// without a CUDA device; run by the GPU harness (ctest -L gpu).
#include <ATen/ATen.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#ifdef LUATUNE_HAS_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "host/adapt/lora.h"
#include "host/data/batch.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/model/transformer.h"
#include "host/train/trainer.h"

using namespace luatune;

#ifdef LUATUNE_HAS_CUDA
namespace {

int failures = 0;

Batch make_batch(int64_t vocab) {
  Batch b;
  b.ids = at::randint(vocab, {2, 32}, at::TensorOptions(at::kLong));
  b.targets = b.ids.roll(-1, 1).clone();
  b.targets.narrow(1, 0, 5).fill_(kIgnoreTarget);  // a prompt: positions without a target
  b.targets.narrow(1, 31, 1).fill_(kIgnoreTarget);
  b.target_tokens = b.targets.ne(kIgnoreTarget).sum().item<int64_t>();
  b.tokens = b.ids.numel();
  return b;
}

void check_case(const std::string& name, bool lora, bool recompute) {
  at::manual_seed(0);
  const std::string fields = R"({"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2})";
  auto model =
      model_init(model_config_with("llama", fields, "test"), 1, at::kBFloat16, c10::Device(c10::kCUDA, 0));
  if (lora) {
    LoraConfig lc;
    lc.targets = {"all-linear"};
    lc.dropout = 0.1;
    lora_apply(*model, lc, 3);
  }
  TrainOptions o;
  o.learning_rate = 1e-3;
  o.schedule = "constant";
  o.gradient_checkpointing = recompute;
  o.max_grad_norm = 1.0;
  Trainer trainer(model, o);
  const Batch batch = make_batch(256);
  trainer.step(batch);  // the first step allocates the optimizer state and the caching allocator's blocks
  try {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
    Trainer::PendingStep pending = trainer.launch_step(batch);
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    StepStats s = trainer.finish_step(pending);
    if (!(s.loss > 0) || !(s.grad_norm > 0)) {
      std::printf("FAIL %s: loss %g, grad norm %g\n", name.c_str(), s.loss, s.grad_norm);
      failures++;
      return;
    }
    std::printf("ok   %s: a step launched without a host sync (loss %.4f)\n", name.c_str(), s.loss);
  } catch (const std::exception& e) {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    std::string what = e.what();
    std::printf("FAIL %s: %s\n", name.c_str(), what.substr(0, what.find('\n', 400)).c_str());
    failures++;
  }
}

}  // namespace
#endif

int main() {
#ifdef LUATUNE_HAS_CUDA
  if (c10::cuda::device_count() == 0) {
    std::printf("skipped: no CUDA device\n");
    return 77;
  }
  check_case("full, bf16 + fp32 masters", false, false);
  check_case("full, recomputed layers", false, true);
  check_case("LoRA all-linear, dropout", true, false);
  check_case("LoRA, recomputed layers", true, true);
  std::printf("%d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
#else
  std::printf("skipped: a build without CUDA\n");
  return 77;
#endif
}
