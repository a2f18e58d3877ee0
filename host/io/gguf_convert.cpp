// GGUF -> Hugging Face directory (see gguf_convert.h). The inverse of host/export/gguf_export.cpp's
// mapping for the architectures it reads: names, layouts, architecture keys and the tokenizer, each as
// llama.cpp's converter (convert_hf_to_gguf.py) writes them; docs/gguf.md, "GGUF in".
#include "host/io/gguf_convert.h"

#include <ATen/ATen.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/strings.h"
#include "host/io/gguf.h"
#include "host/io/safetensors.h"

namespace luatune {

const char* const kGgufLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kGgufQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kGgufDigitsRegex = "\\p{N}";

namespace {

using json = nlohmann::ordered_json;
using VT = GgufValue::Type;

// The metadata, read with one-line errors naming the file and the key.
struct Meta {
  const GgufFile& f;
  std::string path;

  const GgufValue* find(const std::string& key) const { return f.find(key); }
  [[noreturn]] void bad(const std::string& what) const { fail("convert: " + path + ": " + what); }
  const GgufValue& need(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) bad("no metadata key '" + key + "'");
    return *v;
  }
  int64_t integer(const GgufValue& v, const std::string& key) const {
    switch (v.type) {
      case VT::u8:
      case VT::u16:
      case VT::u32:
      case VT::u64:
        return int64_t(v.u);
      case VT::i8:
      case VT::i16:
      case VT::i32:
      case VT::i64:
        return v.i;
      default:
        bad("metadata key '" + key + "' is not an integer");
    }
  }
  int64_t integer(const std::string& key) const { return integer(need(key), key); }
  int64_t integer_or(const std::string& key, int64_t fallback) const {
    const GgufValue* v = find(key);
    return v ? integer(*v, key) : fallback;
  }
  double number_or(const std::string& key, double fallback) const {
    const GgufValue* v = find(key);
    if (!v) return fallback;
    if (v->type == VT::f32 || v->type == VT::f64) return v->f;
    return double(integer(*v, key));
  }
  std::string str(const std::string& key) const {
    const GgufValue& v = need(key);
    if (v.type != VT::string) bad("metadata key '" + key + "' is not a string");
    return v.s;
  }
  std::string str_or(const std::string& key, const std::string& fallback) const {
    return find(key) ? str(key) : fallback;
  }
  std::vector<std::string> strings(const std::string& key) const {
    const GgufValue& v = need(key);
    if (v.type != VT::array || v.item_type != VT::string)
      bad("metadata key '" + key + "' is not a list of strings");
    std::vector<std::string> out;
    out.reserve(v.items.size());
    for (const GgufValue& item : v.items) out.push_back(item.s);
    return out;
  }
};

// ============================================================================================
// Architecture

struct Arch {
  const char* gguf;        // general.architecture
  const char* hf_class;    // config.json's architectures[0]
  const char* model_type;  // config.json's model_type
  bool permuted_qk;        // llama.cpp permutes Q/K rows for this architecture (convert_hf_to_gguf.py)
};
const Arch kArchs[] = {
    {"llama", "LlamaForCausalLM", "llama", true},  // Llama 2/3, Mistral, SmolLM, ...
    {"qwen2", "Qwen2ForCausalLM", "qwen2", false},
    {"qwen3", "Qwen3ForCausalLM", "qwen3", false},
};

// GGUF tensor name -> Hugging Face name: the per-layer suffixes, then the model-wide names.
const std::pair<const char*, const char*> kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};
const std::pair<const char*, const char*> kModelNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

std::string hf_name(const std::string& name, const Meta& m) {
  for (const auto& [g, h] : kModelNames)
    if (name == g) return h;
  if (str_starts_with(name, "blk.")) {
    size_t dot = name.find('.', 4);
    if (dot != std::string::npos) {
      const std::string layer = name.substr(4, dot - 4), rest = name.substr(dot + 1);
      for (const auto& [g, h] : kLayerNames)
        if (rest == g) return "model.layers." + layer + "." + h;
    }
  }
  m.bad("tensor '" + name + "' has no Hugging Face name luatune knows");
}

// llama.cpp's converter permutes the rows of Q and K within each head (rotary pairs interleaved);
// this undoes it: (heads, 2, d/2, cols) was written as (heads, d/2, 2, cols).
at::Tensor unpermute(const at::Tensor& w, int64_t heads) {
  const int64_t rows = w.size(0);
  std::vector<int64_t> shape = {heads, rows / heads / 2, 2};
  for (int64_t i = 1; i < w.dim(); i++) shape.push_back(w.size(i));
  return w.reshape(shape).transpose(1, 2).reshape(w.sizes()).contiguous();
}

// ============================================================================================
// Tokenizer

// llama.cpp's pre-tokenizers (llama-vocab.cpp, by tokenizer.ggml.pre) as tokenizer.json spells them.
const char* kGpt2Regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

json split(const std::string& regex) {
  return {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
}
json byte_level(bool use_regex) {
  return {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", use_regex}};
}

json pre_tokenizer(const std::string& pre, const Meta& m) {
  // Each digit its own piece, then GPT-2's regex (llama.cpp's SMOLLM, STARCODER, REFACT, COMMAND_R, ...).
  if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "command-r" || pre == "codeshell")
    return {{"type", "Sequence"}, {"pretokenizers", {split(kGgufDigitsRegex), byte_level(true)}}};
  if (pre == "gpt-2" || pre == "mpt" || pre == "olmo") return byte_level(true);
  if (pre == "llama-bpe" || pre == "llama3" || pre == "smaug-bpe")
    return {{"type", "Sequence"}, {"pretokenizers", {split(kGgufLlama3Regex), byte_level(false)}}};
  if (pre == "qwen2")
    return {{"type", "Sequence"}, {"pretokenizers", {split(kGgufQwen2Regex), byte_level(false)}}};
  m.bad(
      "tokenizer.ggml.pre '" + pre +
      "' is not converted yet (converted: smollm, starcoder, refact, command-r, codeshell, gpt-2, mpt, olmo, "
      "llama-bpe, smaug-bpe, qwen2)");
}

// GGUF token types (gguf-py TokenType): 1 normal; 2 unknown, 3 control and 4 user-defined are added
// tokens; 6 byte (<0xXX>, SentencePiece's byte fallback).
constexpr int64_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4;

// The merges of a SentencePiece-style vocabulary (tokenizer.ggml.model "llama": Llama 2, Mistral), which a
// GGUF stores as one score per token instead. llama.cpp (llm_tokenizer_spm) merges, among adjacent
// pieces, the pair whose concatenation is a token of the highest score. HF's BPE merges the pair of
// lowest rank, so every split of a normal token into two normal tokens becomes a merge, ranked by the
// token's score, highest first (ties: lower token id, then shorter left piece), as transformers'
// GGUF loader rebuilds them (docs/gguf.md, "GGUF in").
std::vector<std::pair<std::string, std::string>> merges_from_scores(const std::vector<std::string>& tokens,
                                                                    const std::vector<int64_t>& types,
                                                                    const std::vector<float>& scores) {
  std::unordered_map<std::string, size_t> normal;
  for (size_t i = 0; i < tokens.size(); i++)
    if (types[i] == kNormal) normal.emplace(tokens[i], i);
  struct Merge {
    float score;
    size_t id, split;
  };
  std::vector<Merge> found;
  for (size_t i = 0; i < tokens.size(); i++) {
    if (types[i] != kNormal) continue;
    const std::string& t = tokens[i];
    for (size_t at = 1; at < t.size(); at++) {
      if ((static_cast<unsigned char>(t[at]) & 0xC0) == 0x80) continue;  // inside a UTF-8 character
      if (normal.count(t.substr(0, at)) && normal.count(t.substr(at))) found.push_back({scores[i], i, at});
    }
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const Merge& a, const Merge& b) { return a.score > b.score; });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(found.size());
  for (const Merge& mg : found)
    out.emplace_back(tokens[mg.id].substr(0, mg.split), tokens[mg.id].substr(mg.split));
  return out;
}

json replace_step(const std::string& from, const std::string& to) {
  return {{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
}

struct TokenizerFiles {
  json tokenizer, config, generation;
};

TokenizerFiles build_tokenizer(const Meta& m, int64_t context_length) {
  const std::string model = m.str("tokenizer.ggml.model");
  if (model != "gpt2" && model != "llama")
    m.bad("tokenizer.ggml.model '" + model +
          "' is not converted yet (converted: gpt2, byte-level BPE; llama, SentencePiece-style BPE)");
  const bool spm = model == "llama";
  const std::string pre = m.str_or("tokenizer.ggml.pre", "default");
  const std::vector<std::string> tokens = m.strings("tokenizer.ggml.tokens");
  std::vector<int64_t> types(tokens.size(), kNormal);
  if (const GgufValue* t = m.find("tokenizer.ggml.token_type")) {
    if (t->type != VT::array || t->items.size() != tokens.size())
      m.bad("tokenizer.ggml.token_type is not one integer per token");
    for (size_t i = 0; i < types.size(); i++) types[i] = m.integer(t->items[i], "tokenizer.ggml.token_type");
  }
  json merges = json::array();
  if (spm) {
    const GgufValue& sv = m.need("tokenizer.ggml.scores");
    if (sv.type != VT::array || sv.items.size() != tokens.size() ||
        (sv.item_type != VT::f32 && sv.item_type != VT::f64))
      m.bad("tokenizer.ggml.scores is not one float per token (" + std::to_string(tokens.size()) +
            " tokens)");
    std::vector<float> scores(tokens.size());
    for (size_t i = 0; i < scores.size(); i++) {
      scores[i] = static_cast<float>(sv.items[i].f);
      if (!std::isfinite(scores[i]))
        m.bad("tokenizer.ggml.scores[" + std::to_string(i) + "] is not a finite number");
    }
    for (auto& [l, r] : merges_from_scores(tokens, types, scores)) merges.push_back({l, r});
  } else {
    for (std::string& mg : m.strings("tokenizer.ggml.merges")) merges.push_back(std::move(mg));
  }
  TokenizerFiles out;
  json vocab = json::object(), added = json::array();
  // The vocabulary in id order, the first id of a repeated text. Appended to the ordered map's vector
  // directly: its operator[] searches linearly, quadratic over Gemma's 262,144 tokens.
  auto& entries = vocab.get_ref<json::object_t&>();
  std::unordered_set<std::string> seen;
  entries.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); i++) {
    if (seen.insert(tokens[i]).second) entries.Container::emplace_back(tokens[i], int64_t(i));
    // SentencePiece's user-defined tokens are matched in the raw text, as llama.cpp does (their "▁"
    // already written as spaces by the converter); byte-level ones after normalization.
    if (types[i] == kControl || types[i] == kUserDefined || (spm && types[i] == kUnknown))
      added.push_back({{"id", int64_t(i)},
                       {"content", tokens[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", types[i] == kUserDefined && !spm},
                       {"special", types[i] != kUserDefined}});
  }
  auto token_of = [&](const char* key) -> std::string {
    const int64_t id = m.integer_or(key, -1);
    if (id < 0) return "";
    if (id >= int64_t(tokens.size()))
      m.bad(std::string(key) + " " + std::to_string(id) + " is not a token id");
    return tokens[size_t(id)];
  };
  const std::string bos = token_of("tokenizer.ggml.bos_token_id"),
                    eos = token_of("tokenizer.ggml.eos_token_id");
  const std::string unk = token_of("tokenizer.ggml.unknown_token_id"),
                    pad = token_of("tokenizer.ggml.padding_token_id");
  // llama.cpp's defaults where the key is missing: BOS for a SentencePiece vocabulary, not for gpt2.
  auto flag = [&](const char* key, bool fallback) {
    const GgufValue* v = m.find(key);
    if (!v) return fallback;
    if (v->type != VT::boolean) m.bad(std::string("metadata key '") + key + "' is not a bool");
    return v->u != 0;
  };
  const bool add_bos = !bos.empty() && flag("tokenizer.ggml.add_bos_token", spm);
  // SentencePiece's dummy prefix: "▁" before the text (and after each special token), spaces as "▁".
  const bool space_prefix = spm && flag("tokenizer.ggml.add_space_prefix", true);
  const std::string kSpace = "\xe2\x96\x81";
  json post = nullptr;
  if (add_bos) {
    const int64_t bos_id = m.integer("tokenizer.ggml.bos_token_id");
    post = {
        {"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair",
         {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}},
          {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens", {{bos, {{"id", bos}, {"ids", {bos_id}}, {"tokens", {bos}}}}}}};
  }
  json normalizer = nullptr, decoder = byte_level(true);
  if (spm) {
    normalizer = {{"type", "Sequence"}, {"normalizers", json::array()}};
    if (space_prefix) normalizer["normalizers"].push_back({{"type", "Prepend"}, {"prepend", kSpace}});
    normalizer["normalizers"].push_back(replace_step(" ", kSpace));
    decoder = {{"type", "Sequence"},
               {"decoders", {replace_step(kSpace, " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
    if (space_prefix)
      decoder["decoders"].push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  }
  out.tokenizer = {{"version", "1.0"},
                   {"truncation", nullptr},
                   {"padding", nullptr},
                   {"added_tokens", added},
                   {"normalizer", normalizer},
                   {"pre_tokenizer", spm ? json(nullptr) : pre_tokenizer(pre, m)},
                   {"post_processor", post},
                   {"decoder", decoder},
                   {"model",
                    {{"type", "BPE"},
                     {"dropout", nullptr},
                     {"unk_token", spm && !unk.empty() ? json(unk) : json(nullptr)},
                     {"continuing_subword_prefix", nullptr},
                     {"end_of_word_suffix", nullptr},
                     {"fuse_unk", spm},
                     {"byte_fallback", spm},
                     // llama.cpp takes a whole pre-token that is in the vocabulary as it is for Llama 3
                     // (llm_tokenizer_bpe_session, ignore_merges), as Llama 3's tokenizer.json says.
                     {"ignore_merges", !spm && (pre == "llama-bpe" || pre == "llama3")},
                     {"vocab", vocab},
                     {"merges", merges}}}};
  out.config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                {"clean_up_tokenization_spaces", false},
                {"model_max_length", context_length}};
  if (!bos.empty()) out.config["bos_token"] = bos;
  if (!eos.empty()) out.config["eos_token"] = eos;
  if (!unk.empty()) out.config["unk_token"] = unk;
  if (!pad.empty()) out.config["pad_token"] = pad;
  out.config["add_bos_token"] = add_bos;
  if (m.find("tokenizer.chat_template")) out.config["chat_template"] = m.str("tokenizer.chat_template");
  out.generation = {{"_from_model_config", true}};
  if (!bos.empty()) out.generation["bos_token_id"] = m.integer("tokenizer.ggml.bos_token_id");
  json eos_ids = json::array();
  for (const char* key :
       {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const int64_t id = m.integer_or(key, -1);
    if (id >= 0 && std::find(eos_ids.begin(), eos_ids.end(), json(id)) == eos_ids.end())
      eos_ids.push_back(id);
  }
  if (eos_ids.size() == 1) out.generation["eos_token_id"] = eos_ids[0];
  if (eos_ids.size() > 1) out.generation["eos_token_id"] = eos_ids;
  if (!pad.empty()) out.generation["pad_token_id"] = m.integer("tokenizer.ggml.padding_token_id");
  return out;
}

}  // namespace

std::vector<float> gguf_llama3_rope_factors(double theta, int64_t head_dim, double factor,
                                            double low_freq_factor, double high_freq_factor,
                                            int64_t original_max_position) {
  // freqs = 1 / base^(arange(0, dim, 2) / dim) in float32, as the converter computes them.
  at::Tensor exps = at::arange(0, head_dim, 2, at::kFloat) / static_cast<float>(head_dim);
  at::Tensor freqs = (1.0 / at::pow(static_cast<float>(theta), exps)).to(at::kFloat).contiguous();
  const double old_len = static_cast<double>(original_max_position > 0 ? original_max_position : 8192);
  const double low_wavelen = old_len / low_freq_factor, high_wavelen = old_len / high_freq_factor;
  std::vector<float> out;
  const float* f = freqs.data_ptr<float>();
  for (int64_t i = 0; i < freqs.numel(); i++) {
    const double wavelen = 2 * M_PI / static_cast<double>(f[i]);
    double k;
    if (wavelen < high_wavelen) {
      k = 1;
    } else if (wavelen > low_wavelen) {
      k = factor;
    } else {
      const double smooth = (old_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      k = 1 / ((1 - smooth) / factor + smooth);
    }
    out.push_back(static_cast<float>(k));
  }
  return out;
}

void gguf_convert(const std::string& gguf_path, const std::string& out_dir,
                  const GgufConvertOptions& options) {
  at::ScalarType dtype = at::kFloat;
  if (options.dtype == "bfloat16") {
    dtype = at::kBFloat16;
  } else if (options.dtype == "float16") {
    dtype = at::kHalf;
  } else if (options.dtype != "float32") {
    fail_usage("convert: dtype '" + options.dtype + "' (expected float32, bfloat16 or float16)");
  }
  if (dir_exists(out_dir) && !std::filesystem::is_empty(out_dir))
    fail_usage("convert: " + out_dir + " exists and is not empty; name a new directory");
  const GgufFile f = gguf_read(gguf_path, /*with_data=*/true);
  const Meta m{f, gguf_path};
  const std::string arch_name = m.str("general.architecture");
  const Arch* arch = nullptr;
  for (const Arch& a : kArchs)
    if (arch_name == a.gguf) arch = &a;
  if (!arch)
    m.bad("general.architecture '" + arch_name + "' is not converted yet (converted: llama, qwen2, qwen3)");
  const std::string p = arch_name + ".";

  // config.json from the architecture keys (llama.cpp's LLM_KV names).
  const int64_t hidden = m.integer(p + "embedding_length"), layers = m.integer(p + "block_count");
  const int64_t heads = m.integer(p + "attention.head_count");
  const int64_t kv_heads = m.integer_or(p + "attention.head_count_kv", heads);
  const int64_t head_dim = m.integer_or(p + "attention.key_length", hidden / heads);
  const int64_t context = m.integer_or(p + "context_length", 2048);
  const int64_t vocab = int64_t(m.need("tokenizer.ggml.tokens").items.size());
  if (m.find(p + "rope.scaling.type") && m.str(p + "rope.scaling.type") != "none")
    m.bad(p + "rope.scaling.type '" + m.str(p + "rope.scaling.type") + "' is not converted yet");
  bool tied = true, biased = false;
  const GgufFile::Tensor* rope_freqs = nullptr;
  for (const GgufFile::Tensor& t : f.tensors) {
    tied &= t.name != "output.weight";
    biased |= str_ends_with(t.name, "attn_q.bias");
    if (t.name == "rope_freqs.weight") rope_freqs = &t;
  }
  TokenizerFiles tok = build_tokenizer(m, context);
  json config = {{"architectures", {arch->hf_class}},
                 {"model_type", arch->model_type},
                 {"hidden_size", hidden},
                 {"intermediate_size", m.integer(p + "feed_forward_length")},
                 {"num_hidden_layers", layers},
                 {"num_attention_heads", heads},
                 {"num_key_value_heads", kv_heads},
                 {"head_dim", head_dim},
                 {"hidden_act", "silu"},
                 {"max_position_embeddings", context},
                 {"rms_norm_eps", m.number_or(p + "attention.layer_norm_rms_epsilon", 1e-5)},
                 {"rope_theta", m.number_or(p + "rope.freq_base", 10000.0)},
                 {"attention_bias", biased},
                 {"tie_word_embeddings", tied},
                 {"vocab_size", vocab},
                 {"torch_dtype", options.dtype}};
  // Llama 3.1/3.2's rope scaling: the file holds only its factors (rope_freqs.weight). Its parameters
  // are recovered as the ones that give those factors exactly: the largest factor is `factor`, and
  // low 1, high 4, original context 8192 are every released Llama 3.1/3.2's (and the converter's
  // defaults); factors that fit no such set are refused.
  if (rope_freqs) {
    const int64_t n = rope_freqs->ne.empty() ? 0 : rope_freqs->ne[0];
    if (rope_freqs->ne.size() != 1 || n != head_dim / 2)
      m.bad("tensor rope_freqs.weight has shape other than (" + std::to_string(head_dim / 2) +
            ") (head_dim / 2)");
    const std::vector<float> got = ggml_dequantize(rope_freqs->type, rope_freqs->bytes, n);
    const double factor = *std::max_element(got.begin(), got.end());
    const double theta = config["rope_theta"].get<double>();
    const std::vector<float> want = gguf_llama3_rope_factors(theta, head_dim, factor, 1.0, 4.0, 8192);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
    if (!(worst <= 1e-6 * std::max(1.0, factor)))
      m.bad("tensor rope_freqs.weight is not Llama 3.1's rope scaling (factor " + str_from_number(factor) +
            ", low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192: off by " +
            str_from_number(worst) + ")");
    config["rope_scaling"] = {{"rope_type", "llama3"},
                              {"factor", factor},
                              {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0},
                              {"original_max_position_embeddings", 8192}};
  }
  if (tok.generation.contains("bos_token_id")) config["bos_token_id"] = tok.generation["bos_token_id"];
  if (tok.generation.contains("eos_token_id")) config["eos_token_id"] = tok.generation["eos_token_id"];

  // The weights, dequantised to float32, Q/K rows put back, then cast.
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const GgufFile::Tensor& t : f.tensors) {
    if (&t == rope_freqs) continue;  // config.json's rope_scaling now
    const std::string name = hf_name(t.name, m);
    int64_t numel = 1;
    std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());  // ggml's ne[0] is the row length
    for (int64_t n : t.ne) numel *= n;
    // The dequantised values become the tensor's storage (no second copy).
    auto* values = new std::vector<float>(ggml_dequantize(t.type, t.bytes, numel));
    at::Tensor w = at::from_blob(
        values->data(), shape, [values](void*) { delete values; }, at::kFloat);
    if (arch->permuted_qk && (str_ends_with(name, "q_proj.weight") || str_ends_with(name, "k_proj.weight"))) {
      const int64_t n_head = str_ends_with(name, "q_proj.weight") ? heads : kv_heads;
      if (w.size(0) % (2 * n_head) != 0)
        m.bad("tensor '" + t.name + "' has " + std::to_string(w.size(0)) +
              " rows, not a whole number of heads");
      w = unpermute(w, n_head);
    }
    tensors.emplace_back(name, w.to(dtype));
  }

  // Everything into a directory beside the target, then renamed into place.
  const std::string tmp = out_dir + ".partial-" + std::to_string(::getpid());
  std::filesystem::remove_all(tmp);
  dir_create(tmp);
  try {
    safetensors_save_dir(tmp, tensors);
    file_write_atomic(tmp + "/config.json", config.dump(2) + "\n");
    file_write_atomic(tmp + "/generation_config.json", tok.generation.dump(2) + "\n");
    file_write_atomic(tmp + "/tokenizer.json",
                      tok.tokenizer.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
    file_write_atomic(tmp + "/tokenizer_config.json",
                      tok.config.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
    // out_dir was missing or empty when checked above; another process converting the same file
    // into the same cache may have filled it since, and then the rename fails here (the cache
    // takes that process's directory: host/io/hub_cache.cpp).
    std::error_code ec;
    if (dir_exists(out_dir)) std::filesystem::remove(out_dir, ec);
    std::filesystem::rename(tmp, out_dir, ec);
    if (ec) fail("convert: cannot move the converted model into '" + out_dir + "': " + ec.message());
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace luatune
