// QLoRA (host/quant/nf4, quant; host/adapt/qlora): bitsandbytes' code tables and decision trees against the
// reference constants, packing on hand-checked tensors, the 8-bit dynamic map, quantize ->
// dequantize error bounds, bitsandbytes' serialised layout, and on tiny models: the 4-bit forward
// equals a dense model holding the dequantized weights, gradients reach only the adapters, the
// backward equals the dense one, save/load in bitsandbytes' layout, quantize-while-loading, PEFT
// adapters from a 4-bit model, and merging into a plain model.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "host/adapt/lora.h"
#include "host/adapt/qlora.h"
#include "host/core/files.h"
#include "host/io/safetensors.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/prune/surgery.h"
#include "host/quant/nf4.h"
#include "host/quant/quant.h"
#include "host/train/trainer.h"
#include "tests/cpp/test_batch.h"
#include "tests/cpp/test_tiny.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The NF4 table as docs/qlora.md, "Sources", lists it (bitsandbytes functional.py), in double.
const double kNF4Ref[16] = {-1.0,
                            -0.6961928009986877,
                            -0.5250730514526367,
                            -0.39491748809814453,
                            -0.28444138169288635,
                            -0.18477343022823334,
                            -0.09105003625154495,
                            0.0,
                            0.07958029955625534,
                            0.16093020141124725,
                            0.24611230194568634,
                            0.33791524171829224,
                            0.44070982933044434,
                            0.5626170039176941,
                            0.7229568362236023,
                            1.0};

std::shared_ptr<Model> tiny(const std::string& arch = "llama", at::ScalarType dtype = at::kFloat,
                            uint64_t seed = 1) {
  // Hidden 64 and intermediate 96: every Linear spans several 64-blocks; with 4 layers of seven
  // Linears the absmax of gate/up (96 x 64 = 96 blocks) is one nested block, lm_head stays dense.
  return tiny_model(arch, 64, 96, dtype, seed);
}

// Rows of random documents over the tiny models' 97-token vocabulary.
Batch random_batch(int64_t rows, int64_t len, uint64_t seed) {
  return luatune::random_batch(97, rows, len, seed);
}

std::string temp_dir(const std::string& name) {
  return test_temp_dir("qlora_" + name);
}

at::Tensor randn(std::vector<int64_t> shape, uint64_t seed, double scale = 1.0) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return at::normal(0.0, scale, shape, gen, at::TensorOptions(at::kFloat));
}

std::vector<uint8_t> bytes_of(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  const uint8_t* p = c.data_ptr<uint8_t>();
  return std::vector<uint8_t>(p, p + c.numel());
}

// A dense copy of `q`'s model: every 4-bit Linear replaced by its dequantized weight.
std::shared_ptr<Model> dense_twin(Model& q) {
  auto d = std::make_shared<Model>(q);  // shares tensors; the Linears are rebound below
  for (LayerWeights& L : d->layers)
    for (Linear* lin : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down})
      if (lin->quant) {
        lin->weight = dequantize_4bit(lin->weight, *lin->quant, d->dtype());
        lin->quant.reset();
      }
  return d;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Code tables and trees

TEST(Nf4, CodeTablesMatchBitsandbytes) {
  for (int i = 0; i < 16; i++) EXPECT_EQ(nf4::kNF4Code[i], static_cast<float>(kNF4Ref[i])) << i;
  // FP4: E2M1 magnitudes [0, 0.0625, 8, 12, 4, 6, 2, 3] / 12, bit 3 the sign.
  const double fp4_raw[8] = {0, 0.0625, 8, 12, 4, 6, 2, 3};
  for (int i = 0; i < 8; i++) {
    EXPECT_FLOAT_EQ(nf4::kFP4Code[i], static_cast<float>(fp4_raw[i] / 12)) << i;
    EXPECT_FLOAT_EQ(nf4::kFP4Code[i + 8], static_cast<float>(-fp4_raw[i] / 12)) << i;
  }
  EXPECT_FLOAT_EQ(nf4::kFP4Code[3], 1.0f);
  EXPECT_FLOAT_EQ(nf4::kFP4Code[1], 0.005208333333f);
}

TEST(Nf4, TreesPickTheNearestCodeAndBreakTiesDownward) {
  // Every code value maps to itself.
  for (uint8_t i = 0; i < 16; i++) EXPECT_EQ(nf4::quantize_nf4_value(nf4::kNF4Code[i]), i);
  for (uint8_t i = 0; i < 16; i++) {
    if (i == 8) continue;  // -0 codes as +0 (the sign test is x < 0)
    EXPECT_EQ(nf4::quantize_fp4_value(nf4::kFP4Code[i]), i) << int(i);
  }
  // Between neighbours: just above the midpoint goes up, at or just below stays down (x > t).
  // (bitsandbytes' thresholds are the midpoints to about 1e-8, so test a little either side.)
  for (int i = 0; i < 15; i++) {
    float mid = static_cast<float>((kNF4Ref[i] + kNF4Ref[i + 1]) / 2);
    EXPECT_EQ(nf4::quantize_nf4_value(mid + 1e-6f), i + 1) << i;
    EXPECT_EQ(nf4::quantize_nf4_value(mid - 1e-6f), i) << i;
  }
  // The trees' own thresholds (docs/qlora.md, "Sources"): x > t is strict, so t itself codes low.
  EXPECT_EQ(nf4::quantize_nf4_value(0.03979014977812767f), 7);
  EXPECT_EQ(nf4::quantize_nf4_value(std::nextafter(0.03979014977812767f, 1.0f)), 8);
  EXPECT_EQ(nf4::quantize_fp4_value(0.29166667f), 0x7);
  EXPECT_EQ(nf4::quantize_fp4_value(-0.8333334f), 0x8 | 0x3);
  // Out of range clamps to the ends; NaN (an all-zero block) codes 0.
  EXPECT_EQ(nf4::quantize_nf4_value(1.5f), 15);
  EXPECT_EQ(nf4::quantize_nf4_value(-7.0f), 0);
  EXPECT_EQ(nf4::quantize_nf4_value(std::nanf("")), 0);
  EXPECT_EQ(nf4::quantize_fp4_value(std::nanf("")), 0);
  // Random values: the tree equals argmin |x - code| (ties have probability zero here).
  at::Tensor x = at::rand({20000}, at::detail::createCPUGenerator(3)) * 2.2 - 1.1;
  const float* p = x.data_ptr<float>();
  for (int64_t k = 0; k < x.numel(); k++) {
    for (nf4::QuantType t : {nf4::QuantType::nf4, nf4::QuantType::fp4}) {
      const float* code = nf4::code4(t);
      int best = 0;
      for (int i = 1; i < 16; i++)
        if (std::fabs(p[k] - code[i]) < std::fabs(p[k] - code[best])) best = i;
      uint8_t got = nf4::quantize_4bit_value(t, p[k]);
      ASSERT_EQ(code[got], code[best]) << "x=" << p[k] << " type " << int(t);
    }
  }
}

TEST(Nf4, DynamicMapIsBitsandbytesEightBitTree) {
  at::Tensor m = dynamic_map_8bit();
  ASSERT_EQ(m.numel(), 256);
  const float* v = m.data_ptr<float>();
  for (int i = 1; i < 256; i++) EXPECT_LT(v[i - 1], v[i]) << i;
  EXPECT_EQ(v[127], 0.0f);
  EXPECT_EQ(v[255], 1.0f);
  // Largest fraction: the midpoint of the last interval of linspace(0.1, 1, 65), 0.99296875.
  EXPECT_FLOAT_EQ(v[254], 0.99296875f);
  EXPECT_FLOAT_EQ(v[0], -0.99296875f);
  // Smallest magnitude: 1e-6 * (0.1 + 1) / 2.
  EXPECT_FLOAT_EQ(v[128], 5.5e-7f);
  EXPECT_FLOAT_EQ(v[126], -5.5e-7f);
  for (int i = 0; i < 127; i++) EXPECT_EQ(v[i], -v[254 - i]) << i;
  // The binary search returns the nearest value.
  at::Tensor x = at::rand({20000}, at::detail::createCPUGenerator(4)) * 2 - 1;
  const float* p = x.data_ptr<float>();
  for (int64_t k = 0; k < x.numel(); k++) {
    int best = 0;
    for (int i = 1; i < 256; i++)
      if (std::fabs(p[k] - v[i]) < std::fabs(p[k] - v[best])) best = i;
    ASSERT_EQ(v[nf4::quantize_8bit_value(v, p[k])], v[best]) << p[k];
  }
}

// ---------------------------------------------------------------------------------------------
// Blockwise quantization

TEST(Nf4, PacksHandCheckedValuesHighNibbleFirst) {
  // Block 0 (64 values): absmax 2, so x / 2 -> 1 (15), -1 (0), 0 (7), 0.25 -> nearest 0.2461 (10),
  // 0.5 -> 0.4407 (12: 0.5 is below the 0.5017 threshold), -0.1 -> -0.0911 (6); the rest 0 (7).
  // Block 1 (a partial one of 5 values): its own absmax 0.5.
  std::vector<float> v(69, 0.0f);
  float head[6] = {2.0f, -2.0f, 0.0f, 0.5f, 1.0f, -0.2f};
  std::memcpy(v.data(), head, sizeof head);
  v[64] = 0.5f;
  v[65] = -0.25f;
  v[68] = -0.5f;
  at::Tensor w = at::from_blob(v.data(), {69}, at::kFloat).clone();
  QuantConfig c;
  c.double_quant = false;
  auto [packed, s] = quantize_4bit(w, c);
  ASSERT_EQ(packed.sizes(), at::IntArrayRef({35, 1}));
  auto b = bytes_of(packed);
  EXPECT_EQ(b[0], 0xF0);  // 15, 0
  EXPECT_EQ(b[1], 0x7A);  // 7, 10
  EXPECT_EQ(b[2], 0xC6);  // 12, 6
  EXPECT_EQ(b[3], 0x77);
  EXPECT_EQ(b[32], 0xF2);  // block 1: 0.5 / 0.5 = 1 (15); -0.25 / 0.5 = -0.5 -> -0.5251 (2), below -0.4600
  EXPECT_EQ(b[33], 0x77);
  EXPECT_EQ(s.absmax.data_ptr<float>()[0], 2.0f);
  EXPECT_EQ(s.absmax.data_ptr<float>()[1], 0.5f);
  EXPECT_EQ(b[34], 0x00);  // the odd last value: -1 (0) in the high nibble, the padding nibble 0
}

TEST(Nf4, AllZeroBlockRoundTripsToZero) {
  at::Tensor w = at::zeros({2, 64});
  w[1][3] = 1.0f;
  QuantConfig c;
  c.double_quant = false;
  auto [packed, s] = quantize_4bit(w, c);
  auto b = bytes_of(packed);
  for (int i = 0; i < 32; i++) EXPECT_EQ(b[i], 0) << i;  // NaN codes 0: -1 * absmax 0
  at::Tensor back = dequantize_4bit(packed, s, at::kFloat);
  EXPECT_TRUE(at::equal(back, w));  // zeros exactly; 1.0 and 0s code exactly too
}

TEST(Nf4, QuantizeDequantizeErrorIsWithinHalfACodeGap) {
  // Half the widest gap between neighbouring codes bounds the error per block, times its absmax.
  double nf4_half_gap = 0;  // the widest gap is the first, -1 to -0.696
  for (int i = 0; i < 15; i++) nf4_half_gap = std::max(nf4_half_gap, (kNF4Ref[i + 1] - kNF4Ref[i]) / 2);
  const double fp4_half_gap = (1.0 - 8.0 / 12) / 2;
  at::Tensor w = randn({96, 80}, 9, 0.02);
  for (bool dq : {false, true})
    for (nf4::QuantType t : {nf4::QuantType::nf4, nf4::QuantType::fp4})
      for (int64_t bs : {64, 128, 256}) {
        QuantConfig c;
        c.type = t;
        c.blocksize = bs;
        c.double_quant = dq;
        auto [packed, s] = quantize_4bit(w, c);
        at::Tensor back = dequantize_4bit(packed, s, at::kFloat);
        ASSERT_EQ(back.sizes(), w.sizes());
        at::Tensor scales = block_scales(s);
        at::Tensor err = (back - w).abs().reshape({-1});
        at::Tensor per = at::repeat_interleave(scales, bs).narrow(0, 0, w.numel());
        const double half = t == nf4::QuantType::nf4 ? nf4_half_gap : fp4_half_gap;
        // With double quantization the scale itself is off by up to half an 8-bit step.
        at::Tensor bound = per * half + (dq ? per * 0.01 : at::zeros_like(per)) + 1e-9;
        EXPECT_TRUE((err <= bound).all().item<bool>())
            << "type " << int(t) << " bs " << bs << " dq " << dq << " worst excess "
            << (err - bound).max().item<double>();
        // And it is a quantizer, not noise: NF4 keeps ~0.1 relative RMS error on Gaussian weights.
        double rel = ((back - w).pow(2).mean() / w.pow(2).mean()).sqrt().item<double>();
        EXPECT_LT(rel, t == nf4::QuantType::nf4 ? 0.12 : 0.2) << "type " << int(t) << " bs " << bs;
        EXPECT_GT(rel, 0.01);
      }
}

TEST(Nf4, DoubleQuantizationStoresEightBitScales) {
  // 600 blocks of 64: three nested blocks of 256 (the last partial).
  at::Tensor w = randn({600, 64}, 12, 0.05);
  QuantConfig c;
  auto [packed, s] = quantize_4bit(w, c);
  ASSERT_TRUE(s.nested);
  EXPECT_EQ(s.absmax.scalar_type(), at::kByte);
  EXPECT_EQ(s.absmax.numel(), 600);
  EXPECT_EQ(s.nested_absmax.numel(), 3);
  EXPECT_EQ(s.nested_code.numel(), 256);
  QuantConfig plain = c;
  plain.double_quant = false;
  auto [packed2, s2] = quantize_4bit(w, plain);
  EXPECT_EQ(bytes_of(packed), bytes_of(packed2));  // the 4-bit codes do not depend on it
  at::Tensor absmax = s2.absmax;
  EXPECT_FLOAT_EQ(s.offset, absmax.mean().item<float>());
  // nested_absmax = max |absmax - offset| per 256; the decoded scale is within half an 8-bit step.
  at::Tensor centred = absmax - s.offset;
  for (int b = 0; b < 3; b++) {
    float want = centred.slice(0, b * 256, std::min<int64_t>(600, (b + 1) * 256)).abs().max().item<float>();
    EXPECT_EQ(s.nested_absmax.data_ptr<float>()[b], want) << b;
  }
  at::Tensor scales = block_scales(s);
  at::Tensor step = at::repeat_interleave(s.nested_absmax, 256).narrow(0, 0, 600) * 0.0071;
  EXPECT_TRUE(((scales - absmax).abs() <= step + 1e-7).all().item<bool>());
  // By hand for block 0: code8[q] * nested_absmax[0] + offset, two float32 roundings.
  const uint8_t q0 = s.absmax.data_ptr<uint8_t>()[0];
  float v = s.nested_code.data_ptr<float>()[q0] * s.nested_absmax.data_ptr<float>()[0];
  EXPECT_EQ(scales.data_ptr<float>()[0], v + s.offset);
  // The bf16 dequantization is the float32 one rounded once.
  EXPECT_TRUE(at::equal(dequantize_4bit(packed, s, at::kBFloat16),
                        dequantize_4bit(packed, s, at::kFloat).to(at::kBFloat16)));
}

TEST(Nf4, Bf16InputsQuantizeAsTheirFloat32Values) {
  at::Tensor w = randn({32, 64}, 5).to(at::kBFloat16);
  auto [pa, sa] = quantize_4bit(w, QuantConfig{});
  auto [pb, sb] = quantize_4bit(w.to(at::kFloat), QuantConfig{});
  EXPECT_EQ(bytes_of(pa), bytes_of(pb));
  EXPECT_EQ(sa.dtype, at::kBFloat16);
  EXPECT_EQ(dequantize_4bit(pa, sa).scalar_type(), at::kBFloat16);
}

TEST(Nf4, BadSettingsFailWithOneLine) {
  QuantConfig c;
  c.blocksize = 48;
  EXPECT_EQ(error_of([&] {
              quantize_4bit(at::ones({4, 64}), c);
            }),
            "quantize: blocksize 48 is not a power of two from 32 to 4096 (bitsandbytes' rule)");
  EXPECT_EQ(error_of([&] { quant_type_parse("int4", "models.load: quantize"); }),
            "models.load: quantize: quant_type \"int4\" is not one of nf4, fp4");
  EXPECT_EQ(error_of([&] { quantize_4bit(at::ones({4}, at::kLong), QuantConfig{}); }),
            "quantize: expected a floating tensor, got int64");
}

// ---------------------------------------------------------------------------------------------
// bitsandbytes' serialised layout

TEST(Nf4, SerialisesAsBitsandbytesQuantState) {
  at::Tensor w = randn({64, 96}, 21, 0.03).to(at::kBFloat16);
  auto [packed, s] = quantize_4bit(w, QuantConfig{});
  auto t = quant_state_tensors("model.layers.0.mlp.up_proj.weight", packed, s);
  std::vector<std::string> names;
  for (auto& [n, v] : t) names.push_back(n);
  const std::string p = "model.layers.0.mlp.up_proj.weight";
  EXPECT_EQ(names, (std::vector<std::string>{p, p + ".absmax", p + ".quant_map", p + ".nested_absmax",
                                             p + ".nested_quant_map", p + ".quant_state.bitsandbytes__nf4"}));
  EXPECT_EQ(t[0].second.sizes(), at::IntArrayRef({3072, 1}));
  EXPECT_EQ(t[1].second.scalar_type(), at::kByte);
  EXPECT_EQ(t[1].second.numel(), 96);
  EXPECT_EQ(t[2].second.numel(), 16);
  EXPECT_EQ(t[4].second.numel(), 256);
  at::Tensor js = t[5].second;
  std::string text(reinterpret_cast<const char*>(js.data_ptr<uint8_t>()), js.numel());
  json j = json::parse(text);
  EXPECT_EQ(j["quant_type"], "nf4");
  EXPECT_EQ(j["blocksize"], 64);
  EXPECT_EQ(j["dtype"], "bfloat16");
  EXPECT_EQ(j["shape"], json({64, 96}));
  EXPECT_EQ(j["nested_blocksize"], 256);
  EXPECT_EQ(j["nested_dtype"], "float32");
  EXPECT_EQ(static_cast<float>(j["nested_offset"].get<double>()), s.offset);
  // json.dumps' spacing, key order as QuantState.as_dict.
  EXPECT_EQ(
      text.rfind("{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", \"shape\": [64, 96], "
                 "\"nested_blocksize\": 256, \"nested_dtype\": \"float32\", \"nested_offset\": ",
                 0),
      0u);

  std::map<std::string, at::Tensor> m(t.begin(), t.end());
  auto get = [&](const std::string& n) { return m.at(n); };
  auto has = [&](const std::string& n) { return m.count(n) > 0; };
  auto [packed2, s2] = quant_state_from_tensors(p, get, has, {64, 96}, "x.safetensors");
  EXPECT_TRUE(at::equal(dequantize_4bit(packed2, s2), dequantize_4bit(packed, s)));
  EXPECT_EQ(s2.offset, s.offset);

  // Damaged states fail in one line naming the file and tensor.
  EXPECT_EQ(error_of([&] {
              quant_state_from_tensors(p, get, has, {96, 64}, "x.safetensors");
            }),
            "x.safetensors: " + p +
                ".quant_state.bitsandbytes__nf4 gives shape [64, 96], expected [96, 64] from "
                "config.json");
  auto m2 = m;
  m2[p + ".quant_map"] = nf4::kFP4Code[0] + at::zeros({16});
  auto get2 = [&](const std::string& n) { return m2.at(n); };
  EXPECT_EQ(error_of([&] {
              quant_state_from_tensors(p, get2, has, {64, 96}, "x.safetensors");
            }),
            "x.safetensors: tensor " + p + ".quant_map is not bitsandbytes' nf4 table");
  auto m3 = m;
  m3.erase(p + ".nested_absmax");
  auto get3 = [&](const std::string& n) { return m3.at(n); };
  auto has3 = [&](const std::string& n) { return m3.count(n) > 0; };
  EXPECT_EQ(error_of([&] {
              quant_state_from_tensors(p, get3, has3, {64, 96}, "x.safetensors");
            }),
            "x.safetensors: tensor " + p + ".nested_absmax is missing (4-bit weight " + p + ")");
}

// ---------------------------------------------------------------------------------------------
// Models

TEST(Qlora, ForwardEqualsADenseModelOfTheDequantizedWeights) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    auto m = tiny("llama", dtype);
    at::Tensor before = tiny_logits(*m);
    EXPECT_EQ(qlora_quantize(*m, QuantConfig{}), 14);
    EXPECT_EQ(qlora_count(*m), 14);
    EXPECT_EQ(m->layers[0].q.weight.scalar_type(), at::kByte);
    EXPECT_TRUE(m->lm_head.defined() ? m->lm_head.scalar_type() == dtype : true);
    at::Tensor after = tiny_logits(*m);
    auto d = dense_twin(*m);
    EXPECT_TRUE(at::equal(after, tiny_logits(*d))) << dtype;
    // 4-bit weights change the output, but not by much.
    double rel = ((after - before).to(at::kFloat).norm() / before.to(at::kFloat).norm()).item<double>();
    EXPECT_GT(rel, 1e-4);
    EXPECT_LT(rel, 0.3);
    // Parameter counts are logical elements.
    EXPECT_EQ(m->count_parameters().total, d->count_parameters().total);
  }
}

TEST(Qlora, SkipKeepsModulesDenseAndRequantizingIsANoOp) {
  auto m = tiny();
  EXPECT_EQ(qlora_quantize(*m, QuantConfig{}, {"down_proj", "model.layers.0.self_attn.q_proj"}), 14 - 2 - 1);
  EXPECT_FALSE(m->layers[0].down.quant);
  EXPECT_FALSE(m->layers[0].q.quant);
  EXPECT_TRUE(m->layers[1].q.quant);
  EXPECT_EQ(qlora_quantize(*m, QuantConfig{}), 3);  // the rest
  EXPECT_EQ(qlora_quantize(*m, QuantConfig{}), 0);
  EXPECT_EQ(qlora_dequantize(*m), 14);
  EXPECT_EQ(m->layers[1].q.weight.scalar_type(), at::kFloat);
  EXPECT_EQ(m->layers[1].q.weight.sizes(), at::IntArrayRef({64, 64}));
}

TEST(Qlora, LinearBackwardEqualsTheDenseOneWithoutAWeightGradient) {
  at::Tensor w = randn({48, 64}, 2, 0.05);
  auto [packed, s] = quantize_4bit(w, QuantConfig{});
  at::Tensor wd = dequantize_4bit(packed, s, at::kFloat);
  at::Tensor bias = randn({48}, 3).requires_grad_(true);
  at::Tensor x1 = randn({3, 5, 64}, 4).requires_grad_(true);
  at::Tensor x2 = x1.detach().clone().requires_grad_(true);
  at::Tensor bias2 = bias.detach().clone().requires_grad_(true);
  at::Tensor g = randn({3, 5, 48}, 6);
  at::Tensor y1 = linear_4bit(x1, packed, s, bias);
  at::Tensor y2 = at::linear(x2, wd, bias2);
  EXPECT_TRUE(at::allclose(y1, y2, 1e-6, 1e-6));
  (y1 * g).sum().backward();
  (y2 * g).sum().backward();
  EXPECT_TRUE(at::allclose(x1.grad(), x2.grad(), 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(bias.grad(), bias2.grad(), 1e-5, 1e-6));
  EXPECT_FALSE(packed.requires_grad());
  // The graph node is the 4-bit function, which keeps the codes rather than a dense weight (a plain
  // linear on the dequantized weight would save that (out, in) tensor for backward).
  ASSERT_TRUE(y1.grad_fn());
  at::Tensor yb = linear_4bit(x1, packed, s, at::Tensor());
  EXPECT_NE(yb.grad_fn()->name().find("Linear4bitFn"), std::string::npos) << yb.grad_fn()->name();
}

TEST(Qlora, TrainingReachesOnlyTheAdaptersAndLeavesCodesAlone) {
  for (bool recompute : {false, true}) {
    auto m = tiny("llama", at::kBFloat16);
    qlora_quantize(*m, QuantConfig{});
    LoraConfig lc;
    lc.r = 4;
    lc.alpha = 8;
    lc.dropout = 0;
    lc.targets = {"all-linear"};
    EXPECT_EQ(lora_apply(*m, lc, 3), 14);
    std::vector<std::vector<uint8_t>> codes;
    for (LayerWeights& L : m->layers) codes.push_back(bytes_of(L.gate.weight));
    auto trainable = m->trainable_parameters();
    EXPECT_EQ(trainable.size(), 28u);  // lora_A and lora_B of 14 Linears, nothing else
    TrainOptions o = constant_lr(5e-3);
    o.max_steps = 12;
    o.gradient_checkpointing = recompute;
    Trainer t(m, o);
    Batch b = random_batch(4, 12, 1);
    double first = t.step(b).loss, last = first;
    for (int i = 0; i < 11; i++) last = t.step(b).loss;
    EXPECT_LT(last, first * 0.9) << "recompute " << recompute;
    for (size_t l = 0; l < m->layers.size(); l++) EXPECT_EQ(bytes_of(m->layers[l].gate.weight), codes[l]);
    EXPECT_GT(m->layers[0].q.adapter->parameters()[1].second->abs().sum().item<double>(),
              0);  // B moved off 0
  }
}

TEST(Qlora, SavesAndLoadsBitsandbytesLayout) {
  auto m = tiny("qwen2", at::kBFloat16);  // Qwen2: q/k/v have biases, which stay dense
  const std::string src = temp_dir("src");
  model_save(*m, src);
  qlora_quantize(*m, QuantConfig{});
  const std::string dir = temp_dir("q");
  model_save(*m, dir);

  json cfg = json::parse(file_read(dir + "/config.json"));
  ASSERT_TRUE(cfg.contains("quantization_config"));
  json q = cfg["quantization_config"];
  EXPECT_EQ(q["quant_method"], "bitsandbytes");
  EXPECT_EQ(q["load_in_4bit"], true);
  EXPECT_EQ(q["bnb_4bit_quant_type"], "nf4");
  EXPECT_EQ(q["bnb_4bit_use_double_quant"], true);
  EXPECT_EQ(q["bnb_4bit_compute_dtype"], "bfloat16");
  EXPECT_TRUE(q["llm_int8_skip_modules"].is_null());
  SafetensorsReader r(dir);
  const std::string p = "model.layers.1.self_attn.k_proj.weight";
  EXPECT_EQ(r.entry(p).dtype, at::kByte);
  EXPECT_EQ(r.entry(p).shape, (std::vector<int64_t>{32 * 64 / 2, 1}));
  EXPECT_TRUE(r.contains(p + ".quant_state.bitsandbytes__nf4"));
  EXPECT_TRUE(r.contains("model.layers.1.self_attn.k_proj.bias"));
  EXPECT_EQ(r.entry("model.embed_tokens.weight").dtype, at::kBFloat16);

  auto back = model_load(dir);
  EXPECT_EQ(qlora_count(*back), 14);
  EXPECT_EQ(bytes_of(back->layers[1].k.weight), bytes_of(m->layers[1].k.weight));
  EXPECT_TRUE(at::equal(tiny_logits(*back), tiny_logits(*m)));

  // Quantizing while loading gives the same codes as loading then quantizing.
  LoadOptions lo;
  lo.quantize = true;
  auto onload = model_load(src, lo);
  EXPECT_EQ(qlora_count(*onload), 14);
  EXPECT_TRUE(at::equal(tiny_logits(*onload), tiny_logits(*m)));
  // Modules left dense (quantize_skip, matched by their ending) are listed for bitsandbytes.
  lo.quant.type = nf4::QuantType::fp4;
  lo.quantize_skip = {"down_proj"};
  auto some = model_load(src, lo);
  EXPECT_EQ(qlora_count(*some), 12);
  const std::string partial = temp_dir("partial");
  model_save(*some, partial);
  json qp = json::parse(file_read(partial + "/config.json"))["quantization_config"];
  EXPECT_EQ(qp["bnb_4bit_quant_type"], "fp4");
  EXPECT_EQ(qp["llm_int8_skip_modules"],
            json::array({"model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj"}));
  // A dequantized model saves without quantization_config.
  qlora_dequantize(*back);
  const std::string dense = temp_dir("dense");
  model_save(*back, dense);
  EXPECT_FALSE(json::parse(file_read(dense + "/config.json")).contains("quantization_config"));
  EXPECT_EQ(SafetensorsReader(dense).entry(p).dtype, at::kBFloat16);
  for (const auto& d : {src, dir, dense, partial}) fs::remove_all(d);
}

TEST(Qlora, AdapterSavesInPeftFormatAndReloadsOntoAFreshQuantizedBase) {
  auto m = tiny("llama", at::kBFloat16);
  qlora_quantize(*m, QuantConfig{});
  LoraConfig lc;
  lc.r = 4;
  lc.alpha = 8;
  lc.targets = {"all-linear"};
  lora_apply(*m, lc, 3);
  perturb_adapters(*m, 5);
  const std::string dir = temp_dir("adapter");
  lora_save(*m, dir, "meta-llama/Llama-3.1-8B");
  auto fresh = tiny("llama", at::kBFloat16);
  qlora_quantize(*fresh, QuantConfig{});
  LoraConfig read = lora_load(*fresh, dir);
  EXPECT_EQ(read.r, 4);
  EXPECT_TRUE(at::equal(tiny_logits(*fresh), tiny_logits(*m)));

  // Merge: the dequantized weight plus the update, dense in the model dtype, no quantization left.
  at::Tensor with_adapters = tiny_logits(*m).to(at::kFloat);
  lora_merge(*m);
  EXPECT_EQ(qlora_count(*m), 0);
  EXPECT_EQ(m->layers[0].up.weight.scalar_type(), at::kBFloat16);
  at::Tensor merged = tiny_logits(*m).to(at::kFloat);
  EXPECT_LT(((merged - with_adapters).norm() / with_adapters.norm()).item<double>(), 0.02);
  const std::string out = temp_dir("merged");
  model_save(*m, out);
  EXPECT_FALSE(json::parse(file_read(out + "/config.json")).contains("quantization_config"));
  auto again = model_load(out);
  EXPECT_TRUE(at::equal(tiny_logits(*again), tiny_logits(*m)));
  for (const auto& d : {dir, out}) fs::remove_all(d);
}

TEST(Qlora, DenseOnlyOperationsRefuseFourBitModels) {
  auto m = tiny();
  qlora_quantize(*m, QuantConfig{});
  PruneSpec spec;
  EXPECT_EQ(
      error_of([&] { prune_check(*m, spec); }),
      "prune: the model has 14 4-bit Linears; this needs dense weights (qlora.dequantize(model) first, or "
      "load it without quantize=)");
  LoraConfig lc;
  lora_apply(*m, lc, 1);
  EXPECT_EQ(error_of([&] { qlora_quantize(*m, QuantConfig{}); }),
            "qlora.quantize: model.layers.0.self_attn.q_proj already has an adapter (quantize first, then "
            "lora.apply)");
}
