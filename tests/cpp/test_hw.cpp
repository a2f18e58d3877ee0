// The hw module's arithmetic against numbers computed by hand (the sums are in the comments):
// parameter counts of Llama 3.1 8B, Mistral 7B and Gemma 2 9B from their config.json values; the
// planner's components for full, LoRA and QLoRA on 8B; fits and advice; MFU on docs/hardware.md's
// published check; projection and cost; the catalog file and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <tuple>

#include "host/core/files.h"
#include "host/hw/calibration.h"
#include "host/hw/catalog.h"
#include "host/hw/device_probe.h"
#include "host/hw/plan.h"
#include "host/hw/plan_recipe.h"
#include "host/hw/profile.h"
#include "test_util.h"

#include <nlohmann/json.hpp>

namespace luatune {
namespace {

// A planned model's layers, heads, kv_heads, hidden and intermediate sizes.
std::vector<int64_t> dims(const ModelConfig& m) {
  return {m.num_layers, m.num_heads, m.num_kv_heads, m.hidden_size, m.intermediate_size};
}

// LoRA (r=16, all seven projections) with activation checkpointing, micro-batches of 4.
PlanOptions lora_checkpointed() {
  PlanOptions o;
  o.method = PlanMethod::method_lora;
  o.batch_size = 4;
  o.gradient_checkpointing = true;
  return o;
}

// The config.json values of the three models (meta-llama/Llama-3.1-8B, mistralai/Mistral-7B-v0.1,
// google/gemma-2-9b), written out here rather than read from the presets.
ModelConfig llama31_8b() {
  return model_config_with("llama", R"({"vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
      "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": false})",
                           "test llama");
}
ModelConfig mistral_7b() {
  return model_config_with("mistral",
                           R"({"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336,
      "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "tie_word_embeddings": false})",
                           "test mistral");
}
ModelConfig gemma2_9b() {
  return model_config_with("gemma2",
                           R"({"vocab_size": 256000, "hidden_size": 3584, "intermediate_size": 14336,
      "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256,
      "query_pre_attn_scalar": 256, "sliding_window": 4096, "attn_logit_softcapping": 50.0,
      "final_logit_softcapping": 30.0, "tie_word_embeddings": true})",
                           "test gemma2");
}

std::vector<GpuSpec> catalog() {
  return hw_catalog_load(std::string(LUATUNE_SOURCE_DIR) + "/data/gpu_catalog.json");
}

// A measurement for hw_profile: `tokens` trained in `seconds` at sequence length `seq_len`.
ProfileInput measured(double tokens, double seconds, int64_t seq_len) {
  ProfileInput in;
  in.tokens = tokens;
  in.seconds = seconds;
  in.seq_len = seq_len;
  return in;
}

// ---------------------------------------------------------------------------------------------
// Parameter counts

TEST(HwParams, Llama31_8B) {
  HwParamCounts n = hw_param_counts(llama31_8b());
  // embed = lm_head = 128256 * 4096 = 525,336,576
  EXPECT_EQ(n.embedding, 525336576);
  EXPECT_EQ(n.lm_head, 525336576);
  // per layer: q 4096*4096 + k 4096*1024 + v 4096*1024 + o 4096*4096 = 41,943,040;
  // gate/up/down 3 * 4096 * 14336 = 176,160,768; -> 218,103,808 * 32 = 6,979,321,856
  EXPECT_EQ(n.linear, 6979321856);
  EXPECT_EQ(n.norms, 2 * 4096 * 32 + 4096);  // 266,240
  // 2 * 525,336,576 + 6,979,321,856 + 266,240 = 8,030,261,248 (8.03 B)
  EXPECT_EQ(n.total, 8030261248);
  EXPECT_EQ(n.matmul, 8030261248 - 525336576);  // 7.50 B (docs/hardware.md, MFU)
  // LoRA r=16 on all seven: 16 * ((4096+4096)*2 + (4096+1024)*2 + (4096+14336)*3) = 1,310,720 per layer
  EXPECT_EQ(hw_lora_params(llama31_8b(), 16, {"all-linear"}), 1310720 * 32);  // 41.9 M (docs/hardware.md)
  EXPECT_EQ(hw_lora_params(llama31_8b(), 16, {"q_proj", "v_proj"}), 16 * (8192 + 5120) * 32);
}

TEST(HwParams, Mistral7B) {
  // 2 * 32000 * 4096 = 262,144,000 + the same layers as Llama 3.1 8B + final norm 4096
  EXPECT_EQ(hw_param_counts(mistral_7b()).total, 262144000 + 6979321856 + 266240);  // 7,241,732,096 (7.24 B)
}

TEST(HwParams, Gemma2_9B) {
  HwParamCounts n = hw_param_counts(gemma2_9b());
  // per layer: q 3584*4096 + k 3584*2048 + v 3584*2048 + o 4096*3584 = 44,040,192;
  // mlp 3 * 3584 * 14336 = 154,140,672; four norms 4 * 3584 = 14,336 -> 198,195,200 * 42 = 8,324,198,400
  // + tied embedding 256000 * 3584 = 917,504,000 + final norm 3584 = 9,241,705,984 (9.24 B)
  EXPECT_EQ(n.total, 9241705984);
  EXPECT_EQ(n.lm_head, 0);
  EXPECT_EQ(n.matmul, n.total);  // the tied head's matmul counts
}

// ---------------------------------------------------------------------------------------------
// Memory: Llama 3.1 8B, seq_len 2048, loss chunk 4096

TEST(HwPlan, FullMixedPrecision8B) {
  PlanOptions o;  // full, bf16 + fp32 master, AdamW, batch_size 1, max_length 2048, no checkpointing
  PlanComponents m = hw_plan_memory(llama31_8b(), o);
  const double N = 8030261248.0;
  EXPECT_DOUBLE_EQ(m.weights, 2 * N);
  EXPECT_DOUBLE_EQ(m.master_weights, 4 * N);
  EXPECT_DOUBLE_EQ(m.gradients, 2 * N);
  EXPECT_DOUBLE_EQ(m.optimizer_states, 8 * N);  // 16 B/param in all: 119.7 GiB (docs/hardware.md, [memory])
  // per layer per token (the CUDA step's fused kernels): norms 2*(4096*2 + 4) = 16,392; SDPA q, k, v
  // grouped + output (2*4096 + 2*1024)*2 + 4*32 = 20,608; gate and up 2*14336*2 = 57,344; the
  // Linears' inputs (4096 + 4096 + 4096 + 14336)*2 = 53,248 -> 147,592; * 2048 tokens = 302,268,416.
  // head: 2048 * (4096*2 + 4 + 4096*2) = 33,562,624. All 32 layers + head:
  EXPECT_DOUBLE_EQ(m.activations, 32.0 * 302268416 + 33562624);  // 9,706,151,936
  // one layer's backward in flight: 2048 * (2*4096 + 3*14336) * 2 = 209,715,200
  EXPECT_DOUBLE_EQ(m.layer_backward, 209715200.0);
  // logits (fused loss): 2048 rows * (128256 * 2 bf16 logits + 8016 * 4 one float32 block of 1/16
  // of the vocabulary) = 591,003,648; grad_hidden 2048*4096*2 = 16,777,216; the head's bf16
  // gradient 525,336,576 * 2 = 1,050,673,152
  EXPECT_DOUBLE_EQ(m.logits, 591003648.0 + 16777216 + 1050673152);
  EXPECT_DOUBLE_EQ(m.optimizer_step, 525336576.0 * 8);  // float32 gradient copy + sqrt denominator
  // The peak is a layer's backward: gradients 2N + activations + that layer = 25,976,389,632, over
  // the loss (11,364,605,952) and the step (2N + 4,202,692,608 = 20,263,215,104).
  EXPECT_EQ(m.peak_at, "backward");
  // (14N + 25,976,389,632) * 1.05 + 1 GiB = 146,393,791,283.2 B = 136.3 GiB
  EXPECT_NEAR(m.total, 146393791283.2, 1.0);
  EXPECT_GT(m.total / kGiB, 120);  // well over 80 GB
}

TEST(HwPlan, Lora8B) {
  PlanOptions o;
  o.method = PlanMethod::method_lora;  // r=16, all seven projections, dropout 0.05
  o.gradient_checkpointing = true;
  PlanComponents m = hw_plan_memory(llama31_8b(), o);
  const double n_lora = 41943040;
  EXPECT_DOUBLE_EQ(m.weights, 2 * 8030261248.0);
  EXPECT_DOUBLE_EQ(m.adapters, 4 * n_lora);  // float32 adapters
  EXPECT_DOUBLE_EQ(m.gradients, 4 * n_lora);
  EXPECT_DOUBLE_EQ(m.optimizer_states, 8 * n_lora);
  EXPECT_DOUBLE_EQ(m.master_weights, 0);
  // frozen layer per token: norms 16,392, SDPA 20,608, gate and up 57,344 (as full); the adapters'
  // inputs once per distinct input 53,248; A's outputs 7 * 16 * 2 = 224; dropout masks, a byte per
  // input element per projection, 6*4096 + 14336 = 38,912 -> 186,728 B/token; * 2048 = 382,418,944.
  // At the loss: the layers' inputs 32 * 2048 * 4096 * 2 = 536,870,912 + head 33,562,624
  EXPECT_DOUBLE_EQ(m.activations, 536870912.0 + 33562624);
  // a layer's backward: recomputed 382,418,944 + in flight 209,715,200
  EXPECT_DOUBLE_EQ(m.layer_backward, 382418944.0 + 209715200);
  EXPECT_DOUBLE_EQ(m.logits, 591003648.0 + 16777216);  // frozen head: no head gradient
  EXPECT_EQ(m.peak_at, "backward");  // 1,330,339,840 with the gradients, over the loss's 1,178,214,400
  // (16,563,838,976 + 1,330,339,840) * 1.05 + 1 GiB = 19,862,629,580.8 B = 18.5 GiB
  EXPECT_NEAR(m.total, 19862629580.8, 1.0);
  EXPECT_GT(m.total / kGiB, 16);
  EXPECT_LT(m.total / kGiB, 25);
}

TEST(HwPlan, Qlora8BFitsIn16GB) {
  PlanOptions o;
  o.method = PlanMethod::method_qlora;
  o.gradient_checkpointing = true;
  PlanComponents m = hw_plan_memory(llama31_8b(), o);
  // NF4: 6,979,321,856 * 0.516 = 3,601,330,077.696 (3.35 GiB; docs/qlora.md, "Sources"); the rest in bf16:
  // (8,030,261,248 - 6,979,321,856) * 2 = 2,101,878,784 (1.96 GiB)
  EXPECT_NEAR(m.weights, 3601330077.696 + 2101878784, 1e-3);
  // a layer's backward as LoRA's + one dequantised 4096 x 14336 weight in bf16 (117,440,512)
  EXPECT_DOUBLE_EQ(m.layer_backward, 382418944.0 + 209715200 + 117440512);
  // (5,703,208,861.7 + 167,772,160 + 335,544,320 + 167,772,160 + 570,433,536 + 709,574,656) * 1.05
  // + 1 GiB = 8.49 GiB
  EXPECT_NEAR(m.total, 9110762802.3808, 1.0);
  EXPECT_LT(m.total / kGiB, 10);
}

// The peaks in data/planner_calibration.json (measured by the GPU harness: torch.cuda.max_memory_allocated
// of luatune's step in bench/gpu/train_bench.lua), each planned with its own settings and the shape of
// bench/gpu/shapes.json. A point whose step's loss held more per logit than today's (loss_logit_bytes:
// 8 on 2026-11-26, a float32 copy of the 16-bit chunk and logsumexp's float32 temporary) is planned
// with that. The allocator's peak sees neither the CUDA context nor fragmentation, so the plan less
// those two terms is compared, within 10 %.
TEST(HwPlan, WithinTenPercentOfTheCalibrationPoints) {
  const std::vector<CalibrationPoint> points = hw_calibration_load("data/planner_calibration.json");
  ASSERT_GE(points.size(), 4u);
  const nlohmann::json shapes = nlohmann::json::parse(file_read("bench/gpu/shapes.json"))["shapes"];
  for (const CalibrationPoint& pt : points) {
    ASSERT_TRUE(shapes.contains(pt.shape)) << pt.shape;
    const ModelConfig model = model_config_with(shapes[pt.shape].value("arch", std::string("llama")),
                                                shapes[pt.shape]["config"].dump(), pt.shape);
    PlanOptions o;
    o.method = plan_method_parse(pt.method);
    o.batch_size = pt.batch_size;
    o.max_length = pt.max_length;
    o.gradient_checkpointing = pt.gradient_checkpointing;
    o.dtype = pt.dtype;
    o.lora_r = pt.lora_r;
    o.lora_dropout = pt.lora_dropout;
    o.loss_logit_bytes = pt.loss_logit_bytes;
    const PlanComponents m = hw_plan_memory(model, o);
    const double allocated = m.total - m.cuda_context - m.fragmentation;
    const double measured = pt.peak_memory_gb * 1e9;
    EXPECT_NEAR(allocated / measured, 1.0, 0.10)
        << pt.date << " " << pt.name << ": planned " << allocated / kGiB << " GiB, measured "
        << measured / kGiB << " GiB";
    if (pt.loss_logit_bytes >= 8) EXPECT_EQ(m.peak_at, "loss") << pt.name;  // that step's loss chunk peaked
    EXPECT_EQ(pt.step.size(), 12u) << pt.name;  // a fingerprint (scripts/step_fingerprint.py COMMIT)
  }
  // Today's loss holds 2 bytes a logit (+ a float32 block): the same runs plan lower, by what the
  // chunk no longer holds, and the peak is a layer's backward for the 8B model.
  PlanOptions today = lora_checkpointed();
  today.max_length = 2048;
  today.lora_dropout = 0;
  PlanOptions then = today;
  then.loss_logit_bytes = 8;
  EXPECT_LT(hw_plan_memory(llama31_8b(), today).total, hw_plan_memory(llama31_8b(), then).total);
  EXPECT_EQ(hw_plan_memory(llama31_8b(), today).peak_at, "backward");
}

// What `runner plan` says of its calibration: the newest measurements (date, GPU, commit), whether the
// step as built is the one measured then, and while it is not, the loss those measurements held as a
// margin where that plans higher.
TEST(HwCalibration, TheNewestPointsAndWhetherTheStepChanged) {
  CalibrationPoint old_pt, new_pt;
  old_pt.date = "2026-11-26", old_pt.commit = "53dd9cf", old_pt.gpu = "NVIDIA H200",
  old_pt.step = "aaaaaaaaaaaa";
  old_pt.loss_logit_bytes = 8;
  new_pt = old_pt;
  new_pt.date = "2026-12-09", new_pt.commit = "1234567", new_pt.gpu = "NVIDIA H100",
  new_pt.step = "bbbbbbbbbbbb";
  new_pt.loss_logit_bytes = 0;
  CalibrationStatus s = hw_calibration_status({old_pt, new_pt}, "bbbbbbbbbbbb");
  EXPECT_TRUE(s.measured);
  EXPECT_EQ(std::make_tuple(s.date, s.commit, s.gpu, s.step_changed, s.loss_logit_bytes),
            std::make_tuple(std::string("2026-12-09"), std::string("1234567"), std::string("NVIDIA H100"),
                            false, 0.0));
  s = hw_calibration_status({new_pt, old_pt}, "cccccccccccc");
  EXPECT_TRUE(s.step_changed);
  EXPECT_FALSE(hw_calibration_status({}, "x").measured);

  PlanOptions o = lora_checkpointed();
  o.max_length = 2048;
  o.lora_dropout = 0;
  const std::vector<GpuSpec> gpus = catalog();
  const double plain = hw_plan(llama31_8b(), o, gpus).components.total;
  PlanOptions at8 = o;
  at8.loss_logit_bytes = 8;
  const double then = hw_plan(llama31_8b(), at8, gpus).components.total;
  ASSERT_GT(then, plain);
  std::string note;
  // Unmeasured step, measured with an 8-byte loss: the margin.
  const CalibrationStatus changed = hw_calibration_status({old_pt}, "dddddddddddd");
  EXPECT_DOUBLE_EQ(hw_plan_calibrated(llama31_8b(), o, gpus, changed, &note).components.total, then);
  EXPECT_NE(note.find("peaks measured 2026-11-26 on an NVIDIA H200 (commit 53dd9cf)"), std::string::npos)
      << note;
  EXPECT_NE(note.find("the training step changed since (fingerprint aaaaaaaaaaaa then"), std::string::npos)
      << note;
  EXPECT_NE(note.find("margin: +"), std::string::npos) << note;
  // The step measured as built: the model alone, and the note says so.
  const CalibrationStatus same = hw_calibration_status({new_pt}, "bbbbbbbbbbbb");
  EXPECT_DOUBLE_EQ(hw_plan_calibrated(llama31_8b(), o, gpus, same, &note).components.total, plain);
  EXPECT_NE(note.find("the training step is the one measured then (fingerprint bbbbbbbbbbbb)"),
            std::string::npos)
      << note;
  EXPECT_EQ(note.find("margin"), std::string::npos) << note;
  // No points: the model alone, said plainly.
  EXPECT_DOUBLE_EQ(hw_plan_calibrated(llama31_8b(), o, gpus, CalibrationStatus{}, &note).components.total,
                   plain);
  EXPECT_NE(note.find("no measured peaks"), std::string::npos);
  EXPECT_EQ(std::string(hw_step_fingerprint()).size(), 12u);
}

TEST(HwCalibration, AMalformedFileIsOneLineNamingThePoint) {
  TempDir dir;
  const std::string path = dir.path + "/c.json";
  EXPECT_TRUE(hw_calibration_load(dir.path + "/missing.json").empty());
  write_text(path, R"({"points": [{"date": "2026-11-26", "commit": "x", "gpu": "g", "step": "s"}]})");
  std::string msg = error_of([&] { hw_calibration_load(path); });
  EXPECT_NE(msg.find("planner calibration " + path + ": points[0]"), std::string::npos) << msg;
  write_text(path, "{");
  msg = error_of([&] { hw_calibration_load(path); });
  EXPECT_NE(msg.find("planner calibration " + path + ": not JSON"), std::string::npos) << msg;
  write_text(path, R"({"points": [{"date": "d", "commit": "x", "gpu": "g", "step": "s", "shape": "a",
      "method": "full", "batch_size": 4, "max_length": 8, "peak_memory_gb": -1}]})");
  msg = error_of([&] { hw_calibration_load(path); });
  EXPECT_NE(msg.find("points[0]: peak_memory_gb, batch_size and max_length must be positive"),
            std::string::npos)
      << msg;
}

TEST(HwPlan, OtherModelsOrdersOfMagnitude) {
  PlanOptions full;
  EXPECT_GT(hw_plan_memory(mistral_7b(), full).total / kGiB, 80);
  EXPECT_GT(hw_plan_memory(gemma2_9b(), full).total / kGiB, 80);
  PlanOptions q;
  q.method = PlanMethod::method_qlora;
  q.gradient_checkpointing = true;
  EXPECT_LT(hw_plan_memory(mistral_7b(), q).total / kGiB, 16);
  // Gemma 2's 256k vocabulary: at micro-batch 8 x 512 one 4096-row loss chunk (bf16 logits + two
  // float32 blocks of 16,000 columns under the final softcap) is 4096 * (256000 * 2 + 2 * 16000 * 4) B
  // = 2.2 GiB, and the loss is the peak; 512-row chunks move the peak to a layer's backward.
  q.batch_size = 8;
  q.max_length = 512;
  const PlanComponents at4096 = hw_plan_memory(gemma2_9b(), q);
  EXPECT_EQ(at4096.peak_at, "loss");
  q.loss_chunk = 512;
  const PlanComponents at512 = hw_plan_memory(gemma2_9b(), q);
  EXPECT_EQ(at512.peak_at, "backward");
  EXPECT_GT((at4096.total - at512.total) / kGiB, 0.5);
  // So a GPU between the two is advised the smaller chunk.
  GpuSpec between = hw_catalog_find(catalog(), "T4");
  between.memory_gb = (at4096.total + at512.total) / 2 / kGiB;
  Plan g = hw_plan(gemma2_9b(),
                   [&] {
                     PlanOptions x = q;
                     x.loss_chunk = 4096;
                     return x;
                   }(),
                   {between});
  bool chunk_advice = false;
  for (const auto& a : g.gpus[0].advice) chunk_advice |= a.rfind("a smaller loss chunk", 0) == 0;
  EXPECT_TRUE(chunk_advice);
  // Gemma 2 softcaps its attention logits: the explicit path keeps T x T scores, so without
  // checkpointing the activations grow with the square of the sequence.
  PlanOptions l;
  l.method = PlanMethod::method_lora;
  l.max_length = 4096;
  double a4 = hw_plan_memory(gemma2_9b(), l).activations;
  l.max_length = 2048;
  double a2 = hw_plan_memory(gemma2_9b(), l).activations;
  EXPECT_GT(a4 / a2, 2.5);
  EXPECT_NEAR(
      hw_plan_memory(llama31_8b(), l).activations * 2,
      [&] {
        PlanOptions x = l;
        x.max_length = 4096;
        return hw_plan_memory(llama31_8b(), x).activations;
      }(),
      1e6);  // SDPA: linear in the sequence
}

TEST(HwPlan, FitsMaxMicroBatchAndAdvice) {
  auto cat = catalog();
  PlanOptions o;
  o.method = PlanMethod::method_lora;
  o.batch_size = 4;
  Plan p = hw_plan(llama31_8b(), o, cat);
  ASSERT_EQ(p.gpus.size(), cat.size());
  int64_t prev = -1;
  double prev_mem = 0;
  // Sorted by memory, the max micro-batch never decreases.
  std::vector<GpuFit> by_mem = p.gpus;
  std::sort(by_mem.begin(), by_mem.end(),
            [](const GpuFit& a, const GpuFit& b) { return a.memory_gb < b.memory_gb; });
  for (const GpuFit& f : by_mem) {
    if (f.memory_gb > prev_mem) {
      EXPECT_GE(f.max_micro_batch, prev);
    }
    prev = f.max_micro_batch;
    prev_mem = f.memory_gb;
    EXPECT_EQ(f.fits, f.max_micro_batch >= 4) << f.gpu;
    EXPECT_EQ(f.fits, f.advice.empty() || (f.no_bf16 && f.advice.size() == 1)) << f.gpu;
  }
  const GpuFit* t4 = nullptr;
  for (const GpuFit& f : p.gpus)
    if (f.gpu == "T4") t4 = &f;
  ASSERT_TRUE(t4);
  EXPECT_FALSE(t4->fits);
  bool ckpt = false, qlora = false, lever = false;
  for (const auto& a : t4->advice) {
    ckpt |= a.rfind("turn on gradient_checkpointing", 0) == 0;
    qlora |= a.find("use QLoRA") != std::string::npos;
    lever |= a.rfind("add ", 0) == 0;
    EXPECT_EQ(a.find("replicates"), std::string::npos) << a;  // the pre-ZeRO advice is gone
  }
  EXPECT_FALSE(ckpt);  // 8B LoRA does not fit 16 GB even checkpointed
  EXPECT_TRUE(qlora);
  EXPECT_FALSE(lever);  // the frozen base is replicated: no sharding, 8-bit or GPU count gets it under 16 GB
  // Full 8B on one H100: nothing about micro-batches helps; offloading the optimizer does (the
  // first lever that fits on one GPU), then LoRA.
  Plan f = hw_plan(llama31_8b(), PlanOptions{}, {hw_catalog_find(cat, "H100 SXM")});
  EXPECT_FALSE(f.gpus[0].fits);
  EXPECT_EQ(f.gpus[0].max_micro_batch, 0);
  ASSERT_GE(f.gpus[0].advice.size(), 2u);
  EXPECT_EQ(f.gpus[0].advice[0].rfind("add optimizer_offload=cpu (", 0), 0u) << f.gpus[0].advice[0];
  EXPECT_EQ(f.gpus[0].advice[1].rfind("use LoRA", 0), 0u) << f.gpus[0].advice[1];
  // The text names every GPU.
  std::string text = hw_plan_text(p);
  for (const auto& g : cat) EXPECT_NE(text.find(g.name), std::string::npos) << g.name;
}

// Distillation's teacher: its weights whole, or sharded 1/N (decoder layers sliced, two gathered,
// embedding, head and final norm whole), and what its forward holds beside the student's activations.
TEST(HwPlan, TeacherWholeOrShardedAndItsForward) {
  const ModelConfig teacher = llama31_8b();
  PlanOptions o;
  o.batch_size = 4;
  o.max_length = 128;
  o.gradient_checkpointing = true;
  o.gpus = 2;
  o.shard = PlanShard::shard_full;
  const PlanComponents plain = hw_plan_memory(teacher, o);
  EXPECT_EQ(plain.teacher, 0);
  EXPECT_EQ(plain.teacher_forward, 0);
  o.teacher.present = true;
  o.teacher.config = teacher;
  o.teacher.dtype = "bf16";
  const PlanComponents whole = hw_plan_memory(teacher, o);
  const double N = 8030261248.0;
  EXPECT_DOUBLE_EQ(whole.teacher, 2 * N);  // 14.96 GiB on every rank
  // hidden states (4 x 128 rows x 4096, bf16) + 512 rows of logits per side in float32
  EXPECT_DOUBLE_EQ(whole.teacher_forward, 512.0 * 4096 * 2 + 2.0 * 512 * 128256 * 4);
  // The teacher's weights add to the total; its forward adds to the activations' side of the
  // max(activations + logits, optimizer step) the plan counts (here the optimizer step is larger).
  const double act_side =
      std::max(whole.activations + whole.logits + whole.teacher_forward, whole.optimizer_step) -
      std::max(whole.activations + whole.logits, whole.optimizer_step);
  EXPECT_NEAR(whole.total - plain.total, (whole.teacher + act_side) * 1.05, 1.0);
  o.teacher.sharded = true;
  const PlanComponents sharded = hw_plan_memory(teacher, o);
  // layers: 32 x 218,112,000 = 6,979,584,000 (norms included, the final norm outside);
  // outside: 2 x 525,336,576 embedding and head + 4096 final norm = 1,050,677,248
  const double layers = 6979584000.0, per_layer = 218112000.0, outside = 1050677248.0;
  EXPECT_DOUBLE_EQ(layers + outside, N);
  EXPECT_DOUBLE_EQ(sharded.teacher, (layers / 2 + outside + 2 * per_layer) * 2);
  EXPECT_LT(sharded.teacher, 0.65 * whole.teacher);  // 2 ranks: half the layers, the rest whole
  o.gpus = 1;                                        // one rank: nothing to shard over
  EXPECT_DOUBLE_EQ(hw_plan_memory(teacher, o).teacher, 2 * N);
  // Cached top-k logits: no teacher weights; the micro-batch's 512 tokens x (64 x (2 + 4) + 4) bytes
  // and the student's 512 rows of KD logits in float32.
  o.teacher.cache_k = 64;
  const PlanComponents cached = hw_plan_memory(teacher, o);
  EXPECT_EQ(cached.teacher, 0);
  EXPECT_DOUBLE_EQ(cached.teacher_forward, 512.0 * (64 * 6 + 4) + 512.0 * 128256 * 4);
  o.teacher.cache_k = 0;
  // The teacher's forward counts in the time: 2 N_t + 4 L H Q T more FLOPs a token.
  o.gpus = 2;
  const double with = hw_plan(teacher, o, {}).flops_per_token;
  o.teacher.present = false;
  const double without = hw_plan(teacher, o, {}).flops_per_token;
  EXPECT_DOUBLE_EQ(with - without, 2.0 * hw_param_counts(teacher).matmul + 4.0 * 32 * 32 * 128 * 128);
}

// Time and cost in a plan: the run's tokens x FLOPs per token at the assumed MFU of each GPU's dense
// peak; GPU-hours x price; nothing for a GPU the run does not fit, and no run time without a length.
TEST(HwPlan, TimeAndCostFromTokensFlopsPeakAndMeasuredMfu) {
  auto cat = catalog();
  const GpuSpec h100 = hw_catalog_find(cat, "H100 SXM"), t4 = hw_catalog_find(cat, "T4");
  PlanOptions o = lora_checkpointed();
  o.gradient_accumulation_steps = 8;
  o.max_steps = 1000;
  o.gpus = 2;
  Plan p = hw_plan(llama31_8b(), o, {h100, t4});
  // LoRA at 8B: luatune's measured 8B LoRA MFU, with its source.
  EXPECT_DOUBLE_EQ(p.efficiency.mfu, 0.207);
  EXPECT_NE(p.efficiency.source.find("Llama 3.1 8B LoRA"), std::string::npos);
  EXPECT_DOUBLE_EQ(p.step_tokens, 4.0 * 8 * 2048);
  EXPECT_DOUBLE_EQ(p.run_tokens, 1000.0 * 4 * 8 * 2048 * 2);
  const FlopsPerToken fpt =
      hw_flops_per_token(llama31_8b(), PlanMethod::method_lora, p.trainable, 2048, true);
  EXPECT_DOUBLE_EQ(p.flops_per_token, fpt.model);
  const double flops_s = h100.bf16_tflops * 1e12 * 0.207;
  const GpuFit& f = p.gpus[0];
  ASSERT_TRUE(f.fits);
  EXPECT_NEAR(f.step_s, 65536.0 * fpt.model / flops_s, 1e-9);
  EXPECT_NEAR(f.run_hours, 1000 * f.step_s / 3600, 1e-9);  // each GPU does its half of the tokens
  EXPECT_NEAR(f.cost_usd, f.run_hours * 2 * h100.price_per_hour, 1e-9);
  // The T4 (16 GB) does not hold micro-batch 4 of an 8B LoRA: no time, its advice instead.
  ASSERT_FALSE(p.gpus[1].fits);
  EXPECT_LT(p.gpus[1].step_s, 0);
  EXPECT_LT(p.gpus[1].cost_usd, 0);
  // Without a length the step time stays, the run's time and cost do not.
  o.max_steps = 0;
  Plan q = hw_plan(llama31_8b(), o, {h100});
  EXPECT_NEAR(q.gpus[0].step_s, f.step_s, 1e-12);
  EXPECT_LT(q.gpus[0].run_hours, 0);
  EXPECT_LT(q.gpus[0].cost_usd, 0);
  // Given tokens instead of steps (epochs over data): the same arithmetic.
  o.run_tokens = 1e9;
  Plan t = hw_plan(llama31_8b(), o, {h100});
  EXPECT_NEAR(t.gpus[0].run_hours, 1e9 / 2 * fpt.model / flops_s / 3600, 1e-9);
  // Full fine-tuning at 8B takes the only full run measured (1B's), and says so.
  EXPECT_DOUBLE_EQ(hw_plan_efficiency(PlanMethod::method_full, 8000000000).mfu, 0.204);
  EXPECT_NE(hw_plan_efficiency(PlanMethod::method_full, 8000000000).source.find("no larger full run"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(hw_plan_efficiency(PlanMethod::method_qlora, 8000000000).mfu, 0.206);
  EXPECT_DOUBLE_EQ(hw_plan_efficiency(PlanMethod::method_lora, 1200000000).mfu, 0.137);
}

TEST(HwPlan, MaxMicroBatchIsTheLargestThatFits) {
  PlanOptions o;
  o.method = PlanMethod::method_lora;
  o.gradient_checkpointing = true;
  int64_t b = hw_max_micro_batch(llama31_8b(), o, 80);
  ASSERT_GT(b, 1);
  o.batch_size = b;
  EXPECT_LE(hw_plan_memory(llama31_8b(), o).total / kGiB, 80);
  o.batch_size = b + 1;
  EXPECT_GT(hw_plan_memory(llama31_8b(), o).total / kGiB, 80);
}

// ---------------------------------------------------------------------------------------------
// ZeRO sharding, 8-bit moments, CPU offload (host/dist/zero.cpp, host/train/optim.cpp): Llama 3.1 8B.
// Groups: one per decoder layer, 218,103,808 projection + 2 * 4096 norm = 218,112,000 elements, and
// the rest, 2 * 525,336,576 + 4096 = 1,050,677,248 (embedding, lm_head, final norm).

constexpr double kN8B = 8030261248.0;
constexpr double kLayer8B = 218112000.0, kOutside8B = 1050677248.0;

PlanOptions sharded(PlanShard s, int64_t gpus) {
  PlanOptions o;  // full, bf16 + fp32 masters, AdamW, batch_size 1, max_length 2048
  o.shard = s;
  o.gpus = gpus;
  return o;
}

TEST(HwPlanZero, EachStageShardsItsTermsToOneNth) {
  const PlanComponents none = hw_plan_memory(llama31_8b(), sharded(PlanShard::shard_none, 8));
  EXPECT_DOUBLE_EQ(none.master_weights, 4 * kN8B);  // replicated: everything whole
  EXPECT_DOUBLE_EQ(none.optimizer_states, 8 * kN8B);
  EXPECT_DOUBLE_EQ(none.gradients, 2 * kN8B);
  EXPECT_DOUBLE_EQ(none.comm_buckets, kHwDdpBucketBytes);
  // 8 ranks divide both groups exactly: 218,112,000 / 8 = 27,264,000 and 1,050,677,248 / 8 =
  // 131,334,656; 32 * 27,264,000 + 131,334,656 = 1,003,782,656 = N / 8, no padding.
  const double own = kN8B / 8;
  const PlanComponents z1 = hw_plan_memory(llama31_8b(), sharded(PlanShard::shard_optimizer, 8));
  EXPECT_DOUBLE_EQ(z1.weights, 2 * kN8B);
  EXPECT_DOUBLE_EQ(z1.master_weights, none.master_weights / 8);
  EXPECT_DOUBLE_EQ(z1.optimizer_states, none.optimizer_states / 8);
  EXPECT_DOUBLE_EQ(z1.gradients, 2 * kN8B + 4 * own);  // whole + the fp32 slice the reduce-scatter sums into
  EXPECT_DOUBLE_EQ(z1.comm_buckets, 2 * kLayer8B);     // one layer's flat buffer in bf16
  EXPECT_DOUBLE_EQ(z1.gather_buffers, 0);
  // ZeRO-2: without recomputed layers the gradients are reduced when the micro-batch ends (whole
  // until then); with them, layer by layer: one layer's whole gradients in flight.
  const PlanComponents z2 = hw_plan_memory(llama31_8b(), sharded(PlanShard::shard_gradients, 8));
  EXPECT_DOUBLE_EQ(z2.master_weights, 4 * own);
  EXPECT_DOUBLE_EQ(z2.optimizer_states, 8 * own);
  EXPECT_DOUBLE_EQ(z2.gradients, 2 * kN8B + 4 * own);
  PlanOptions ck = sharded(PlanShard::shard_gradients, 8);
  ck.gradient_checkpointing = true;
  const PlanComponents z2c = hw_plan_memory(llama31_8b(), ck);
  EXPECT_DOUBLE_EQ(z2c.gradients, 4 * own + 2 * kLayer8B);
  EXPECT_DOUBLE_EQ(z2c.weights, 2 * kN8B);
  // ZeRO-3: the layers' weights sharded at rest, the embedding, head and final norm whole; two
  // layers gathered; layers always recomputed (the same activations as gradient_checkpointing).
  const PlanComponents z3 = hw_plan_memory(llama31_8b(), sharded(PlanShard::shard_full, 8));
  EXPECT_DOUBLE_EQ(z3.weights, (32 * kLayer8B / 8 + kOutside8B) * 2);
  EXPECT_DOUBLE_EQ(z3.master_weights, 4 * own);
  EXPECT_DOUBLE_EQ(z3.optimizer_states, 8 * own);
  EXPECT_DOUBLE_EQ(z3.gradients, 4 * own + 2 * kLayer8B);
  EXPECT_DOUBLE_EQ(z3.gather_buffers, 2 * 2 * kLayer8B);
  EXPECT_DOUBLE_EQ(z3.comm_buckets, 2 * kLayer8B);
  PlanOptions ckpt;
  ckpt.gradient_checkpointing = true;
  EXPECT_DOUBLE_EQ(z3.activations, hw_plan_memory(llama31_8b(), ckpt).activations);
  // Each stage lowers the total.
  EXPECT_LT(z1.total, none.total);
  EXPECT_LT(z2c.total, z1.total);
  EXPECT_LT(z3.total, z2c.total);
}

TEST(HwPlanZero, PaddingAndFrozenBases) {
  // 7 ranks: slices are ceil(218,112,000 / 7) = 31,158,858 and ceil(1,050,677,248 / 7) = 150,096,750;
  // 32 * 31,158,858 + 150,096,750 = 1,147,180,206 elements, 28 more than N / 7.
  const PlanComponents z = hw_plan_memory(llama31_8b(), sharded(PlanShard::shard_optimizer, 7));
  EXPECT_DOUBLE_EQ(z.optimizer_states, 8 * 1147180206.0);
  EXPECT_DOUBLE_EQ(z.master_weights, 4 * 1147180206.0);
  EXPECT_NEAR(z.master_weights / (4 * kN8B / 7), 1, 1e-7);
  // LoRA / QLoRA: nothing shards (the adapters stay replicated, the frozen base whole), as the trainer.
  for (PlanMethod method : {PlanMethod::method_lora, PlanMethod::method_qlora}) {
    PlanOptions o;
    o.method = method;
    o.lora_targets = {"all-linear"};
    o.gradient_checkpointing = true;
    const PlanComponents base = hw_plan_memory(llama31_8b(), o);
    o.shard = PlanShard::shard_full;
    o.gpus = 8;
    const PlanComponents z3 = hw_plan_memory(llama31_8b(), o);
    EXPECT_DOUBLE_EQ(z3.weights, base.weights);
    EXPECT_DOUBLE_EQ(z3.adapters, base.adapters);
    EXPECT_DOUBLE_EQ(z3.optimizer_states, base.optimizer_states);
    EXPECT_DOUBLE_EQ(z3.gather_buffers, 0);
    EXPECT_EQ(plan_component_note(o, "adapters"),
              "replicated: adapters are not sharded (faster at their size)");
  }
}

TEST(HwPlanZero, EightBitMomentsAreAQuarter) {
  // Every tensor of Llama 3.1 8B has >= 4096 elements and a multiple of 256: per element 2 bytes
  // of codes + 2 * 4 bytes of absmax per 256 = 2.03125 bytes, against AdamW's 8 (0.254).
  PlanOptions o;
  o.optimizer = "adamw8bit";
  const PlanComponents m = hw_plan_memory(llama31_8b(), o);
  EXPECT_DOUBLE_EQ(m.optimizer_states, 2.03125 * kN8B);
  EXPECT_NEAR(m.optimizer_states / hw_plan_memory(llama31_8b(), PlanOptions{}).optimizer_states, 0.254,
              0.001);
  // Sharded: per group slice (27,264,000 and 131,334,656 are multiples of 256 too).
  PlanOptions z = sharded(PlanShard::shard_full, 8);
  z.optimizer = "adamw8bit";
  EXPECT_DOUBLE_EQ(hw_plan_memory(llama31_8b(), z).optimizer_states, 2.03125 * kN8B / 8);
  // Tensors under 4096 elements keep float32 moments: a tiny model costs what AdamW costs.
  ModelConfig tiny =
      model_config_with("llama", R"({"vocab_size": 100, "hidden_size": 8, "intermediate_size": 16,
      "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "tie_word_embeddings": true})",
                        "tiny");
  PlanOptions t;
  t.optimizer = "adamw8bit";
  EXPECT_DOUBLE_EQ(hw_plan_memory(tiny, t).optimizer_states,
                   hw_plan_memory(tiny, PlanOptions{}).optimizer_states);
}

TEST(HwPlanZero, OffloadMovesMastersAndMomentsToHostRam) {
  PlanOptions o = sharded(PlanShard::shard_full, 8);
  const PlanComponents gpu = hw_plan_memory(llama31_8b(), o);
  EXPECT_DOUBLE_EQ(gpu.host_per_node, 0);
  o.optimizer_offload = "cpu";
  const PlanComponents off = hw_plan_memory(llama31_8b(), o);
  EXPECT_DOUBLE_EQ(off.master_weights, 0);
  EXPECT_DOUBLE_EQ(off.optimizer_states, 0);
  EXPECT_DOUBLE_EQ(off.host_master_weights, gpu.master_weights);      // 4 N / 8
  EXPECT_DOUBLE_EQ(off.host_optimizer_states, gpu.optimizer_states);  // 8 N / 8
  EXPECT_DOUBLE_EQ(off.host_grad_staging, 4 * kN8B / 8);              // the fp32 gradient slice, pinned
  EXPECT_DOUBLE_EQ(off.gradients, 2 * kLayer8B);                      // on the GPU: one layer in flight
  EXPECT_EQ(off.ranks_per_node, 8);
  EXPECT_DOUBLE_EQ(off.host_per_node, 8 * (4 + 8 + 4) * kN8B / 8);  // 16 N: 119.7 GiB
  EXPECT_NEAR(gpu.total - off.total, (gpu.master_weights + gpu.optimizer_states + 4 * kN8B / 8) * 1.05, 1e6);
  o.gpus_per_node = 4;  // two nodes of four
  EXPECT_DOUBLE_EQ(hw_plan_memory(llama31_8b(), o).host_per_node, off.host_per_node / 2);
  // Unsharded: every master and moment on the host; each gradient copied down in turn (the
  // largest, the embedding's, in bf16).
  PlanOptions u;
  u.optimizer_offload = "cpu";
  const PlanComponents h = hw_plan_memory(llama31_8b(), u);
  EXPECT_DOUBLE_EQ(h.host_master_weights, 4 * kN8B);
  EXPECT_DOUBLE_EQ(h.host_optimizer_states, 8 * kN8B);
  EXPECT_DOUBLE_EQ(h.host_grad_staging, 2 * 525336576.0);
  EXPECT_EQ(h.ranks_per_node, 1);
  std::string text = hw_plan_text(hw_plan(llama31_8b(), o, {hw_catalog_find(catalog(), "A100 40GB")}));
  EXPECT_NE(
      text.find("host RAM (pinned, optimizer_offload=cpu): per rank 14.96 GiB (fp32 masters 3.74 + optimizer "
                "moments 7.48 + fp32 gradient staging 3.74); per node 4 ranks x 14.96 = 59.83 GiB"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("0.00  (in host RAM: optimizer_offload=cpu)"), std::string::npos) << text;
}

// The recipes' defaults: llama31_sheared (batch_size 4, max_length 128, gradient_checkpointing) and
// full_finetune (batch_size 4, max_length 2048, gradient_checkpointing), 8B, bf16 + fp32 masters, AdamW.
PlanOptions sheared_8b(int64_t gpus, PlanShard s) {
  PlanOptions o = sharded(s, gpus);
  o.batch_size = 4;
  o.max_length = 128;
  o.gradient_checkpointing = true;
  return o;
}

TEST(HwPlanZero, SeedJobsFit) {
  auto cat = catalog();
  const GpuSpec& a100_80 = hw_catalog_find(cat, "A100 80GB");
  const GpuSpec& a100_40 = hw_catalog_find(cat, "A100 40GB");
  Plan sheared = hw_plan(llama31_8b(), sheared_8b(2, PlanShard::shard_full), {a100_80});
  EXPECT_TRUE(sheared.gpus[0].fits) << hw_plan_text(sheared);
  EXPECT_GT(hw_plan_memory(llama31_8b(), sheared_8b(1, PlanShard::shard_none)).total / kGiB, 130);
  PlanOptions ft = sharded(PlanShard::shard_full, 8);
  ft.batch_size = 4;
  ft.gradient_checkpointing = true;
  Plan full = hw_plan(llama31_8b(), ft, {a100_40});
  EXPECT_TRUE(full.gpus[0].fits) << hw_plan_text(full);
  ft.shard = PlanShard::shard_none;
  EXPECT_FALSE(hw_plan(llama31_8b(), ft, {a100_40}).gpus[0].fits);
}

TEST(HwPlanZero, AdviceNamesTheSmallestChangeThatFits) {
  auto cat = catalog();
  auto advice = [&](const PlanOptions& o, const char* gpu) {
    Plan p = hw_plan(llama31_8b(), o, {hw_catalog_find(cat, gpu)});
    EXPECT_FALSE(p.gpus[0].fits);
    for (const auto& a : p.gpus[0].advice)
      if (a.rfind("add ", 0) == 0) return a;
    return std::string("(none)");
  };
  auto fits = [&](PlanOptions o, PlanShard s, double gb) {
    o.shard = s;
    return hw_plan_memory(llama31_8b(), o).total / kGiB <= gb;
  };
  // 2 x A100 80GB: neither ZeRO-1 nor ZeRO-2 fits, ZeRO-3 does.
  PlanOptions two = sheared_8b(2, PlanShard::shard_none);
  EXPECT_FALSE(fits(two, PlanShard::shard_optimizer, 80));
  EXPECT_FALSE(fits(two, PlanShard::shard_gradients, 80));
  EXPECT_TRUE(fits(two, PlanShard::shard_full, 80));
  EXPECT_EQ(advice(two, "A100 80GB").rfind("add shard=full (", 0), 0u) << advice(two, "A100 80GB");
  // 8 GPUs: ZeRO-1 is enough on 80 GB, ZeRO-2 on 40 GB; ZeRO-3 + 8-bit moments on 24 GB; offload on 16.
  PlanOptions eight = sheared_8b(8, PlanShard::shard_none);
  EXPECT_EQ(advice(eight, "A100 80GB").rfind("add shard=optimizer (", 0), 0u) << advice(eight, "A100 80GB");
  EXPECT_EQ(advice(eight, "A100 40GB").rfind("add shard=gradients (", 0), 0u) << advice(eight, "A100 40GB");
  EXPECT_EQ(advice(eight, "L4").rfind("add shard=full optimizer=adamw8bit (", 0), 0u) << advice(eight, "L4");
  EXPECT_EQ(advice(eight, "T4").rfind("add shard=full optimizer_offload=cpu (", 0), 0u)
      << advice(eight, "T4");
  // One GPU: sharding needs ranks; offload fits 80 GB, and 24 GB takes a second GPU too.
  PlanOptions one = sheared_8b(1, PlanShard::shard_none);
  EXPECT_EQ(advice(one, "A100 80GB").rfind("add optimizer_offload=cpu (", 0), 0u) << advice(one, "A100 80GB");
  EXPECT_EQ(advice(one, "L4").rfind("add nproc=2 shard=gradients optimizer_offload=cpu (", 0), 0u)
      << advice(one, "L4");
  EXPECT_NE(advice(one, "L4").find("runner --nproc 2"), std::string::npos);
}

TEST(HwPlanZero, ShardNames) {
  EXPECT_EQ(plan_shard_parse("FULL_SHARD"), PlanShard::shard_full);
  EXPECT_EQ(plan_shard_parse("SHARD_GRAD_OP"), PlanShard::shard_gradients);
  EXPECT_EQ(plan_shard_parse("NO_SHARD"), PlanShard::shard_none);
  EXPECT_EQ(plan_shard_parse("1"), PlanShard::shard_optimizer);
  EXPECT_EQ(plan_shard_name(PlanShard::shard_gradients), "gradients");
  EXPECT_EQ(error_of([] { plan_shard_parse("zero3"); }),
            "hw.plan: unknown shard 'zero3'\n  HINT: expected \"none\", \"optimizer\", \"gradients\" or "
            "\"full\" (or "
            "NO_SHARD, SHARD_GRAD_OP, FULL_SHARD, 0-3)");
  PlanOptions o;
  o.optimizer = "adam";
  EXPECT_EQ(error_of([&] { hw_plan_memory(llama31_8b(), o); }),
            "hw.plan: optimizer must be \"adamw\", \"adamw8bit\" or \"sgd\", got \"adam\"");
}

// ---------------------------------------------------------------------------------------------
// FLOPs, MFU, cost, projection

TEST(HwProfile, MfuMatchesHardwareMdCheck) {
  // 6 * 7,504,924,672 + 12 * 32 * 32 * 128 * 8192 = 45,029,548,032 + 12,884,901,888 = 57.9 GFLOP/token
  FlopsPerToken f = hw_flops_per_token(llama31_8b(), PlanMethod::method_full, 0, 8192, false);
  EXPECT_DOUBLE_EQ(f.model, 57914449920.0);
  ProfileInput in = measured(5762, 1, 8192);
  in.peak_tflops = 989;
  Profile p = hw_profile(llama31_8b(), in);
  EXPECT_NEAR(p.mfu, 0.337, 0.0005);  // torchtitan's 5,762 TPS on H100 -> 33.7 %
}

TEST(HwProfile, LoraConvention) {
  // Llama-3-8B at T=2048: full 6N + attention = 45,029,548,032 + 3,221,225,472 = 48.25 GFLOP/token;
  // LoRA 4N + attention = 30,019,698,688 + 3,221,225,472 = 33.24 (docs/hardware.md's figure, no adapter
  // term); with 6 * 41,943,040 adapter FLOPs: 33.49.
  EXPECT_DOUBLE_EQ(hw_flops_per_token(llama31_8b(), PlanMethod::method_full, 0, 2048, false).model,
                   48250773504.0);
  EXPECT_DOUBLE_EQ(hw_flops_per_token(llama31_8b(), PlanMethod::method_lora, 0, 2048, false).model,
                   33240924160.0);
  EXPECT_DOUBLE_EQ(hw_flops_per_token(llama31_8b(), PlanMethod::method_lora, 41943040, 2048, false).model,
                   33492582400.0);
  // HFU with checkpointing adds one forward: 2N + 4LHQT
  FlopsPerToken h = hw_flops_per_token(llama31_8b(), PlanMethod::method_full, 0, 2048, true);
  EXPECT_DOUBLE_EQ(h.hardware - h.model, 2 * 7504924672.0 + 4 * 32.0 * 32 * 128 * 2048);
}

TEST(HwProfile, CostAndDollarsPerMillionTokens) {
  ProfileInput in = measured(1e6, 3600, 2048);
  in.steps = 100;
  in.gpus = 2;
  in.price_per_hour = 2.0;
  Profile p = hw_profile(llama31_8b(), in);
  EXPECT_DOUBLE_EQ(p.tokens_per_s, 1e6 / 3600);
  EXPECT_DOUBLE_EQ(p.step_time_s, 36);
  EXPECT_DOUBLE_EQ(p.gpu_hours, 2);     // 1 h x 2 GPUs
  EXPECT_DOUBLE_EQ(p.cost_usd, 4);      // 2 GPU-h x $2
  EXPECT_DOUBLE_EQ(p.usd_per_mtok, 4);  // $4 / 1M tokens
  EXPECT_LT(p.mfu, 0);                  // no peak given: no MFU
}

TEST(HwProfile, ProjectionScalesByPeakAndMarksKinds) {
  auto cat = catalog();
  // 40 % MFU on the A100 for 100 s: tokens/s = 0.4 * 312e12 / 48.25e9 = 2,586.5
  ProfileInput in = measured(0.4 * 312e12 / 48250773504.0 * 100, 100, 2048);
  in.gpu = "A100 80GB";
  in.device = "NVIDIA A100-SXM4-80GB";
  in.peak_tflops = 312;
  Profile p = hw_profile(llama31_8b(), in);
  EXPECT_NEAR(p.mfu, 0.4, 1e-12);
  ProjectOptions po;
  po.tokens = 1e9;
  auto rows = hw_project(&p, llama31_8b(), cat, po);
  ASSERT_EQ(rows.size(), cat.size());
  for (const auto& r : rows) {
    if (r.gpu == "A100 80GB") {
      EXPECT_EQ(r.kind, "measured");
      EXPECT_NEAR(r.tokens_per_s, p.tokens_per_s, 1e-9);
    } else {
      EXPECT_EQ(r.kind, "projected") << r.gpu;
    }
    if (r.gpu == "H100 SXM") {
      // compute-bound: the same 40 % of 989 -> x 989/312
      EXPECT_EQ(r.bound, "compute");
      EXPECT_NEAR(r.tokens_per_s, p.tokens_per_s * 989 / 312, 1e-6);
      EXPECT_NEAR(r.hours, 1e9 / r.tokens_per_s / 3600, 1e-9);
      EXPECT_NEAR(r.cost_usd, r.hours * 3.99, 1e-9);
      EXPECT_NEAR(r.usd_per_mtok, r.cost_usd / 1e3, 1e-12);
    }
  }
  // A plan that does not fit on a GPU: that row has no time.
  Plan plan = hw_plan(llama31_8b(), PlanOptions{}, cat);  // full 8B: fits nowhere but MI300X / H200
  po.plan = &plan;
  for (const auto& r : hw_project(&p, llama31_8b(), cat, po)) {
    if (!r.fits) {
      EXPECT_EQ(r.kind, "planned") << r.gpu;
      EXPECT_LT(r.tokens_per_s, 0);
    }
  }
  // Measured on a CPU: every row is a projection at the default MFU.
  in.gpu = "";
  in.device = "cpu";
  in.peak_tflops = 0;
  Profile cpu = hw_profile(llama31_8b(), in);
  po.plan = nullptr;
  for (const auto& r : hw_project(&cpu, llama31_8b(), cat, po)) {
    EXPECT_EQ(r.kind, "projected");
    EXPECT_NE(r.note.find("assumes MFU 35 %"), std::string::npos) << r.note;
  }
  // No profile: memory only.
  for (const auto& r : hw_project(nullptr, llama31_8b(), cat, po)) EXPECT_EQ(r.kind, "planned");
}

// ---------------------------------------------------------------------------------------------
// Catalog

TEST(HwCatalog, ShippedFileLoadsAndMatchesDeviceNames) {
  auto cat = catalog();
  std::vector<std::string> names;
  for (const auto& g : cat) {
    names.push_back(g.name);
    EXPECT_GT(g.price_per_hour, 0) << g.name;
    EXPECT_FALSE(g.price_source.empty()) << g.name;
    EXPECT_FALSE(g.price_date.empty()) << g.name;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"H100 SXM", "H100 PCIe", "H200", "A100 80GB", "A100 40GB",
                                             "L40S", "L4", "A10G", "RTX 4090", "RTX A6000", "T4", "MI300X"}));
  auto match = [&](const char* dev) {
    const GpuSpec* g = hw_catalog_match(cat, dev);
    return g ? g->name : std::string("-");
  };
  EXPECT_EQ(match("NVIDIA H100 80GB HBM3"), "H100 SXM");
  EXPECT_EQ(match("NVIDIA H100 PCIe"), "H100 PCIe");
  EXPECT_EQ(match("NVIDIA A100-SXM4-40GB"), "A100 40GB");
  EXPECT_EQ(match("NVIDIA A100-SXM4-80GB"), "A100 80GB");
  EXPECT_EQ(match("NVIDIA L40S"), "L40S");
  EXPECT_EQ(match("NVIDIA L4"), "L4");
  EXPECT_EQ(match("Tesla T4"), "T4");
  EXPECT_EQ(match("NVIDIA GeForce RTX 4090"), "RTX 4090");
  EXPECT_EQ(match("Intel(R) Xeon(R) CPU"), "-");
  const GpuSpec& t4 = hw_catalog_find(cat, "T4");
  EXPECT_FALSE(t4.bf16);
  EXPECT_EQ(t4.peak_tflops("bf16"), 65);  // fp16 tensor cores only
}

TEST(HwCatalog, BadFilesNameFileEntryAndField) {
  EXPECT_EQ(error_of([] {
              hw_catalog_parse(
                  R"({"gpus": [{"name": "A", "memory_gb": 1, "bandwidth_gbs": 1, "bf16_tflops": 1,
                                 "fp16_tflops": 1, "price_per_hour": 1},
                                {"name": "B", "memory_gb": "80", "bandwidth_gbs": 1}]})",
                  "my.json");
            }),
            "hw.catalog: my.json: entry 2 (\"B\"): field 'memory_gb' must be a number");
  EXPECT_EQ(
      error_of([] { hw_catalog_parse(R"({"gpus": [{"name": "A", "memroy_gb": 1}]})", "my.json"); }),
      "hw.catalog: my.json: entry 1 (\"A\"): unknown field 'memroy_gb' (fields: name, aliases, memory_gb, "
      "bandwidth_gbs, bf16_tflops, fp16_tflops, bf16, interconnect, price_per_hour, price_source, "
      "price_date, "
      "notes)");
  EXPECT_EQ(error_of([] { hw_catalog_parse("[1]", "x.json"); }),
            "hw.catalog: x.json: expected an object with a \"gpus\" list (see data/gpu_catalog.json)");
  EXPECT_EQ(error_of([] { hw_catalog_load("/nonexistent/cat.json"); }),
            "hw.catalog: no catalog file '/nonexistent/cat.json'");
}

// ---------------------------------------------------------------------------------------------
// Recipe config -> plan, presets, the NVML-less monitor

TEST(HwPlanRequest, ReadsTheShippedRecipesKeys) {
  nlohmann::json cfg = {{"base_model", "/nowhere"},
                        {"dtype", "bf16"},
                        {"batch_size", 4},
                        {"max_length", 1024},
                        {"gradient_checkpointing", true},
                        {"lora", {{"r", 8}, {"dropout", 0.0}, {"targets", {"q_proj", "v_proj"}}}}};
  PlanExtras ex;
  ex.model_preset = "llama3.1-8b";
  PlanRequest r = hw_plan_request(cfg, "recipes/lora_finetune.lua", ex);
  EXPECT_EQ(r.options.method, PlanMethod::method_lora);
  EXPECT_EQ(r.options.batch_size, 4);
  EXPECT_EQ(r.options.max_length, 1024);
  EXPECT_TRUE(r.options.gradient_checkpointing);
  EXPECT_EQ(r.options.lora_r, 8);
  EXPECT_EQ(r.options.lora_targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(hw_param_counts(r.model).total, 8030261248);
  // One name per setting, the recipes' (and the Lua API's): no other spelling is guessed at.
  nlohmann::json other = {{"base_model", "/nowhere"},
                          {"checkpoint_layers", true},
                          {"lora_r", 4},
                          {"micro_batch_size", 9},
                          {"dtype", "fp32"}};
  PlanRequest o = hw_plan_request(other, "recipes/lora_finetune.lua", ex);
  EXPECT_FALSE(o.options.gradient_checkpointing);
  EXPECT_EQ(o.options.lora_r, 16);
  EXPECT_EQ(o.options.batch_size, 1);
  EXPECT_EQ(o.options.dtype, "fp32");
  ex.model_preset = "";
  EXPECT_EQ(
      error_of([&] { hw_plan_request(cfg, "x.lua", ex); }),
      "plan: base_model '/nowhere' has no config.json to read the model's shape from\n  HINT: point "
      "base_model= at a Hugging Face model directory, or pass model_preset=llama3.1-8b|mistral-7b|gemma2-9b");
  nlohmann::json full = {{"base_model", "/nowhere"}, {"master_weights", false}};
  ex.model_preset = "gemma2-9b";
  PlanRequest f = hw_plan_request(full, "recipes/full_finetune.lua", ex);
  EXPECT_EQ(f.options.method, PlanMethod::method_full);
  EXPECT_FALSE(f.options.master_weights);
  EXPECT_EQ(hw_param_counts(f.model).total, 9241705984);
}

// The run's length for its time: max_steps and gradient_accumulation_steps, else epochs over the data
// file's bytes at 4 bytes a token (said to be an estimate); neither: no length.
TEST(HwPlanRequest, RunLengthFromStepsOrEpochsOverTheData) {
  PlanExtras ex;
  ex.model_preset = "llama3.1-8b";
  nlohmann::json cfg = {{"base_model", "/nowhere"}, {"max_steps", 500}, {"gradient_accumulation_steps", 8}};
  PlanRequest r = hw_plan_request(cfg, "recipes/full_finetune.lua", ex);
  EXPECT_EQ(r.options.max_steps, 500);
  EXPECT_EQ(r.options.gradient_accumulation_steps, 8);
  const std::string data = testing::TempDir() + "plan_run_length.jsonl";
  file_write_atomic(data, std::string(4000000, 'x'));
  nlohmann::json epochs = {
      {"base_model", "/nowhere"}, {"max_steps", 0}, {"num_train_epochs", 3}, {"data", data}};
  PlanRequest e = hw_plan_request(epochs, "recipes/full_finetune.lua", ex);
  EXPECT_EQ(e.options.max_steps, 0);
  EXPECT_DOUBLE_EQ(e.options.run_tokens, 3.0 * 4000000 / 4);
  EXPECT_NE(e.options.run_tokens_source.find("estimated: 3 epochs of " + data + "'s 4 MB at 4 bytes a token"),
            std::string::npos)
      << e.options.run_tokens_source;
  epochs["data"] = "/nowhere/data.jsonl";
  EXPECT_DOUBLE_EQ(hw_plan_request(epochs, "recipes/full_finetune.lua", ex).options.run_tokens, 0);
  std::remove(data.c_str());
}

// llama31_sheared plans two phases: the whole model with its masks, then the model cut to the target
// shape trained beside the frozen whole model (distill = true), the steps split by prune_fraction.
TEST(HwPlanRequest, ShearedRecipePlansPruningThenRecoveryWithItsTeacher) {
  PlanExtras ex;
  ex.model_preset = "llama3.1-8b";
  ex.gpus = 2;
  nlohmann::json cfg = {{"base_model", "/nowhere"},
                        {"dtype", "bf16"},
                        {"max_steps", 1000},
                        {"prune_fraction", 0.3},
                        {"target_layer_sparsity", 0.2},
                        {"target_head_sparsity", 0.3},
                        {"target_hidden_sparsity", 0.1},
                        {"target_intermediate_sparsity", 0.4},
                        {"round_to", 128},
                        {"distill", true},
                        {"teacher_dtype", "fp32"},
                        {"teacher_shard", true}};
  PlanRequest r = hw_plan_request(cfg, "recipes/llama31_sheared.lua", ex);
  ASSERT_EQ(r.phases.size(), 2u);
  EXPECT_EQ(r.phases[0].name, "pruning");
  EXPECT_EQ(r.phases[0].model.num_layers, 32);
  EXPECT_FALSE(r.phases[0].options.teacher.present);
  EXPECT_EQ(r.phases[0].options.max_steps, 300);
  EXPECT_FALSE(r.phases[0].options.adapters_ok);
  const PlanPhase& rec = r.phases[1];
  EXPECT_EQ(rec.name, "recovery");
  // docs/pruning.md's rounding: 32 x 0.8 = 25.6 -> 26 layers; 4 per group x 0.7 = 2.8 -> 3, x 8 groups
  // = 24 heads; 4096 x 0.9 = 3686.4 -> 3712 (a multiple of 128); 14336 x 0.6 = 8601.6 -> 8576.
  EXPECT_EQ(dims(rec.model), (std::vector<int64_t>{26, 24, 8, 3712, 8576}));
  EXPECT_EQ(rec.options.max_steps, 700);
  EXPECT_TRUE(rec.options.teacher.present);
  EXPECT_EQ(rec.options.teacher.config.num_layers, 32);
  EXPECT_EQ(rec.options.teacher.dtype, "fp32");
  EXPECT_TRUE(rec.options.teacher.sharded);
  EXPECT_NE(rec.what.find("sharded across the 2 ranks (teacher_shard=true)"), std::string::npos) << rec.what;
  cfg["teacher_cache"] = "/tmp/cache";
  cfg["teacher_cache_k"] = 32;
  const PlanPhase cached = hw_plan_request(cfg, "recipes/llama31_sheared.lua", ex).phases[1];
  EXPECT_EQ(cached.options.teacher.cache_k, 32);
  EXPECT_FALSE(cached.options.teacher.sharded);
  EXPECT_NE(cached.what.find("cached top-32 bf16 logits (teacher_cache: no teacher on the GPU)"),
            std::string::npos);
  cfg["distill"] = false;
  EXPECT_FALSE(hw_plan_request(cfg, "recipes/llama31_sheared.lua", ex).phases[1].options.teacher.present);
  // Other recipes keep one plan.
  EXPECT_TRUE(hw_plan_request(cfg, "recipes/full_finetune.lua", ex).phases.empty());
}

// minitron_prune_distill: one phase, the cut model (kept counts, or shares to remove) distilled from
// the whole model for distill.max_steps steps.
TEST(HwPlanRequest, MinitronPlansItsDistillationOfTheCutModel) {
  PlanExtras ex;
  ex.model_preset = "llama3.1-8b";
  nlohmann::json cfg = {
      {"base_model", "/nowhere"},
      {"shape", {{"hidden", 3072}, {"intermediate", 9216}, {"heads", 0}, {"kv_heads", 0}, {"layers", 0}}},
      {"sparsity", {{"hidden", 0}, {"intermediate", 0}, {"heads", 0}, {"layers", 0}}},
      {"teacher_shard", false},
      {"distill", {{"max_steps", 300}, {"gradient_accumulation_steps", 4}}}};
  PlanRequest r = hw_plan_request(cfg, "recipes/minitron_prune_distill.lua", ex);
  ASSERT_EQ(r.phases.size(), 1u);
  const PlanPhase& d = r.phases[0];
  EXPECT_EQ(d.name, "distillation");
  EXPECT_EQ(dims(d.model), (std::vector<int64_t>{32, 32, 8, 3072, 9216}));  // heads kept (0: not cut)
  EXPECT_EQ(d.options.max_steps, 300);
  EXPECT_EQ(d.options.gradient_accumulation_steps, 4);
  EXPECT_TRUE(d.options.teacher.present);
  EXPECT_EQ(d.options.teacher.config.hidden_size, 4096);
  EXPECT_FALSE(d.options.adapters_ok);  // a pruning job
  // Shares instead: a quarter of the layers removed.
  cfg["shape"]["hidden"] = 0;
  cfg["shape"]["intermediate"] = 0;
  cfg["sparsity"]["layers"] = 0.25;
  EXPECT_EQ(hw_plan_request(cfg, "recipes/minitron_prune_distill.lua", ex).phases[0].model.num_layers, 24);
}

TEST(HwPlanRequest, ShardOptimizerAndOffloadFromConfigOrPlanKeys) {
  nlohmann::json cfg = {{"base_model", "/nowhere"},
                        {"shard", "SHARD_GRAD_OP"},
                        {"optimizer", "adamw8bit"},
                        {"optimizer_offload", "cpu"}};
  PlanExtras ex;
  ex.model_preset = "llama3.1-8b";
  PlanRequest r = hw_plan_request(cfg, "recipes/full_finetune.lua", ex);
  EXPECT_EQ(r.options.shard, PlanShard::shard_gradients);
  EXPECT_EQ(r.options.optimizer, "adamw8bit");
  EXPECT_EQ(r.options.optimizer_offload, "cpu");
  // Plan's own keys win over the config; a key the recipe does not declare gets a note.
  EXPECT_TRUE(hw_plan_extra_set(&ex, "shard", "3"));
  EXPECT_TRUE(hw_plan_extra_set(&ex, "nproc", "4"));
  EXPECT_FALSE(hw_plan_extra_set(&ex, "lr", "1e-5"));
  r = hw_plan_request(cfg, "recipes/full_finetune.lua", ex);
  EXPECT_EQ(r.options.shard, PlanShard::shard_full);
  EXPECT_EQ(r.options.gpus, 4);
  PlanRequest bare = hw_plan_request({{"base_model", "/nowhere"}}, "recipes/full_finetune.lua", ex);
  EXPECT_EQ(bare.options.optimizer, "adamw");
  ASSERT_FALSE(bare.notes.empty());
  EXPECT_EQ(
      bare.notes.back(),
      "note: full_finetune.lua declares no 'shard' key: planned with shard=3, but a run needs the recipe to "
      "take shard= and pass it to train.new");
  PlanExtras preset;
  preset.model_preset = "llama3.1-8b";
  EXPECT_EQ(hw_plan_request({{"base_model", "/nowhere"}, {"shard", 1}}, "x.lua", preset).options.shard,
            PlanShard::shard_optimizer);  // the ZeRO stage as a number
  EXPECT_EQ(
      error_of([&] { hw_plan_extra_set(&ex, "shard", "zero2"); }),
      "runner plan: shard must be none, optimizer, gradients or full, got 'zero2'\n  HINT: FSDP's NO_SHARD, "
      "SHARD_GRAD_OP, FULL_SHARD and the ZeRO stage 0-3 work too");
  EXPECT_EQ(error_of([&] { hw_plan_extra_set(&ex, "gpus", "2"); }),
            "runner plan: gpus and nproc disagree (4 and 2)\n  HINT: they are the same setting: give one");
  EXPECT_EQ(error_of([&] { hw_plan_extra_set(&ex, "optimizer_offload", "nvme"); }),
            "runner plan: optimizer_offload must be none or cpu, got 'nvme'");
}

TEST(HwMonitor, WithoutNvmlRecordsNothingAndSaysWhy) {
  DeviceInfo d = hw_device_probe();
  if (d.nvml) GTEST_SKIP() << "NVML present: the no-NVML path is not reachable here";
  EXPECT_EQ(d.kind, "cpu");
  EXPECT_GT(d.cpu_cores, 0);
  HwMonitor m(0.01, 0);
  MonitorSummary s = m.stop();
  EXPECT_EQ(s.samples, 0);
  EXPECT_NE(s.note.find("no NVML"), std::string::npos) << s.note;
}

}  // namespace
}  // namespace luatune
