// The model -> GGUF mapping: architecture keys, tensor names and layouts, tokenizer metadata and the
// quantization mix, each as llama.cpp's converter (convert_hf_to_gguf.py) and quantizer
// (llama-quant.cpp) have them. Every check runs before the first byte is written. Sources:
// docs/gguf.md sections "Architectures", "Tokenizer" and "Quantization mix".
#include "host/export/gguf_export.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "host/core/enum_names.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/strings.h"
#include "host/io/gguf_convert.h"
#include "host/io/hub_cache.h"

namespace luatune {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ============================================================================================
// Architecture

// llama.cpp's name for the architecture: Mistral is its "llama" (the converter registers
// MistralForCausalLM on LlamaModel).
const EnumName<ModelArch> kGgufArchs[] = {{ModelArch::llama, "llama"},
                                          {ModelArch::mistral, "llama"},
                                          {ModelArch::qwen2, "qwen2"},
                                          {ModelArch::qwen3, "qwen3"},
                                          {ModelArch::gemma2, "gemma2"}};

std::string gguf_arch_name(ModelArch a) {
  const char* name = enum_name(kGgufArchs, a, nullptr);
  if (!name) fail("export.gguf: unknown architecture");
  return name;
}

bool permutes_qk(ModelArch a) {
  return a == ModelArch::llama || a == ModelArch::mistral;
}

// What llama.cpp computes that luatune's config could say otherwise: fail naming the difference.
void check_expressible(const Model& model) {
  const ModelConfig& c = model.config;
  const std::string arch = c.arch_name();
  for (size_t i = 0; i < model.layers.size(); i++) {
    const LayerWeights& l = model.layers[i];
    for (const Linear* lin : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      LT_CHECK(!lin->adapter, "export.gguf: layer " << i
                                                    << " has LoRA adapters; llama.cpp needs plain weights"
                                                    << " (merge them first: lora.merge(model))");
    LT_CHECK(!l.attn_branch,
             "export.gguf: layer " << i << " has a LLaMA-Adapter prompt, which llama.cpp cannot run");
  }
  switch (c.rope.type) {
    case RopeType::rope_default:
    case RopeType::rope_linear:
    case RopeType::rope_llama3:
      break;
    case RopeType::rope_yarn:
      fail(
          "export.gguf: rope_scaling type yarn is not exported yet (llama.cpp's YaRN keys are not verified "
          "against luatune's)");
  }
  LT_CHECK(c.rope.type != RopeType::rope_llama3 || permutes_qk(c.arch),
           "export.gguf: llama3 rope_scaling on " << arch << ": llama.cpp reads rope_freqs only for llama");
  const Activation want = c.arch == ModelArch::gemma2 ? Activation::act_gelu_tanh : Activation::act_silu;
  LT_CHECK(c.act == want, "export.gguf: " << arch << " with hidden_act '" << c.act_name << "': llama.cpp's "
                                          << gguf_arch_name(c.arch) << " uses "
                                          << (want == Activation::act_silu ? "silu" : "gelu_pytorch_tanh"));
  if (c.arch == ModelArch::gemma2) {
    LT_CHECK(c.attn_logit_softcap > 0 && c.final_logit_softcap > 0,
             "export.gguf: gemma2 with a softcap turned off (attn " << c.attn_logit_softcap << ", final "
                                                                    << c.final_logit_softcap
                                                                    << "): llama.cpp always applies both");
    // llama.cpp ignores query_pre_attn_scalar: 1/sqrt(n_embd/n_head) for the 46-layer 27B, else
    // 1/sqrt(head_dim) (llama-model.cpp, gemma2 hparams).
    const double llama_scale = c.num_layers == 46 ? 1.0 / std::sqrt(double(c.hidden_size / c.num_heads))
                                                  : 1.0 / std::sqrt(double(c.head_dim));
    LT_CHECK(std::abs(llama_scale - c.softmax_scale()) <= 1e-6 * llama_scale,
             "export.gguf: gemma2 attention scale "
                 << c.softmax_scale() << " (query_pre_attn_scalar " << c.query_pre_attn_scalar
                 << "): llama.cpp uses " << llama_scale << " for a " << c.num_layers << "-layer model");
    for (size_t i = 0; i < c.layer_sliding.size(); i++)
      LT_CHECK(c.layer_sliding[i] == (i % 2 == 0),
               "export.gguf: gemma2 layer " << i << (c.layer_sliding[i] ? " uses" : " does not use")
                                            << " the sliding window; llama.cpp slides on even layers only");
  }
  LT_CHECK(c.hidden_size > 0 && c.head_dim > 0 && c.head_dim % 2 == 0,
           "export.gguf: head_dim " << c.head_dim << " must be even (RoPE rotates pairs)");
}

// ============================================================================================
// Tokenizer

// GGUF token types (gguf-py TokenType).
enum TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

// The converter's does_token_look_special: added tokens some models do not mark special.
bool looks_special(const std::string& t) {
  auto wrapped = [&](const std::string& a, const std::string& b) {
    return t.size() >= a.size() + b.size() && t.compare(0, a.size(), a) == 0 && ends_with(t, b);
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xef\xbd\x9c", "\xef\xbd\x9c>") || wrapped("<unused", ">");
}

bool is_byte_token(const std::string& t) {
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit((unsigned char)t[3]) &&
         std::isxdigit((unsigned char)t[4]);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
  return s;
}

struct GgufVocab {
  std::string model;  // "gpt2" (byte-level BPE) or "llama" (SentencePiece-style BPE)
  std::string pre;    // tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<float> scores;        // llama only
  std::vector<std::string> merges;  // gpt2 only
  bool add_space_prefix = false;    // llama only
};

std::string json_type(const nlohmann::json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
}

// The steps of a normalizer or pre-tokenizer (`key`: "normalizers" or "pretokenizers") with nested
// Sequences flattened: an empty Sequence, or a null, is no step at all (transformers' GGUF conversion
// writes {"type": "Sequence", "normalizers": []} for "no normalizer").
std::vector<nlohmann::json> flat_steps(const nlohmann::json& j, const char* key) {
  std::vector<nlohmann::json> steps;
  if (j.is_null()) return steps;
  if (json_type(j) == "Sequence" && j.contains(key) && j[key].is_array()) {
    for (const auto& s : j[key])
      for (auto& t : flat_steps(s, key)) steps.push_back(std::move(t));
    return steps;
  }
  steps.push_back(j);
  return steps;
}

// The byte-level pre-tokenizer's llama.cpp name, or "" when llama.cpp has none.
std::string byte_level_pre_name(const nlohmann::json& pre, std::string& described) {
  std::vector<nlohmann::json> steps = flat_steps(pre, "pretokenizers");
  if (steps.size() == 1 && json_type(steps[0]) == "ByteLevel" && steps[0].value("use_regex", true)) {
    described = "ByteLevel with GPT-2's regex";
    return "gpt-2";
  }
  // Each digit its own piece, then GPT-2's regex: llama.cpp's "smollm" (also "starcoder" and others,
  // the same regexes), as SmolLM2's own GGUF names it and `runner convert` writes it back.
  if (steps.size() == 2 && json_type(steps[0]) == "Split" && json_type(steps[1]) == "ByteLevel" &&
      steps[1].value("use_regex", true) && steps[0].value("behavior", std::string()) == "Isolated" &&
      !steps[0].value("invert", false) && steps[0].contains("pattern") &&
      steps[0]["pattern"].contains("Regex") && steps[0]["pattern"]["Regex"] == kGgufDigitsRegex) {
    described = "digits split, then ByteLevel with GPT-2's regex";
    return "smollm";
  }
  if (steps.size() == 2 && json_type(steps[0]) == "Split" && json_type(steps[1]) == "ByteLevel" &&
      !steps[1].value("use_regex", true) && steps[0].contains("pattern") &&
      steps[0]["pattern"].contains("Regex")) {
    const std::string re = steps[0]["pattern"]["Regex"].get<std::string>();
    described = "Split regex \"" + re + "\"";
    if (re == kGgufLlama3Regex) return "llama-bpe";
    if (re == kGgufQwen2Regex) return "qwen2";
    return "";
  }
  described = pre.dump().substr(0, 200);
  return "";
}

bool has_byte_level(const nlohmann::json& pre) {
  for (const auto& s : flat_steps(pre, "pretokenizers"))
    if (json_type(s) == "ByteLevel") return true;
  return false;
}

// SentencePiece's dummy prefix, as tokenizer.json spells it: a Prepend("▁") normalizer or a
// Metaspace pre-tokenizer that prepends.
bool adds_space_prefix(const nlohmann::json& root) {
  std::function<bool(const nlohmann::json&)> norm = [&](const nlohmann::json& n) {
    if (json_type(n) == "Prepend") return n.value("prepend", std::string()) == "\xe2\x96\x81";
    if (json_type(n) == "Sequence" && n.contains("normalizers"))
      for (const auto& s : n["normalizers"])
        if (norm(s)) return true;
    return false;
  };
  std::function<bool(const nlohmann::json&)> pre = [&](const nlohmann::json& p) {
    if (json_type(p) == "Metaspace")
      return p.value("prepend_scheme", std::string(p.value("add_prefix_space", true) ? "always" : "never")) !=
             "never";
    if (json_type(p) == "Sequence" && p.contains("pretokenizers"))
      for (const auto& s : p["pretokenizers"])
        if (pre(s)) return true;
    return false;
  };
  return (root.contains("normalizer") && norm(root["normalizer"])) ||
         (root.contains("pre_tokenizer") && pre(root["pre_tokenizer"]));
}

GgufVocab read_vocab(const Tokenizer& tok, int64_t vocab_size) {
  std::string json_path;
  for (const std::string& f : tok.files())
    if (ends_with(f, "/tokenizer.json") || f == "tokenizer.json") json_path = f;
  LT_CHECK(!json_path.empty(), "export.gguf: the tokenizer from '"
                                   << tok.source_dir()
                                   << "' has no tokenizer.json to read the vocabulary from");
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(file_read(json_path));
  } catch (const nlohmann::json::exception& e) {
    fail("export.gguf: " + json_path + " is not JSON: " + e.what());
  }
  const nlohmann::json& m = root["model"];
  const std::string mtype = json_type(m);
  LT_CHECK(mtype == "BPE",
           "export.gguf: " << json_path << ": model.type \"" << mtype
                           << "\" cannot be exported (llama.cpp's gpt2/llama vocabularies need BPE)");
  const nlohmann::json pre = root.contains("pre_tokenizer") ? root["pre_tokenizer"] : nlohmann::json();
  const bool byte_fallback = m.value("byte_fallback", false);

  GgufVocab v;
  if (has_byte_level(pre)) {
    std::string described;
    v.model = "gpt2";
    v.pre = byte_level_pre_name(pre, described);
    LT_CHECK(!v.pre.empty(),
             "export.gguf: " << json_path << ": pre-tokenizer " << described
                             << " has no llama.cpp equivalent (exported: Llama 3's \"llama-bpe\", "
                                "Qwen2/3's \"qwen2\", GPT-2's \"gpt-2\", SmolLM's \"smollm\")");
    // llama.cpp normalizes nothing before a byte-level BPE (it keeps NFC text as it is): no step, or NFC.
    const nlohmann::json& norm = root.contains("normalizer") ? root["normalizer"] : nlohmann::json();
    for (const auto& step : flat_steps(norm, "normalizers"))
      LT_CHECK(json_type(step) == "NFC",
               "export.gguf: " << json_path << ": normalizer " << json_type(step)
                               << " before a byte-level BPE has no llama.cpp equivalent");
  } else {
    LT_CHECK(byte_fallback,
             "export.gguf: " << json_path
                             << ": a BPE without a ByteLevel pre-tokenizer and without byte_fallback "
                                "has no llama.cpp equivalent (llama.cpp's SentencePiece vocabulary "
                                "needs <0xXX> byte tokens)");
    v.model = "llama";
    v.pre = "default";
    v.add_space_prefix = adds_space_prefix(root);
  }

  // id -> (text, added?, special?)
  const int64_t n = std::max<int64_t>(vocab_size, tok.vocab_size());
  std::vector<std::string> text(n);
  std::vector<int32_t> type(n, kUnused);
  std::vector<bool> present(n, false);
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= n) continue;
    text[id] = it.key();
    present[id] = true;
    type[id] = v.model == "llama" && byte_fallback && is_byte_token(it.key()) ? kByte : kNormal;
  }
  if (root.contains("added_tokens"))
    for (const auto& a : root["added_tokens"]) {
      int64_t id = a.value("id", int64_t(-1));
      if (id < 0 || id >= n) continue;
      std::string content = a.value("content", std::string());
      if (a.value("special", false) || looks_special(content)) {
        type[id] = kControl;
      } else {
        content =
            replace_all(content, "\xe2\x96\x81", " ");  // the converter pre-normalizes user-defined spaces
        type[id] = kUserDefined;
      }
      text[id] = content;
      present[id] = true;
    }
  if (v.model == "llama" && tok.special().unk >= 0 && tok.special().unk < n &&
      type[tok.special().unk] == kNormal)
    type[tok.special().unk] = kUnknown;
  for (int64_t i = 0; i < n; i++)
    if (!present[i]) text[i] = "[PAD" + std::to_string(i) + "]";  // the converter's filler for unused ids

  // Merges as "a b"; for the SentencePiece vocabulary they become scores instead: llama.cpp merges
  // the adjacent pair whose concatenation has the highest score, HF's BPE the pair of lowest rank.
  std::vector<std::string> merges;
  for (const auto& mg : m["merges"]) {
    if (mg.is_string())
      merges.push_back(mg.get<std::string>());
    else
      merges.push_back(mg[0].get<std::string>() + " " + mg[1].get<std::string>());
  }
  if (v.model == "gpt2") {
    v.merges = std::move(merges);
  } else {
    std::map<std::string, int64_t> id_of;
    for (int64_t i = 0; i < n; i++)
      if (present[i] && type[i] == kNormal) id_of.emplace(text[i], i);
    // Tokens no merge produces can never win a merge in HF's BPE: the lowest score.
    v.scores.assign(n, -1e9f);
    auto chars = [](const std::string& t) {
      size_t k = 0;
      for (unsigned char ch : t) k += (ch & 0xC0) != 0x80;
      return k;
    };
    for (int64_t i = 0; i < n; i++)
      if (type[i] != kNormal || chars(text[i]) <= 1) v.scores[i] = 0.0f;
    for (size_t r = 0; r < merges.size(); r++) {
      const std::string& mg = merges[r];
      size_t sp = mg.find(' ');
      if (sp == std::string::npos) continue;
      auto it = id_of.find(mg.substr(0, sp) + mg.substr(sp + 1));
      if (it != id_of.end() && v.scores[it->second] == -1e9f) v.scores[it->second] = -static_cast<float>(r);
    }
  }
  v.tokens = std::move(text);
  v.types = std::move(type);
  return v;
}

// ============================================================================================
// Quantization mix

// llama-quant.cpp's use_more_bits: the first and last eighth of the layers and every third between.
bool use_more_bits(int64_t i, int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

uint32_t file_type_of(const std::string& outtype) {
  // llama.cpp's enum llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2, MOSTLY_Q8_0 7,
  // MOSTLY_Q4_K_M 15, MOSTLY_BF16 32 (and MOSTLY_Q6_K 18: file_type_written).
  if (outtype == "f32") return 0;
  if (outtype == "f16") return 1;
  if (outtype == "q4_0") return 2;
  if (outtype == "q8_0") return 7;
  if (outtype == "q4_k") return 15;
  if (outtype == "bf16") return 32;
  fail_usage("export.gguf: outtype '" + outtype + "' is not one of f32, f16, bf16, q8_0, q4_0, q4_k");
}

// general.file_type of a file written as `outtype` (gguf_export's result): file_type_of, plus the
// q6_k a file whose quantised tensors are mostly q6_K names (never asked for).
uint32_t file_type_written(const std::string& outtype) {
  return outtype == "q6_k" ? 18 : file_type_of(outtype);
}

// The outtype that names a file of mostly `t` (the inverse of the main type of each outtype).
std::string outtype_of(GgmlType t) {
  if (t == GgmlType::F16) return "f16";
  if (t == GgmlType::BF16) return "bf16";
  if (t == GgmlType::Q8_0) return "q8_0";
  if (t == GgmlType::Q4_0) return "q4_0";
  if (t == GgmlType::Q4_K) return "q4_k";
  if (t == GgmlType::Q6_K) return "q6_k";
  return "f32";
}

// The type llama.cpp's rules give a tensor before its rows are checked against the type's block
// (row_fitted then falls back). `outtype` is valid.
GgmlType type_wanted(const std::string& name, const std::vector<int64_t>& shape, const std::string& outtype,
                     int64_t layer, int64_t n_layers, bool tied) {
  // Norms, biases, rope_freqs and every 1-D tensor stay float32 (converter: n_dims <= 1 or
  // "_norm.weight"; not ".weight" -> F32).
  if (shape.size() <= 1 || ends_with(name, "_norm.weight") || !ends_with(name, ".weight") ||
      name == "rope_freqs.weight")
    return GgmlType::F32;
  if (outtype == "f32") return GgmlType::F32;
  if (outtype == "f16") return GgmlType::F16;
  if (outtype == "bf16") return GgmlType::BF16;
  // convert_hf_to_gguf --outtype q8_0: every other tensor q8_0.
  if (outtype == "q8_0") return GgmlType::Q8_0;
  // q4_0 and q4_k: llama-quantize's llama_tensor_get_type for LLAMA_FTYPE_MOSTLY_Q4_0 / Q4_K_M.
  const GgmlType def = outtype == "q4_0" ? GgmlType::Q4_0 : GgmlType::Q4_K;
  const bool is_output = name == "output.weight" || (tied && name == "token_embd.weight");
  if (is_output) return GgmlType::Q6_K;
  if (name == "token_embd.weight") return def;
  if (outtype == "q4_k" && (ends_with(name, ".attn_v.weight") || ends_with(name, ".ffn_down.weight")) &&
      use_more_bits(layer, n_layers))
    return GgmlType::Q6_K;
  return def;
}

// Rows a block type cannot hold (nx, ggml's ne[0], not a multiple of its block): llama.cpp falls
// back Q4_K -> Q5_0 and Q6_K -> Q8_0, then F16 when even that does not divide; the converter's
// q8_0 raises QuantError and writes F16. luatune writes no Q5_0, so Q4_K falls back to Q8_0 too.
GgmlType row_fitted(GgmlType t, int64_t nx) {
  if ((t == GgmlType::Q4_K || t == GgmlType::Q6_K) && nx % 256 != 0) t = GgmlType::Q8_0;
  if ((t == GgmlType::Q4_0 || t == GgmlType::Q8_0) && nx % 32 != 0) t = GgmlType::F16;
  return t;
}

bool is_block_type(GgmlType t) {
  return t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q4_K || t == GgmlType::Q6_K;
}

// The quantised tensors an export meant to write and what their rows allowed: a file none of whose
// tensors got the outtype's own type is named by what it holds, and the export says which rows fell
// back and why.
struct FallbackTally {
  GgmlType main = GgmlType::F32;                     // the outtype's own type (q4_k: Q4_K)
  int64_t meant = 0, fell = 0, kept_main = 0;        // tensors
  std::map<GgmlType, int64_t> elements;              // what the meant tensors became -> their elements
  std::map<GgmlType, std::vector<int64_t>> rows_of;  // a wanted type that fell back -> its row lengths
  std::map<GgmlType, int64_t> fell_to;               // type fallen back to -> tensors

  void add(GgmlType wanted, GgmlType got, int64_t nx, int64_t numel) {
    if (!is_block_type(wanted)) return;
    meant++;
    elements[got] += numel;
    if (got == main) kept_main++;
    if (got == wanted) return;
    fell++;
    fell_to[got]++;
    std::vector<int64_t>& rows = rows_of[wanted];
    if (std::find(rows.begin(), rows.end(), nx) == rows.end()) rows.push_back(nx);
  }
  // The outtype the file holds: `asked` unless no tensor has its own type, then the type most of the
  // quantised elements have.
  std::string written(const std::string& asked) const {
    if (meant == 0 || kept_main > 0) return asked;
    GgmlType most = GgmlType::F32;
    int64_t best = -1;
    for (const auto& [t, n] : elements)
      if (n > best) most = t, best = n;
    return outtype_of(most);
  }
  // "" when nothing fell back; else one line naming the rows, the blocks and the file type:
  // "export.gguf: outtype q4_k: every quantised tensor (16) fell back to q8_0 (rows of 32, 64 values;
  // q4_K and q6_K need multiples of 256); the file is q8_0 (general.file_type 7), not q4_k".
  std::string note(const std::string& asked, const std::string& written) const {
    if (fell == 0) return "";
    std::string to, rows, why;
    for (const auto& [t, n] : fell_to) to += (to.empty() ? "" : " and ") + std::string(ggml_type_name(t));
    std::map<int64_t, std::vector<std::string>> types_of_block;  // 256 -> {q4_K, q6_K}
    std::vector<int64_t> all;
    for (const auto& [t, v] : rows_of) {
      types_of_block[ggml_block_size(t)].push_back(ggml_type_name(t));
      for (int64_t nx : v)
        if (std::find(all.begin(), all.end(), nx) == all.end()) all.push_back(nx);
    }
    std::sort(all.begin(), all.end());
    for (int64_t nx : all) rows += (rows.empty() ? "" : ", ") + std::to_string(nx);
    for (const auto& [block, names] : types_of_block)
      why += (why.empty() ? "" : ", ") + str_join(names, " and ") + (names.size() == 1 ? " needs" : " need") +
             " multiples of " + std::to_string(block);
    std::string line = "export.gguf: outtype " + asked + ": ";
    if (fell == meant)
      line += "every quantised tensor (" + std::to_string(meant) + ") fell back to " + to;
    else
      line += std::to_string(fell) + " of " + std::to_string(meant) + " quantised tensors fell back to " + to;
    line += " (rows of " + rows + " values; " + why + ")";
    if (written != asked)
      line += "; the file is " + written + " (general.file_type " +
              std::to_string(file_type_written(written)) + "), not " + asked;
    return line;
  }
};

}  // namespace

// ============================================================================================
// Public pieces

at::Tensor gguf_permute_qk(const at::Tensor& w, int64_t n_head) {
  auto shape = w.sizes().vec();
  std::vector<int64_t> s{n_head, 2, shape[0] / n_head / 2};
  s.insert(s.end(), shape.begin() + 1, shape.end());
  return w.reshape(s).transpose(1, 2).reshape(shape);
}

at::Tensor gguf_unpermute_qk(const at::Tensor& w, int64_t n_head) {
  auto shape = w.sizes().vec();
  std::vector<int64_t> s{n_head, shape[0] / n_head / 2, 2};
  s.insert(s.end(), shape.begin() + 1, shape.end());
  return w.reshape(s).transpose(1, 2).reshape(shape);
}

std::vector<float> gguf_llama3_rope_factors(const ModelConfig& c) {
  // The converter reads original_max_position_embeddings from config.json's top level (default
  // 8192); HF reads it from rope_scaling. They agree on every released Llama 3.1/3.2; luatune
  // follows HF so llama.cpp computes what the model was trained with.
  const RopeConfig& r = c.rope;
  return gguf_llama3_rope_factors(r.theta, c.head_dim, r.factor, r.low_freq_factor, r.high_freq_factor,
                                  r.original_max_position);
}

GgmlType gguf_tensor_type(const std::string& name, const std::vector<int64_t>& shape,
                          const std::string& outtype, int64_t layer, int64_t n_layers, bool tied) {
  file_type_of(outtype);  // validates
  const GgmlType t = type_wanted(name, shape, outtype, layer, n_layers, tied);
  return t == GgmlType::F32 ? t : row_fitted(t, shape.back());  // shape.back(): ggml's ne[0], the row length
}

// ============================================================================================
// Export

GgufExportResult gguf_export(const Model& model, const Tokenizer& tok, const std::string& path,
                             const GgufExportOptions& options) {
  file_type_of(options.outtype);  // validates
  model.ensure_full_weights();
  check_expressible(model);
  const ModelConfig& c = model.config;
  const std::string arch = gguf_arch_name(c.arch);
  const int64_t V = model.embed.size(0);
  LT_CHECK(model.embed.dim() == 2 && V == c.vocab_size,
           "export.gguf: embedding rows " << V << " differ from vocab_size " << c.vocab_size);
  LT_CHECK(tok.vocab_size() <= V, "export.gguf: the tokenizer has " << tok.vocab_size()
                                                                    << " tokens, the model's embedding " << V
                                                                    << " rows");
  GgufVocab vocab = read_vocab(tok, V);
  vocab.tokens.resize(V);
  vocab.types.resize(V);
  if (!vocab.scores.empty()) vocab.scores.resize(V);

  GgufWriter w;
  auto key = [&](const std::string& k) { return arch + "." + k; };
  auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  std::string name = options.name;
  if (name.empty()) {
    const std::string hub_name =
        hub_model_name_of(model.source_dir);  // a hub cache snapshot: its name, not the hash
    name =
        model.source_dir.empty() ? "luatune" : path_basename(hub_name.empty() ? model.source_dir : hub_name);
  }
  w.set("general.architecture", GgufValue::str(arch));
  w.set("general.type", GgufValue::str("model"));
  w.set("general.name", GgufValue::str(name));
  w.set("general.alignment", u32(32));
  w.set(key("vocab_size"), u32(V));
  w.set(key("context_length"), u32(c.max_position_embeddings));
  w.set(key("embedding_length"), u32(c.hidden_size));
  w.set(key("block_count"), u32(c.num_layers));
  w.set(key("feed_forward_length"), u32(c.intermediate_size));
  w.set(key("attention.head_count"), u32(c.num_heads));
  w.set(key("attention.head_count_kv"), u32(c.num_kv_heads));
  w.set(key("attention.key_length"), u32(c.head_dim));
  w.set(key("attention.value_length"), u32(c.head_dim));
  w.set(key("rope.dimension_count"), u32(c.head_dim));
  w.set(key("rope.freq_base"), GgufValue::f32(static_cast<float>(c.rope.theta)));
  w.set(key("attention.layer_norm_rms_epsilon"), GgufValue::f32(static_cast<float>(c.rms_norm_eps)));
  if (c.rope.type == RopeType::rope_linear) {
    w.set(key("rope.scaling.type"), GgufValue::str("linear"));
    w.set(key("rope.scaling.factor"), GgufValue::f32(static_cast<float>(c.rope.factor)));
  }
  if (c.arch == ModelArch::gemma2) {
    w.set(key("attn_logit_softcapping"), GgufValue::f32(static_cast<float>(c.attn_logit_softcap)));
    w.set(key("final_logit_softcapping"), GgufValue::f32(static_cast<float>(c.final_logit_softcap)));
    if (c.sliding_window > 0) w.set(key("attention.sliding_window"), u32(c.sliding_window));
  }
  // Set again once the tensors are known (a file whose rows all fell back says what it holds).
  w.set("general.file_type", GgufValue::u32(file_type_of(options.outtype)));
  w.set("general.quantization_version", u32(2));  // GGML_QUANT_VERSION

  // Tokenizer
  w.set("tokenizer.ggml.model", GgufValue::str(vocab.model));
  w.set("tokenizer.ggml.pre", GgufValue::str(vocab.pre));
  w.set("tokenizer.ggml.tokens", GgufValue::strings(vocab.tokens));
  if (!vocab.scores.empty()) w.set("tokenizer.ggml.scores", GgufValue::f32s(vocab.scores));
  w.set("tokenizer.ggml.token_type", GgufValue::i32s(vocab.types));
  if (!vocab.merges.empty()) w.set("tokenizer.ggml.merges", GgufValue::strings(vocab.merges));
  const SpecialTokens& sp = tok.special();
  int64_t bos = sp.bos >= 0 ? sp.bos : c.bos_token_id;
  int64_t eos = !sp.eos.empty() ? sp.eos[0] : (!c.eos_token_ids.empty() ? c.eos_token_ids[0] : -1);
  int64_t pad = sp.pad >= 0 ? sp.pad : c.pad_token_id;
  if (bos >= 0 && bos < V) w.set("tokenizer.ggml.bos_token_id", u32(bos));
  if (eos >= 0 && eos < V) w.set("tokenizer.ggml.eos_token_id", u32(eos));
  if (sp.unk >= 0 && sp.unk < V) w.set("tokenizer.ggml.unknown_token_id", u32(sp.unk));
  if (pad >= 0 && pad < V) w.set("tokenizer.ggml.padding_token_id", u32(pad));
  // What luatune's own post-processor does decides add_bos/add_eos, so llama.cpp tokenizes alike.
  std::vector<int32_t> with = tok.encode("a", true), without = tok.encode("a", false);
  const bool add_bos =
      !with.empty() && bos >= 0 && with.front() == bos && (without.empty() || without.front() != bos);
  const bool add_eos =
      with.size() > without.size() && !with.empty() && with.back() != (without.empty() ? -1 : without.back());
  w.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(add_bos));
  w.set("tokenizer.ggml.add_eos_token", GgufValue::boolean(add_eos));
  if (vocab.model == "llama")
    w.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(vocab.add_space_prefix));
  if (!tok.chat_template().empty()) w.set("tokenizer.chat_template", GgufValue::str(tok.chat_template()));

  // Tensors
  const bool tied = !model.lm_head.defined();
  const bool gemma = c.arch == ModelArch::gemma2;
  const int64_t L = static_cast<int64_t>(model.layers.size());
  LT_CHECK(L == c.num_layers, "export.gguf: " << L << " layers, config num_hidden_layers " << c.num_layers);
  FallbackTally tally;
  tally.main = type_wanted("x.weight", {1, 1}, options.outtype, 0, 1, false);
  auto add = [&](const std::string& gname, at::Tensor t, int64_t layer) {
    at::NoGradGuard g;
    t = t.detach().to(at::kCPU).to(at::kFloat).contiguous();
    std::vector<int64_t> shape = t.sizes().vec();
    const GgmlType type = gguf_tensor_type(gname, shape, options.outtype, layer, L, tied);
    tally.add(type_wanted(gname, shape, options.outtype, layer, L, tied), type, shape.back(), t.numel());
    w.add_tensor(gname, t, type);
  };
  // Gemma stores RMSNorm weights as w with scale 1 + w (HF); llama.cpp's gemma2 multiplies by the
  // weight, so the converter adds 1 (Gemma2Model.modify_tensors).
  auto norm = [&](const at::Tensor& t) { return gemma ? t.to(at::kFloat) + 1.0 : t; };
  auto qk = [&](const at::Tensor& t, int64_t heads) {
    return permutes_qk(c.arch) ? gguf_permute_qk(t.to(at::kFloat), heads) : t;
  };
  add("token_embd.weight", model.embed, -1);
  if (c.rope.type == RopeType::rope_llama3) {
    std::vector<float> f = gguf_llama3_rope_factors(c);
    add("rope_freqs.weight", at::tensor(f, at::kFloat), -1);
  }
  for (int64_t i = 0; i < L; i++) {
    const LayerWeights& l = model.layers[i];
    const std::string b = "blk." + std::to_string(i) + ".";
    LT_CHECK(
        l.q.out_features() == c.num_heads * c.head_dim && l.k.out_features() == c.num_kv_heads * c.head_dim,
        "export.gguf: layer " << i << " q/k rows " << l.q.out_features() << "/" << l.k.out_features()
                              << " differ from heads x head_dim " << c.num_heads * c.head_dim << "/"
                              << c.num_kv_heads * c.head_dim);
    add(b + "attn_norm.weight", norm(l.input_norm), i);
    add(b + "attn_q.weight", qk(l.q.dense_weight(), c.num_heads), i);
    if (l.q.bias.defined()) add(b + "attn_q.bias", qk(l.q.bias, c.num_heads), i);
    add(b + "attn_k.weight", qk(l.k.dense_weight(), c.num_kv_heads), i);
    if (l.k.bias.defined()) add(b + "attn_k.bias", qk(l.k.bias, c.num_kv_heads), i);
    add(b + "attn_v.weight", l.v.dense_weight(), i);
    if (l.v.bias.defined()) add(b + "attn_v.bias", l.v.bias, i);
    add(b + "attn_output.weight", l.o.dense_weight(), i);
    if (l.o.bias.defined()) add(b + "attn_output.bias", l.o.bias, i);
    if (l.q_norm.defined()) add(b + "attn_q_norm.weight", l.q_norm, i);
    if (l.k_norm.defined()) add(b + "attn_k_norm.weight", l.k_norm, i);
    if (gemma) {
      add(b + "post_attention_norm.weight", norm(l.post_attn_norm), i);
      add(b + "ffn_norm.weight", norm(l.pre_ff_norm), i);
      add(b + "post_ffw_norm.weight", norm(l.post_ff_norm), i);
    } else {
      add(b + "ffn_norm.weight", l.post_attn_norm, i);
    }
    add(b + "ffn_gate.weight", l.gate.dense_weight(), i);
    if (l.gate.bias.defined()) add(b + "ffn_gate.bias", l.gate.bias, i);
    add(b + "ffn_up.weight", l.up.dense_weight(), i);
    if (l.up.bias.defined()) add(b + "ffn_up.bias", l.up.bias, i);
    add(b + "ffn_down.weight", l.down.dense_weight(), i);
    if (l.down.bias.defined()) add(b + "ffn_down.bias", l.down.bias, i);
  }
  add("output_norm.weight", norm(model.norm), -1);
  // Tied embeddings: no output.weight; llama.cpp then uses token_embd (TENSOR_DUPLICATED).
  if (!tied) add("output.weight", model.lm_head, -1);

  // A file whose rows all fell back holds no tensor of the asked type: its header names what it is.
  GgufExportResult r;
  r.outtype = tally.written(options.outtype);
  r.note = tally.note(options.outtype, r.outtype);
  w.set("general.file_type", GgufValue::u32(file_type_written(r.outtype)));
  w.write(path);
  if (!r.note.empty()) {
    std::printf("%s\n", r.note.c_str());
    std::fflush(stdout);
  }
  r.path = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) r.bytes = static_cast<uint64_t>(st.st_size);
  r.tensors = static_cast<int64_t>(w.tensor_count());
  return r;
}

}  // namespace luatune
