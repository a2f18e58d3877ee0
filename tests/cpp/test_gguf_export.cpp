// The model -> GGUF mapping (host/export/gguf_export.h) read back through gguf_read: keys and tensor
// names/shapes per architecture, the Q/K permutation undone gives HF's weights, Gemma's 1 + w norms,
// llama3 rope_freqs against the formula computed here, the quantization mix, and inputs llama.cpp
// cannot run failing with one line before anything is written. The llama.cpp run itself is
// tests/recipes/test_gguf_export.sh.
#include "host/export/gguf_export.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "host/adapt/lora.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/io/gguf_convert.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "tests/cpp/test_util.h"

namespace luatune {
namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  return test_temp_dir("gguf_" + name, /*create=*/true);
}

// The hand-made byte-level fixture with Llama 3's pre-tokenizer regex (so llama.cpp has a name for
// it: "llama-bpe"); `regex` replaces it for the unsupported case.
std::string byte_level_tokenizer(const std::string& name, const std::string& regex) {
  std::string dir = temp_dir(name);
  nlohmann::json j = nlohmann::json::parse(file_read("tests/fixtures/tokenizers/bytelevel/tokenizer.json"));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = regex;
  file_write_atomic(dir + "/tokenizer.json", j.dump());
  file_write_atomic(dir + "/tokenizer_config.json",
                    file_read("tests/fixtures/tokenizers/bytelevel/tokenizer_config.json"));
  return dir;
}

const std::string kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

ModelConfig tiny(const std::string& arch, const std::string& extra = "") {
  std::string fields = R"({"vocab_size": 48, "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16)";
  if (arch == "gemma2") fields += R"(, "query_pre_attn_scalar": 16)";
  if (arch == "qwen2") fields += R"(, "attention_bias": true)";
  return model_config_with(arch, fields + extra + "}", "test");
}

std::shared_ptr<Model> tiny_model(const ModelConfig& c) {
  auto m = model_init(c, 3, at::kFloat, at::kCPU);
  at::NoGradGuard g;
  at::Generator gen = at::detail::createCPUGenerator(7);
  for (auto& [name, t] : m->named_parameters())
    if (t->dim() == 1) t->add_(at::normal(0.0, 0.1, t->sizes(), gen));
  return m;
}

const GgufFile::Tensor* find_tensor(const GgufFile& f, const std::string& name) {
  for (const auto& t : f.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

// A tensor read back as float32 in PyTorch's shape (ggml's ne reversed).
at::Tensor read_tensor(const GgufFile& f, const std::string& name) {
  const GgufFile::Tensor* t = find_tensor(f, name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return at::Tensor();
  std::vector<int64_t> shape(t->ne.rbegin(), t->ne.rend());
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<float> v = ggml_dequantize(t->type, t->bytes, n);
  return at::tensor(v, at::kFloat).reshape(shape);
}

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

class GgufExportArch : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufExportArch, KeysTensorsAndLayouts) {
  const std::string arch = GetParam();
  auto tok = Tokenizer::load(byte_level_tokenizer("tok_" + arch, kLlama3Regex));
  auto m = tiny_model(tiny(arch));
  const ModelConfig& c = m->config;
  std::string path = temp_dir("out_" + arch) + "/m.gguf";
  GgufExportResult r = gguf_export(*m, *tok, path, {"f32", ""});
  EXPECT_EQ(r.bytes, fs::file_size(path));
  GgufFile f = gguf_read(path);
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(r.tensors, static_cast<int64_t>(f.tensors.size()));

  const std::string ga = arch == "mistral" ? "llama" : arch;
  ASSERT_NE(f.find("general.architecture"), nullptr);
  EXPECT_EQ(f.find("general.architecture")->s, ga);
  for (const char* k :
       {"context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
        "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.dimension_count",
        "rope.freq_base", "attention.layer_norm_rms_epsilon"})
    EXPECT_NE(f.find(ga + "." + k), nullptr) << k;
  EXPECT_EQ(f.find(ga + ".block_count")->u, 2u);
  EXPECT_EQ(f.find(ga + ".attention.head_count_kv")->u, 2u);
  EXPECT_EQ(f.find(ga + ".attention.key_length")->u, 16u);
  EXPECT_EQ(f.find("general.file_type")->u, 0u);
  EXPECT_EQ(f.find("tokenizer.ggml.model")->s, "gpt2");
  EXPECT_EQ(f.find("tokenizer.ggml.pre")->s, "llama-bpe");
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->items.size(), 48u);       // padded to the embedding's rows
  EXPECT_EQ(tokens->items[4].s, "\xc4\xa0");  // "Ġ" stays in GPT-2's byte alphabet
  EXPECT_EQ(tokens->items[30].s, "[PAD30]");
  const GgufValue* types = f.find("tokenizer.ggml.token_type");
  EXPECT_EQ(types->items[0].i, 1);   // normal
  EXPECT_EQ(types->items[20].i, 3);  // <|bos|>: control
  EXPECT_EQ(types->items[22].i, 4);  // [word]: user-defined
  EXPECT_EQ(types->items[30].i, 5);  // unused
  EXPECT_EQ(f.find("tokenizer.ggml.merges")->items[0].s, "h e");
  EXPECT_EQ(f.find("tokenizer.ggml.bos_token_id")->u, 20u);
  EXPECT_TRUE(f.find("tokenizer.ggml.add_bos_token")->u);
  EXPECT_EQ(f.find("tokenizer.chat_template")->s, tok->chat_template());
  if (arch == "gemma2") {
    EXPECT_FLOAT_EQ(f.find("gemma2.attn_logit_softcapping")->f, 50.0f);
    EXPECT_FLOAT_EQ(f.find("gemma2.final_logit_softcapping")->f, 30.0f);
    EXPECT_NE(f.find("gemma2.attention.sliding_window"), nullptr);
  }

  // Names and shapes: exactly these tensors.
  std::set<std::string> want{"token_embd.weight", "output_norm.weight"};
  if (m->lm_head.defined()) want.insert("output.weight");
  for (int i = 0; i < 2; i++) {
    std::string b = "blk." + std::to_string(i) + ".";
    for (const char* n : {"attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate",
                          "ffn_up", "ffn_down"})
      want.insert(b + n + ".weight");
    if (arch == "qwen2")
      for (const char* n : {"attn_q", "attn_k", "attn_v"}) want.insert(b + n + ".bias");
    if (arch == "qwen3") want.insert({b + "attn_q_norm.weight", b + "attn_k_norm.weight"});
    if (arch == "gemma2") want.insert({b + "post_attention_norm.weight", b + "post_ffw_norm.weight"});
  }
  std::set<std::string> got;
  for (const auto& t : f.tensors) {
    got.insert(t.name);
    EXPECT_EQ(t.type, GgmlType::F32) << t.name;
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(find_tensor(f, "token_embd.weight")->ne, (std::vector<int64_t>{64, 48}));
  EXPECT_EQ(find_tensor(f, "blk.0.attn_k.weight")->ne, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(find_tensor(f, "blk.1.ffn_down.weight")->ne, (std::vector<int64_t>{96, 64}));

  // Values: Q/K permuted for llama/mistral only (undoing it gives HF's rows), Gemma norms 1 + w.
  const LayerWeights& l = m->layers[1];
  at::Tensor q = read_tensor(f, "blk.1.attn_q.weight"), k = read_tensor(f, "blk.1.attn_k.weight");
  if (arch == "llama" || arch == "mistral") {
    EXPECT_FALSE(at::equal(q, l.q.weight));
    EXPECT_TRUE(at::equal(gguf_unpermute_qk(q, c.num_heads), l.q.weight));
    EXPECT_TRUE(at::equal(gguf_unpermute_qk(k, c.num_kv_heads), l.k.weight));
  } else {
    EXPECT_TRUE(at::equal(q, l.q.weight));
    EXPECT_TRUE(at::equal(k, l.k.weight));
  }
  if (arch == "qwen2") {
    EXPECT_TRUE(at::equal(read_tensor(f, "blk.1.attn_k.bias"), l.k.bias));
  }
  EXPECT_TRUE(at::equal(read_tensor(f, "blk.1.attn_v.weight"), l.v.weight));
  EXPECT_TRUE(at::equal(read_tensor(f, "token_embd.weight"), m->embed));
  if (arch == "gemma2") {
    EXPECT_TRUE(at::allclose(read_tensor(f, "blk.1.attn_norm.weight"), l.input_norm + 1));
    EXPECT_TRUE(at::allclose(read_tensor(f, "blk.1.ffn_norm.weight"), l.pre_ff_norm + 1));
    EXPECT_TRUE(at::allclose(read_tensor(f, "output_norm.weight"), m->norm + 1));
  } else {
    EXPECT_TRUE(at::equal(read_tensor(f, "blk.1.ffn_norm.weight"), l.post_attn_norm));
  }
  if (arch == "qwen3") {
    EXPECT_TRUE(at::equal(read_tensor(f, "blk.1.attn_k_norm.weight"), l.k_norm));
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, GgufExportArch,
                         ::testing::Values("llama", "mistral", "qwen2", "qwen3", "gemma2"));

TEST(GgufExport, PermutationIsLlamaCppsConverter) {
  // permute(w, n_head) = w.reshape(n_head, 2, rows/n_head/2, cols).swapaxes(1, 2).reshape(w.shape):
  // head 0 of 4 rows: HF rows 0 1 | 2 3 (first halves | second halves) -> 0 2 1 3.
  at::Tensor w = at::arange(8, at::kFloat).reshape({8, 1});
  at::Tensor p = gguf_permute_qk(w, 2).reshape({8});
  EXPECT_TRUE(at::equal(p, at::tensor({0.f, 2.f, 1.f, 3.f, 4.f, 6.f, 5.f, 7.f})));
  EXPECT_TRUE(at::equal(gguf_unpermute_qk(gguf_permute_qk(w, 2), 2), w));
}

TEST(GgufExport, Llama3RopeFreqsFollowTheFormula) {
  auto tok = Tokenizer::load(byte_level_tokenizer("tok_rope", kLlama3Regex));
  ModelConfig c =
      tiny("llama", R"(, "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64})");
  auto m = tiny_model(c);
  std::string path = temp_dir("rope") + "/m.gguf";
  gguf_export(*m, *tok, path, {"f16", ""});
  GgufFile f = gguf_read(path);
  at::Tensor got = read_tensor(f, "rope_freqs.weight");
  ASSERT_EQ(got.numel(), 8);
  EXPECT_EQ(find_tensor(f, "rope_freqs.weight")->type, GgmlType::F32);
  // Meta's apply_scaling: wavelen = 2 pi / freq; < 64/4 kept, > 64/1 divided by 8, between a blend.
  // rope_freqs holds what llama.cpp divides the frequency by: 1, 8, or 1 / ((1 - s) / 8 + s).
  int kept = 0, scaled = 0, blended = 0;
  for (int i = 0; i < 8; i++) {
    double freq = 1.0 / std::pow(500000.0, (2.0 * i) / 16.0);
    double wavelen = 2 * M_PI / freq, want;
    if (wavelen < 16.0) {
      want = 1, kept++;
    } else if (wavelen > 64.0) {
      want = 8, scaled++;
    } else {
      double s = (64.0 / wavelen - 1.0) / 3.0;
      want = 1 / ((1 - s) / 8 + s), blended++;
    }
    EXPECT_NEAR(got[i].item<float>(), want, 1e-5 * want) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(scaled, 0);
  EXPECT_GT(blended, 0);  // this config exercises all three branches
}

TEST(GgufExport, QuantizationMix) {
  // convert_hf_to_gguf's q8_0: every matrix q8_0; rows not a multiple of 32 -> f16; norms f32.
  EXPECT_EQ(gguf_tensor_type("blk.0.attn_q.weight", {64, 64}, "q8_0", 0, 2, false), GgmlType::Q8_0);
  EXPECT_EQ(gguf_tensor_type("output.weight", {100, 64}, "q8_0", -1, 2, false), GgmlType::Q8_0);
  EXPECT_EQ(gguf_tensor_type("blk.0.attn_q.weight", {58, 58}, "q8_0", 0, 2, false), GgmlType::F16);
  EXPECT_EQ(gguf_tensor_type("blk.0.attn_norm.weight", {64}, "q8_0", 0, 2, false), GgmlType::F32);
  EXPECT_EQ(gguf_tensor_type("blk.0.attn_q.bias", {64}, "f16", 0, 2, false), GgmlType::F32);
  EXPECT_EQ(gguf_tensor_type("rope_freqs.weight", {8}, "q4_0", -1, 2, false), GgmlType::F32);
  // llama-quantize's Q4_0: output.weight q6_K (q8_0 when its rows do not fit 256), the rest q4_0;
  // with tied embeddings token_embd plays the output.
  EXPECT_EQ(gguf_tensor_type("output.weight", {100, 4096}, "q4_0", -1, 2, false), GgmlType::Q6_K);
  EXPECT_EQ(gguf_tensor_type("output.weight", {100, 64}, "q4_0", -1, 2, false), GgmlType::Q8_0);
  EXPECT_EQ(gguf_tensor_type("token_embd.weight", {100, 4096}, "q4_0", -1, 2, false), GgmlType::Q4_0);
  EXPECT_EQ(gguf_tensor_type("token_embd.weight", {100, 4096}, "q4_0", -1, 2, true), GgmlType::Q6_K);
  EXPECT_EQ(gguf_tensor_type("blk.3.ffn_down.weight", {4096, 11008}, "q4_0", 3, 32, false), GgmlType::Q4_0);
  // Q4_K_M: attn_v and ffn_down q6_K on use_more_bits layers (first/last eighth, every third between).
  EXPECT_EQ(gguf_tensor_type("blk.0.attn_v.weight", {1024, 4096}, "q4_k", 0, 32, false), GgmlType::Q6_K);
  EXPECT_EQ(gguf_tensor_type("blk.4.attn_v.weight", {1024, 4096}, "q4_k", 4, 32, false), GgmlType::Q4_K);
  EXPECT_EQ(gguf_tensor_type("blk.6.ffn_down.weight", {4096, 11008}, "q4_k", 6, 32, false), GgmlType::Q6_K);
  EXPECT_EQ(gguf_tensor_type("blk.31.ffn_down.weight", {4096, 11008}, "q4_k", 31, 32, false), GgmlType::Q6_K);
  EXPECT_EQ(gguf_tensor_type("blk.5.attn_q.weight", {4096, 4096}, "q4_k", 5, 32, false), GgmlType::Q4_K);
  EXPECT_EQ(gguf_tensor_type("blk.5.attn_q.weight", {64, 64}, "q4_k", 5, 32, false), GgmlType::Q8_0);
  EXPECT_THROW(gguf_tensor_type("x.weight", {32, 32}, "q5_k", 0, 1, false), UsageError);
}

TEST(GgufExport, QuantizedFileHasTheMix) {
  auto tok = Tokenizer::load(byte_level_tokenizer("tok_q8", kLlama3Regex));
  auto m = tiny_model(tiny("llama"));
  std::string path = temp_dir("q8") + "/m.gguf";
  gguf_export(*m, *tok, path, {"q8_0", ""});
  GgufFile f = gguf_read(path);
  EXPECT_EQ(f.find("general.file_type")->u, 7u);
  EXPECT_EQ(find_tensor(f, "blk.0.attn_q.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(find_tensor(f, "output.weight")->type, GgmlType::Q8_0);
  EXPECT_EQ(find_tensor(f, "blk.0.attn_norm.weight")->type, GgmlType::F32);
  at::Tensor v = read_tensor(f, "blk.0.attn_v.weight");
  EXPECT_TRUE(at::allclose(v, m->layers[0].v.weight, 0, 2e-3));
}

// Issue 32: a q4_k export of a model whose rows are not multiples of 256 holds no Q4_K at all; the
// header said Q4_K_M (15) and nothing was printed. The file now says q8_0 (7), and the result's note
// says every row fell back and why.
TEST(GgufExport, Q4kWhoseRowsAllFallBackSaysQ8AndWhy) {
  auto tok = Tokenizer::load(byte_level_tokenizer("tok_q4k", kLlama3Regex));
  auto m = tiny_model(tiny("llama"));  // hidden 64, intermediate 96
  std::string path = temp_dir("q4k_all") + "/m.gguf";
  GgufExportResult r = gguf_export(*m, *tok, path, {"q4_k", ""});
  GgufFile f = gguf_read(path);
  EXPECT_EQ(f.find("general.file_type")->u, 7u);
  EXPECT_EQ(r.outtype, "q8_0");
  for (const auto& t : f.tensors)
    if (t.ne.size() == 2) EXPECT_EQ(t.type, GgmlType::Q8_0) << t.name;
  // token_embd, 7 projections in each of 2 layers, output
  EXPECT_EQ(
      r.note,
      "export.gguf: outtype q4_k: every quantised tensor (16) fell back to q8_0 (rows of 64, 96 values; "
      "q4_K and q6_K need multiples of 256); the file is q8_0 (general.file_type 7), not q4_k");
  // Where some rows fit, the file stays Q4_K_M and the note counts the others.
  auto wide = tiny_model(model_config_with("llama", R"({"vocab_size": 48, "hidden_size": 256,
      "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 64})",
                                           "test"));
  path = temp_dir("q4k_some") + "/m.gguf";
  r = gguf_export(*wide, *tok, path, {"q4_k", ""});
  EXPECT_EQ(gguf_read(path).find("general.file_type")->u, 15u);
  EXPECT_EQ(r.outtype, "q4_k");
  EXPECT_EQ(r.note,
            "export.gguf: outtype q4_k: 2 of 16 quantised tensors fell back to q8_0 (rows of 96 values; q4_K "
            "and q6_K need multiples of 256)");  // both ffn_down
  // Nothing fell back: no note.
  r = gguf_export(*m, *tok, temp_dir("q8_fits") + "/m.gguf", {"q8_0", ""});
  EXPECT_EQ(r.outtype, "q8_0");
  EXPECT_EQ(r.note, "");
}

TEST(GgufExport, SentencePieceVocabularyGetsScoresAndTypes) {
  auto tok = Tokenizer::load("tests/fixtures/tokenizers/metaspace");
  auto m = tiny_model(tiny("mistral"));
  std::string path = temp_dir("spm") + "/m.gguf";
  gguf_export(*m, *tok, path, {"f32", ""});
  GgufFile f = gguf_read(path);
  EXPECT_EQ(f.find("tokenizer.ggml.model")->s, "llama");
  EXPECT_EQ(f.find("tokenizer.ggml.pre")->s, "default");
  EXPECT_TRUE(f.find("tokenizer.ggml.add_space_prefix")->u);
  EXPECT_TRUE(f.find("tokenizer.ggml.add_bos_token")->u);
  EXPECT_TRUE(f.find("tokenizer.ggml.add_eos_token")->u);
  const auto& types = f.find("tokenizer.ggml.token_type")->items;
  const auto& scores = f.find("tokenizer.ggml.scores")->items;
  EXPECT_EQ(types[1].i, 3);  // <s>
  EXPECT_EQ(types[3].i, 6);  // <0x0A>: byte
  EXPECT_EQ(types[16].i, 1);
  EXPECT_EQ(types[40].i, 4);  // <tag>: user-defined
  // Merge rank r -> score -r: "he" (rank 0) beats "ll" (rank 1) beats "▁world" (rank 9).
  EXPECT_FLOAT_EQ(scores[16].f, 0.0f);
  EXPECT_FLOAT_EQ(scores[17].f, -1.0f);
  EXPECT_FLOAT_EQ(scores[25].f, -9.0f);
}

// transformers' GGUF conversion (SmolLM2-135M-Instruct's tokenizer.json) writes "no normalizer" as an
// empty Sequence; that, and a pre-tokenizer nested in another Sequence, are the steps they hold.
TEST(GgufExport, NoOpNormalizersAndNestedSequencesAreTheirSteps) {
  std::string dir = byte_level_tokenizer("noop_norm", kLlama3Regex);
  nlohmann::json j = nlohmann::json::parse(file_read(dir + "/tokenizer.json"));
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", nlohmann::json::array()}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {j["pre_tokenizer"], {{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array()}}}}};
  file_write_atomic(dir + "/tokenizer.json", j.dump());
  auto tok = Tokenizer::load(dir);
  auto m = tiny_model(tiny("llama"));
  std::string path = dir + "/m.gguf";
  gguf_export(*m, *tok, path, {"f16", ""});
  GgufFile f = gguf_read(path, /*with_data=*/false);
  EXPECT_EQ(f.find("tokenizer.ggml.pre")->s, "llama-bpe");
  // A real normalizer inside the Sequence is still refused, by its name.
  j["normalizer"]["normalizers"] = {{{"type", "Lowercase"}}};
  file_write_atomic(dir + "/tokenizer.json", j.dump());
  std::filesystem::remove(path);
  std::string msg = message_of([&] { gguf_export(*m, *Tokenizer::load(dir), path, {"f16", ""}); });
  EXPECT_NE(msg.find("normalizer Lowercase before a byte-level BPE has no llama.cpp equivalent"),
            std::string::npos)
      << msg;
}

// The pre-tokenizer `runner convert` writes for SmolLM2's GGUF (tokenizer.ggml.pre "smollm"): each digit
// split off, then GPT-2's regex. It exports under that name again, so a model fine-tuned from a GGUF
// goes back to one; the digit split without GPT-2's regex is refused.
TEST(GgufExport, DigitSplitThenGpt2RegexIsSmollm) {
  std::string dir = byte_level_tokenizer("smollm_pre", kLlama3Regex);
  nlohmann::json j = nlohmann::json::parse(file_read(dir + "/tokenizer.json"));
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}"}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}}}};
  file_write_atomic(dir + "/tokenizer.json", j.dump());
  auto m = tiny_model(tiny("llama"));
  std::string path = dir + "/m.gguf";
  gguf_export(*m, *Tokenizer::load(dir), path, {"f16", ""});
  EXPECT_EQ(gguf_read(path, /*with_data=*/false).find("tokenizer.ggml.pre")->s, "smollm");
  j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = false;
  file_write_atomic(dir + "/tokenizer.json", j.dump());
  std::filesystem::remove(path);
  std::string msg = message_of([&] { gguf_export(*m, *Tokenizer::load(dir), path, {"f16", ""}); });
  EXPECT_NE(msg.find("has no llama.cpp equivalent"), std::string::npos) << msg;
}

// GGUF in (host/io/gguf_convert.h): what luatune exports comes back as the same model. Llama's Q/K rows
// un-permuted, Qwen2's biases and Qwen3's q/k norms named, ties kept; the rebuilt tokenizer encodes as
// the original; the result loads and gives the original's logits.
TEST_P(GgufExportArch, ConvertBringsTheModelBack) {
  const std::string arch = GetParam();
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3") GTEST_SKIP() << arch << " is not converted yet";
  std::string dir = temp_dir("roundtrip_" + arch);
  // As Llama 3's own tokenizer.json (and llama.cpp for "llama-bpe"): a pre-token in the vocabulary is
  // taken whole (ignore_merges); the hand-made fixture leaves it out.
  const std::string tok_dir = byte_level_tokenizer("roundtrip_tok_" + arch, kLlama3Regex);
  nlohmann::json tj = nlohmann::json::parse(file_read(tok_dir + "/tokenizer.json"));
  tj["model"]["ignore_merges"] = true;
  file_write_atomic(tok_dir + "/tokenizer.json", tj.dump());
  auto tok = Tokenizer::load(tok_dir);
  auto m = tiny_model(tiny(arch));
  gguf_export(*m, *tok, dir + "/m.gguf", {"f32", ""});
  gguf_convert(dir + "/m.gguf", dir + "/hf");
  auto back = model_load(dir + "/hf", {"float32", "cpu"});
  std::map<std::string, at::Tensor> want;
  for (auto& [name, t] : m->named_parameters()) want[name] = *t;
  int compared = 0;
  for (auto& [name, t] : back->named_parameters()) {
    ASSERT_TRUE(want.count(name)) << name;
    EXPECT_TRUE(want[name].equal(*t)) << arch << ": " << name;
    compared++;
  }
  EXPECT_EQ(compared, int(want.size()));
  const ModelConfig &a = m->config, &b = back->config;
  EXPECT_EQ(std::make_tuple(b.hidden_size, b.num_layers, b.num_heads, b.num_kv_heads, b.head_dim,
                            b.tie_word_embeddings),
            std::make_tuple(a.hidden_size, a.num_layers, a.num_heads, a.num_kv_heads, a.head_dim,
                            a.tie_word_embeddings));
  EXPECT_FLOAT_EQ(float(b.rms_norm_eps), float(a.rms_norm_eps));  // GGUF stores it as an f32
  EXPECT_EQ(b.rope.theta, a.rope.theta);
  auto tok2 = Tokenizer::load(dir + "/hf");
  for (const char* text : {"hello world", "lll hello!", " world world", "12345 hello"})
    EXPECT_EQ(tok2->encode(text, false), tok->encode(text, false)) << text;
}

// Llama 3.1's rope scaling through a GGUF and back: the file holds only rope_freqs.weight; the import
// recovers rope_scaling (factor 8, low 1, high 4, original context 8192) from it, and the converted
// model gives the original's logits. Factors no such parameters give (original context 64) are refused.
TEST(GgufExport, Llama3RopeScalingComesBackFromRopeFreqs) {
  auto tok = Tokenizer::load(byte_level_tokenizer("tok_rope_back", kLlama3Regex));
  const std::string scaling = R"(, "rope_theta": 500000.0, "max_position_embeddings": 131072,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": )";
  auto m = tiny_model(tiny("llama", scaling + "8192}"));
  std::string dir = temp_dir("rope_back");
  gguf_export(*m, *tok, dir + "/m.gguf", {"f32", ""});
  gguf_convert(dir + "/m.gguf", dir + "/hf");
  auto back = model_load(dir + "/hf", {"float32", "cpu"});
  const RopeConfig &a = m->config.rope, &b = back->config.rope;
  EXPECT_EQ(b.type, RopeType::rope_llama3);
  EXPECT_EQ(std::make_tuple(b.factor, b.low_freq_factor, b.high_freq_factor, b.original_max_position),
            std::make_tuple(a.factor, a.low_freq_factor, a.high_freq_factor, a.original_max_position));
  at::Tensor ids = at::arange(0, 40, at::kLong).remainder(48).unsqueeze(0);
  at::NoGradGuard g;
  EXPECT_TRUE(at::allclose(back->forward(ids), m->forward(ids), 1e-5, 1e-6));
  EXPECT_EQ(back->named_parameters().size(), m->named_parameters().size());  // no rope_freqs weight
  auto odd = tiny_model(tiny("llama", scaling + "64}"));
  gguf_export(*odd, *tok, dir + "/odd.gguf", {"f32", ""});
  std::string msg = message_of([&] { gguf_convert(dir + "/odd.gguf", dir + "/odd"); });
  EXPECT_NE(msg.find("tensor rope_freqs.weight is not Llama 3.1's rope scaling (factor 8"), std::string::npos)
      << msg;
  EXPECT_FALSE(std::filesystem::exists(dir + "/odd"));
}

TEST(GgufExport, UnsupportedInputsFailWithOneLineAndWriteNothing) {
  std::string dir = temp_dir("fail");
  std::string path = dir + "/m.gguf";
  auto expect_fails = [&](const std::function<void()>& fn, const std::string& contains) {
    std::string msg = message_of(fn);
    EXPECT_NE(msg.find(contains), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_TRUE(fs::is_empty(dir)) << "something was written for: " << msg;
  };
  // A pre-tokenizer regex llama.cpp has no name for (the fixture's own, GPT-2-like but not GPT-2's).
  auto odd = Tokenizer::load("tests/fixtures/tokenizers/bytelevel");
  auto m = tiny_model(tiny("llama"));
  expect_fails([&] { gguf_export(*m, *odd, path, {"f16", ""}); }, "has no llama.cpp equivalent");
  auto tok = Tokenizer::load(byte_level_tokenizer("tok_fail", kLlama3Regex));
  // Gemma 2's query_pre_attn_scalar that llama.cpp would not use.
  auto g =
      tiny_model(model_config_with("gemma2", R"({"vocab_size": 48, "hidden_size": 64, "intermediate_size": 96,
      "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
      "query_pre_attn_scalar": 256})",
                                   "test"));
  expect_fails([&] { gguf_export(*g, *tok, path, {"f16", ""}); }, "export.gguf: gemma2 attention scale");
  // YaRN rope scaling.
  auto y = tiny_model(tiny("qwen3", R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
      "original_max_position_embeddings": 32})"));
  expect_fails([&] { gguf_export(*y, *tok, path, {"f16", ""}); }, "yarn");
  // Unmerged LoRA adapters.
  auto a = tiny_model(tiny("llama"));
  LoraConfig lc;
  lora_apply(*a, lc, 0);
  expect_fails([&] { gguf_export(*a, *tok, path, {"f16", ""}); }, "lora.merge");
  // An unknown outtype.
  expect_fails([&] { gguf_export(*m, *tok, path, {"q3_k", ""}); }, "outtype 'q3_k'");
}

}  // namespace
}  // namespace luatune
