// HF config.json <-> ModelConfig. We read the fields the forward pass depends on, refuse the ones
// that would change the maths in ways we do not implement (MoE, quantization, partial RoPE,
// unknown RoPE types), and carry every other field through unchanged so a saved config.json keeps
// what the user's file had.
#include "host/model/config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "host/core/enum_names.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/core/strings.h"
#include "host/io/hub_cache.h"

namespace luatune {

using json = nlohmann::json;

namespace {

struct ArchInfo {
  ModelArch arch;
  const char* hf_class;
  const char* model_type;
};

const ArchInfo kArchs[] = {
    {ModelArch::llama, "LlamaForCausalLM", "llama"},    {ModelArch::mistral, "MistralForCausalLM", "mistral"},
    {ModelArch::qwen2, "Qwen2ForCausalLM", "qwen2"},    {ModelArch::qwen3, "Qwen3ForCausalLM", "qwen3"},
    {ModelArch::gemma2, "Gemma2ForCausalLM", "gemma2"},
};

const ArchInfo& arch_info(ModelArch a) {
  for (const auto& i : kArchs)
    if (i.arch == a) return i;
  LT_ASSERT(false, "unknown ModelArch");
}

constexpr const char* kSequenceClassification = "ForSequenceClassification";

// Fields this file reads (and writes back itself); everything else goes to extra_json.
const std::set<std::string> kOwnedKeys = {"architectures",
                                          "model_type",
                                          "vocab_size",
                                          "hidden_size",
                                          "intermediate_size",
                                          "num_hidden_layers",
                                          "num_attention_heads",
                                          "num_key_value_heads",
                                          "head_dim",
                                          "hidden_act",
                                          "hidden_activation",
                                          "max_position_embeddings",
                                          "rms_norm_eps",
                                          "rope_theta",
                                          "rope_scaling",
                                          "rope_parameters",
                                          "tie_word_embeddings",
                                          "attention_bias",
                                          "mlp_bias",
                                          "sliding_window",
                                          "use_sliding_window",
                                          "max_window_layers",
                                          "layer_types",
                                          "query_pre_attn_scalar",
                                          "attn_logit_softcapping",
                                          "final_logit_softcapping",
                                          "bos_token_id",
                                          "eos_token_id",
                                          "pad_token_id",
                                          "initializer_range",
                                          "torch_dtype",
                                          "dtype"};

// Fields whose presence means a model we cannot run faithfully.
const char* const kRefusedKeys[] = {"num_experts", "num_local_experts", "moe_intermediate_size",
                                    "n_routed_experts"};

class Reader {
 public:
  Reader(const json& j, const std::string& source) : j_(j), source_(source) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  bool present(const char* key) const { return j_.contains(key); }  // given, possibly as null

  int64_t integer(const char* key, int64_t def, bool required = false) const {
    if (!has(key)) {
      LT_CHECK(!required, source_ << ": missing required field \"" << key << "\" (an integer)");
      return def;
    }
    const json& v = j_[key];
    // Within +-2^53 (exact as a double): a larger value is no size or id a model has, and
    // converting 1e300 or 2^64-1 to int64 would wrap into something that passes later checks.
    constexpr double kMax = 9007199254740992.0;
    const bool whole =
        v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(kMax)
                                                 : whole && std::fabs(v.get<double>()) <= kMax;
    LT_CHECK(whole && in_range, source_ << ": field \"" << key << "\" must be an integer"
                                        << (whole ? " between -2^53 and 2^53" : "") << ", got "
                                        << json_excerpt(v));
    return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
  }
  double number(const char* key, double def) const {
    if (!has(key)) return def;
    LT_CHECK(j_[key].is_number(),
             source_ << ": field \"" << key << "\" must be a number, got " << json_excerpt(j_[key]));
    return j_[key].get<double>();
  }
  bool boolean(const char* key, bool def) const {
    if (!has(key)) return def;
    LT_CHECK(j_[key].is_boolean(),
             source_ << ": field \"" << key << "\" must be true or false, got " << json_excerpt(j_[key]));
    return j_[key].get<bool>();
  }
  std::string string(const char* key, const std::string& def) const {
    if (!has(key)) return def;
    LT_CHECK(j_[key].is_string(),
             source_ << ": field \"" << key << "\" must be a string, got " << json_excerpt(j_[key]));
    return j_[key].get<std::string>();
  }

 private:
  const json& j_;
  const std::string& source_;
};

// Each activation's name as written back, then the other names transformers gives it.
const EnumName<Activation> kActivations[] = {
    {Activation::act_silu, "silu"},          {Activation::act_gelu_tanh, "gelu_pytorch_tanh"},
    {Activation::act_gelu, "gelu"},          {Activation::act_silu, "swish"},
    {Activation::act_gelu_tanh, "gelu_new"}, {Activation::act_gelu_tanh, "gelu_fast"}};

Activation parse_act(const std::string& name, const std::string& source) {
  if (const auto* row = enum_row(kActivations, name)) return row->value;
  fail(source + ": hidden_act \"" + name + "\" is not supported (supported: silu, gelu, gelu_pytorch_tanh)");
}

const char* act_name(Activation a) {
  return enum_name(kActivations, a, "silu");
}

// rope_scaling (transformers v4) or rope_parameters (v5, which also holds rope_theta).
void parse_rope(const json& j, ModelConfig& c, const std::string& source) {
  Reader r(j, source);
  c.rope.theta = r.number("rope_theta", c.rope.theta);
  const json* params = nullptr;
  const char* where = "rope_scaling";
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    params = &j["rope_parameters"];
    where = "rope_parameters";
    c.rope_in_parameters = true;
  } else if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    params = &j["rope_scaling"];
  }
  if (!params) return;
  LT_CHECK(params->is_object(),
           source << ": " << where << " must be an object, got " << json_excerpt(*params));
  std::string w = source + ": " + where;
  Reader p(*params, w);
  c.rope.theta = p.number("rope_theta", c.rope.theta);
  std::string type = p.string("rope_type", p.string("type", "default"));
  if (type == "default") {
    c.rope.type = RopeType::rope_default;
  } else if (type == "linear") {
    c.rope.type = RopeType::rope_linear;
    c.rope.factor = p.number("factor", 0);
    LT_CHECK(c.rope.factor >= 1, w << ".factor must be >= 1 for linear RoPE scaling");
  } else if (type == "llama3") {
    c.rope.type = RopeType::rope_llama3;
    for (const char* k :
         {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      LT_CHECK(p.has(k), w << ": rope_type \"llama3\" needs \"" << k << "\"");
    c.rope.factor = p.number("factor", 0);
    c.rope.low_freq_factor = p.number("low_freq_factor", 0);
    c.rope.high_freq_factor = p.number("high_freq_factor", 0);
    c.rope.original_max_position = p.integer("original_max_position_embeddings", 0);
    LT_CHECK(c.rope.high_freq_factor > c.rope.low_freq_factor,
             w << ": high_freq_factor must be greater than low_freq_factor");
  } else if (type == "yarn") {
    c.rope.type = RopeType::rope_yarn;
    LT_CHECK(p.has("factor"), w << ": rope_type \"yarn\" needs \"factor\"");
    LT_CHECK(!p.has("mscale") && !p.has("mscale_all_dim"),
             w << ": yarn with mscale/mscale_all_dim (DeepSeek style) is not supported");
    c.rope.factor = p.number("factor", 1);
    c.rope.original_max_position = p.integer("original_max_position_embeddings", 0);
    c.rope.beta_fast = p.number("beta_fast", 32);
    c.rope.beta_slow = p.number("beta_slow", 1);
    c.rope.truncate = p.boolean("truncate", true);
    c.rope.attention_factor =
        p.number("attention_factor", c.rope.factor > 1 ? 0.1 * std::log(c.rope.factor) + 1.0 : 1.0);
  } else {
    fail(w + ": rope_type \"" + type + "\" is not supported (supported: default, linear, llama3, yarn)");
  }
}

// Every scaled type writes its factor; json sorts the keys, so the order they are set in is free.
json rope_to_json(const RopeConfig& r) {
  if (r.type == RopeType::rope_default) return json();
  json o = {{"factor", r.factor}};
  if (r.type == RopeType::rope_linear) o["rope_type"] = "linear";
  if (r.type == RopeType::rope_llama3) {
    o["rope_type"] = "llama3";
    o["low_freq_factor"] = r.low_freq_factor;
    o["high_freq_factor"] = r.high_freq_factor;
    o["original_max_position_embeddings"] = r.original_max_position;
  }
  if (r.type == RopeType::rope_yarn) {
    o["rope_type"] = "yarn";
    o["attention_factor"] = r.attention_factor;
    o["beta_fast"] = r.beta_fast;
    o["beta_slow"] = r.beta_slow;
    if (!r.truncate) o["truncate"] = false;
    if (r.original_max_position > 0) o["original_max_position_embeddings"] = r.original_max_position;
  }
  return o;
}

}  // namespace

std::string ModelConfig::arch_name() const {
  std::string name = arch_info(arch).hf_class;
  return score_head ? name.substr(0, name.size() - std::strlen("ForCausalLM")) + kSequenceClassification
                    : name;
}
std::string ModelConfig::model_type() const {
  return arch_info(arch).model_type;
}

double ModelConfig::softmax_scale() const {
  if (attn_scale > 0) return attn_scale;
  return 1.0 / std::sqrt(static_cast<double>(head_dim));
}

ModelArch model_arch_parse(const std::string& name, const std::string& source) {
  std::vector<std::string> names;
  for (const auto& i : kArchs) {
    if (name == i.hf_class || name == i.model_type) return i.arch;
    names.push_back(i.model_type);
  }
  std::string near = str_nearest(name, names);
  fail(source + ": architecture \"" + name + "\" is not supported (supported: " +
       "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM)" +
       (near.empty() ? "" : "; did you mean \"" + near + "\"?"));
}

namespace {

ModelConfig defaults_for(ModelArch arch) {
  ModelConfig c;
  c.arch = arch;
  switch (c.arch) {
    case ModelArch::llama:
      c.vocab_size = 32000, c.hidden_size = 4096, c.intermediate_size = 11008, c.num_layers = 32;
      c.num_heads = 32, c.max_position_embeddings = 2048, c.bos_token_id = 1, c.eos_token_ids = {2};
      break;
    case ModelArch::mistral:
      c.vocab_size = 32000, c.hidden_size = 4096, c.intermediate_size = 14336, c.num_layers = 32;
      c.num_heads = 32, c.num_kv_heads = 8, c.max_position_embeddings = 4096 * 32;
      c.bos_token_id = 1, c.eos_token_ids = {2}, c.sliding_window = 4096;
      break;
    case ModelArch::qwen2:
    case ModelArch::qwen3:
      c.vocab_size = 151936, c.hidden_size = 4096, c.intermediate_size = 22016, c.num_layers = 32;
      c.num_heads = 32, c.num_kv_heads = 32, c.max_position_embeddings = 32768;
      c.max_window_layers = 28, c.sliding_window = 4096;
      if (c.arch == ModelArch::qwen2) c.attention_bias = true;
      if (c.arch == ModelArch::qwen3) c.head_dim = 128, c.head_dim_explicit = true, c.qk_norm = true;
      break;
    case ModelArch::gemma2:
      c.vocab_size = 256000, c.hidden_size = 2304, c.intermediate_size = 9216, c.num_layers = 26;
      c.num_heads = 8, c.num_kv_heads = 4, c.head_dim = 256, c.head_dim_explicit = true;
      c.max_position_embeddings = 8192, c.pad_token_id = 0, c.eos_token_ids = {1}, c.bos_token_id = 2;
      c.tie_word_embeddings = true, c.query_pre_attn_scalar = 256, c.sliding_window = 4096;
      c.final_logit_softcap = 30.0, c.attn_logit_softcap = 50.0, c.act = Activation::act_gelu_tanh;
      c.gemma_norms = true;
      break;
  }
  return c;
}

// The upper bounds model_config_finalize enforces, each with what real models reach, for the message.
struct ModelSizeLimit {
  const char* key;
  int64_t ModelConfig::*field;
  int64_t max;
  const char* largest;  // what a large released model has, for the message
};
const ModelSizeLimit kModelSizeLimits[] = {
    {"num_hidden_layers", &ModelConfig::num_layers, kModelMaxLayers, "Llama 3.1 405B has 126"},
    {"hidden_size", &ModelConfig::hidden_size, kModelMaxHiddenSize, "Llama 3.1 405B has 16384"},
    {"intermediate_size", &ModelConfig::intermediate_size, kModelMaxIntermediateSize,
     "Llama 3.1 405B has 53248"},
    {"vocab_size", &ModelConfig::vocab_size, kModelMaxVocabSize, "Gemma 3 has 262144"},
    {"num_attention_heads", &ModelConfig::num_heads, kModelMaxHeads, "Llama 3.1 405B has 128"},
    {"num_key_value_heads", &ModelConfig::num_kv_heads, kModelMaxHeads, "Llama 3.1 405B has 8"},
    {"head_dim", &ModelConfig::head_dim, kModelMaxHeadDim, "Gemma 2 has 256"},
};

}  // namespace

void model_config_finalize(ModelConfig& c, const std::string& source) {
  LT_CHECK(
      c.vocab_size > 0 && c.hidden_size > 0 && c.intermediate_size > 0 && c.num_layers > 0 && c.num_heads > 0,
      source << ": vocab_size, hidden_size, intermediate_size, num_hidden_layers and "
                "num_attention_heads must all be positive");
  // Sizes far beyond any released model are typos (1e6 layers); refused here, before anything is
  // sized from them, instead of ending in a bad_alloc (docs/limits.md).
  for (const ModelSizeLimit& l : kModelSizeLimits) {
    const int64_t v = c.*(l.field);
    LT_CHECK(v <= l.max, source << ": " << l.key << " is " << v << ", more than luatune's limit of " << l.max
                                << " (" << l.largest << "; docs/limits.md)");
  }
  if (c.num_kv_heads <= 0) c.num_kv_heads = c.num_heads;
  LT_CHECK(c.num_heads % c.num_kv_heads == 0, source << ": num_attention_heads (" << c.num_heads
                                                     << ") must be a multiple of num_key_value_heads ("
                                                     << c.num_kv_heads << ")");
  if (c.head_dim <= 0) {
    LT_CHECK(c.hidden_size % c.num_heads == 0, source << ": hidden_size (" << c.hidden_size
                                                      << ") is not divisible by num_attention_heads ("
                                                      << c.num_heads << "); set head_dim explicitly");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  LT_CHECK(c.head_dim % 2 == 0, source << ": head_dim (" << c.head_dim << ") must be even for RoPE");
  if (c.arch == ModelArch::gemma2 && c.query_pre_attn_scalar <= 0) c.query_pre_attn_scalar = c.head_dim;
  c.attn_scale = c.arch == ModelArch::gemma2 ? 1.0 / std::sqrt(c.query_pre_attn_scalar) : 0.0;
  if (c.layer_sliding.size() != static_cast<size_t>(c.num_layers)) {
    c.layer_sliding.assign(c.num_layers, false);
    for (int64_t i = 0; i < c.num_layers; i++) {
      switch (c.arch) {
        case ModelArch::mistral:
          c.layer_sliding[i] = c.sliding_window > 0;
          break;
        case ModelArch::qwen2:
        case ModelArch::qwen3:
          c.layer_sliding[i] = c.use_sliding_window && c.sliding_window > 0 && i >= c.max_window_layers;
          break;
        case ModelArch::gemma2:
          c.layer_sliding[i] = c.sliding_window > 0 && i % 2 == 0;
          break;
        case ModelArch::llama:
          break;
      }
    }
  }
  for (bool s : c.layer_sliding)
    LT_CHECK(!s || c.sliding_window > 0,
             source << ": layer_types has sliding_attention but sliding_window is not set");
}

ModelConfig model_config_parse(const std::string& text, const std::string& source) {
  json j = json_parse_checked(text, source);
  LT_CHECK(j.is_object(), source << ": expected a JSON object");
  Reader r(j, source);
  std::string arch;
  if (r.has("architectures")) {
    LT_CHECK(
        j["architectures"].is_array() && !j["architectures"].empty() && j["architectures"][0].is_string(),
        source << ": \"architectures\" must be a non-empty list of strings");
    arch = j["architectures"][0].get<std::string>();
  } else {
    arch = r.string("model_type", "");
    LT_CHECK(!arch.empty(), source << ": missing required field \"architectures\" (or \"model_type\")");
  }
  for (const char* k : kRefusedKeys)
    LT_CHECK(!r.has(k), source << ": field \"" << k
                               << "\" is not supported (mixture-of-experts models are not "
                                  "implemented)");
  if (r.has("quantization_config")) {
    // bitsandbytes 4-bit checkpoints load (their Linears stay 4-bit); GPTQ, AWQ, 8-bit, FP8 do not.
    const json& q = j["quantization_config"];
    const bool bnb4 = q.is_object() && q.value("quant_method", "") == "bitsandbytes" &&
                      (q.value("load_in_4bit", false) || q.value("_load_in_4bit", false));
    LT_CHECK(bnb4, source << ": quantization_config " << (q.is_object() ? q.value("quant_method", "?") : "?")
                          << " is not supported (only bitsandbytes 4-bit, nf4 or fp4)");
  }
  LT_CHECK(r.number("partial_rotary_factor", 1.0) == 1.0,
           source << ": field \"partial_rotary_factor\" != 1 is not supported");

  // Reward models: <Family>ForSequenceClassification with a single label (HF derives num_labels
  // from id2label, else num_labels, else 2).
  const size_t suffix = std::strlen(kSequenceClassification);
  const bool score_head =
      arch.size() > suffix && arch.compare(arch.size() - suffix, suffix, kSequenceClassification) == 0;
  if (score_head) {
    int64_t labels = j.contains("id2label") && j["id2label"].is_object()
                         ? static_cast<int64_t>(j["id2label"].size())
                         : r.integer("num_labels", 2);
    LT_CHECK(labels == 1, source << ": " << arch << " with " << labels
                                 << " labels is not supported (a reward model has one: num_labels 1)");
    arch = arch.substr(0, arch.size() - suffix) + "ForCausalLM";
  }
  ModelConfig c = defaults_for(model_arch_parse(arch, source));
  c.score_head = score_head;
  c.vocab_size = r.integer("vocab_size", 0, true);
  c.hidden_size = r.integer("hidden_size", 0, true);
  c.intermediate_size = r.integer("intermediate_size", 0, true);
  c.num_layers = r.integer("num_hidden_layers", 0, true);
  c.num_heads = r.integer("num_attention_heads", 0, true);
  // As HF's configs: a missing key takes the architecture's default, an explicit null means
  // "as many as the query heads".
  if (r.present("num_key_value_heads"))
    c.num_kv_heads = r.integer("num_key_value_heads", 0);
  else if (c.arch == ModelArch::llama)
    c.num_kv_heads = 0;
  c.head_dim_explicit = r.has("head_dim");
  c.head_dim =
      r.integer("head_dim", c.arch == ModelArch::qwen3 || c.arch == ModelArch::gemma2 ? c.head_dim : 0);
  if (c.arch == ModelArch::qwen3 && !c.head_dim_explicit) c.head_dim_explicit = true;
  // Gemma 2 reads only hidden_activation; the others only hidden_act (as their HF modules do).
  c.act_name = c.arch == ModelArch::gemma2 ? r.string("hidden_activation", "gelu_pytorch_tanh")
                                           : r.string("hidden_act", "silu");
  c.act = parse_act(c.act_name, source);
  c.max_position_embeddings = r.integer("max_position_embeddings", c.max_position_embeddings);
  c.rms_norm_eps = r.number("rms_norm_eps", c.rms_norm_eps);
  parse_rope(j, c, source);
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", c.tie_word_embeddings);
  if (c.arch == ModelArch::llama || c.arch == ModelArch::qwen3) {
    c.attention_bias = r.boolean("attention_bias", false);
    c.o_bias = c.attention_bias;  // o_proj has bias=attention_bias in both
  }
  if (c.arch == ModelArch::gemma2)
    LT_CHECK(!r.boolean("attention_bias", false),
             source << ": attention_bias=true is not supported for gemma2");
  c.mlp_bias = r.boolean("mlp_bias", false);
  LT_CHECK(!c.mlp_bias || c.arch == ModelArch::llama,
           source << ": mlp_bias=true is only supported for llama");
  // Missing: the architecture's default window (4096); explicit null: no window.
  if (r.present("sliding_window")) c.sliding_window = r.integer("sliding_window", 0);
  if (c.arch == ModelArch::llama) c.sliding_window = 0;
  c.use_sliding_window = r.boolean("use_sliding_window", false);
  c.max_window_layers = r.integer("max_window_layers", c.max_window_layers);
  c.query_pre_attn_scalar = r.number("query_pre_attn_scalar", c.query_pre_attn_scalar);
  if (c.arch == ModelArch::gemma2) {
    // Missing: Gemma 2's defaults (50, 30); explicit null: off.
    if (r.present("attn_logit_softcapping")) c.attn_logit_softcap = r.number("attn_logit_softcapping", 0.0);
    if (r.present("final_logit_softcapping"))
      c.final_logit_softcap = r.number("final_logit_softcapping", 0.0);
    LT_CHECK(!r.boolean("use_bidirectional_attention", false),
             source << ": field \"use_bidirectional_attention\" = true is not supported");
  } else {
    LT_CHECK(!r.has("attn_logit_softcapping") && !r.has("final_logit_softcapping"),
             source << ": logit softcapping is only supported for gemma2");
  }
  c.layer_sliding.clear();
  // HF reads layer_types for Qwen2/Qwen3/Gemma 2 only (Mistral slides every layer, Llama none).
  if (r.has("layer_types") && c.arch != ModelArch::mistral && c.arch != ModelArch::llama) {
    const json& lt = j["layer_types"];
    LT_CHECK(lt.is_array() && static_cast<int64_t>(lt.size()) == c.num_layers,
             source << ": \"layer_types\" must list one entry per layer (" << c.num_layers << ")");
    for (size_t i = 0; i < lt.size(); i++) {
      std::string t = lt[i].is_string() ? lt[i].get<std::string>() : "";
      LT_CHECK(t == "full_attention" || t == "sliding_attention",
               source << ": layer_types[" << i
                      << "] must be \"full_attention\" or \"sliding_attention\", got "
                      << json_excerpt(lt[i]));
      c.layer_sliding.push_back(t == "sliding_attention");
    }
  }
  // Qwen2/Qwen3 drop the window altogether unless use_sliding_window is set.
  if ((c.arch == ModelArch::qwen2 || c.arch == ModelArch::qwen3) && !c.use_sliding_window) {
    c.sliding_window = 0;
    c.layer_sliding.assign(c.num_layers, false);
  }
  LT_CHECK(
      r.number("attention_dropout", 0.0) == 0.0,
      source << ": field \"attention_dropout\" > 0 is not supported (attention dropout is not implemented)");
  c.bos_token_id = r.integer("bos_token_id", c.bos_token_id);
  c.pad_token_id = r.integer("pad_token_id", c.pad_token_id);
  if (r.has("eos_token_id")) {
    const json& e = j["eos_token_id"];
    c.eos_token_ids.clear();
    if (e.is_array()) {
      for (const auto& v : e) {
        LT_CHECK(v.is_number_integer(), source << ": eos_token_id must be an integer or a list of integers");
        c.eos_token_ids.push_back(v.get<int64_t>());
      }
    } else {
      c.eos_token_ids.push_back(r.integer("eos_token_id", -1));
    }
  }
  c.initializer_range = r.number("initializer_range", c.initializer_range);
  c.torch_dtype = r.string("torch_dtype", r.string("dtype", "float32"));

  json extra = json::object();
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!kOwnedKeys.count(it.key())) extra[it.key()] = it.value();
  c.extra_json = extra.dump();
  model_config_finalize(c, source);
  return c;
}

ModelConfig model_config_with(const std::string& arch, const std::string& fields_json,
                              const std::string& source) {
  ModelConfig base = defaults_for(model_arch_parse(arch, source));
  model_config_finalize(base, source);
  json j = json::parse(model_config_to_json(base));
  json fields = json::parse(fields_json);
  std::vector<std::string> valid(kOwnedKeys.begin(), kOwnedKeys.end());
  for (const char* k : {"attention_dropout", "pretraining_tp", "use_cache", "transformers_version"})
    valid.push_back(k);
  for (auto it = fields.begin(); it != fields.end(); ++it) {
    if (std::find(valid.begin(), valid.end(), it.key()) == valid.end()) {
      std::string near = str_nearest(it.key(), valid);
      fail_usage(source + ": unknown config.json field \"" + it.key() + "\"" +
                 (near.empty() ? "" : " (did you mean \"" + near + "\"?)"));
    }
    j[it.key()] = it.value();
  }
  // Derived fields follow the new sizes unless given: head_dim from hidden/heads, layer_types
  // from the layer count.
  if (!fields.contains("head_dim") && !base.head_dim_explicit) j.erase("head_dim");
  if (!fields.contains("layer_types")) j.erase("layer_types");
  if (fields.contains("num_attention_heads") && !fields.contains("num_key_value_heads") &&
      base.num_kv_heads == base.num_heads)
    j.erase("num_key_value_heads");
  return model_config_parse(j.dump(), source);
}

ModelConfig model_config_load(const std::string& path_or_name) {
  const std::string path = model_path_from_hub(path_or_name);  // "org/name": its snapshot in the hub cache
  std::string file = dir_exists(path) ? path + "/config.json" : path;
  LT_CHECK(file_exists(file), file << ": not found (a Hugging Face model directory has a config.json)");
  return model_config_parse(file_read(file), file);
}

std::string model_config_to_json(const ModelConfig& c) {
  json j = json::parse(c.extra_json);
  j["architectures"] = {c.arch_name()};
  j["model_type"] = c.model_type();
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  if (c.head_dim_explicit || c.head_dim * c.num_heads != c.hidden_size) j["head_dim"] = c.head_dim;
  j[c.arch == ModelArch::gemma2 ? "hidden_activation" : "hidden_act"] =
      c.act_name.empty() ? std::string(act_name(c.act)) : c.act_name;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  json rope = rope_to_json(c.rope);
  if (c.rope_in_parameters) {
    if (rope.is_null()) rope = {{"rope_type", "default"}};
    rope["rope_theta"] = c.rope.theta;
    j["rope_parameters"] = rope;
  } else {
    j["rope_theta"] = c.rope.theta;
    j["rope_scaling"] = rope;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.arch == ModelArch::llama || c.arch == ModelArch::qwen3 || c.arch == ModelArch::gemma2)
    j["attention_bias"] = c.attention_bias;
  if (c.arch == ModelArch::llama) j["mlp_bias"] = c.mlp_bias;
  if (c.arch != ModelArch::llama)
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json();
  if (c.arch == ModelArch::qwen2 || c.arch == ModelArch::qwen3) {
    j["use_sliding_window"] = c.use_sliding_window;
    j["max_window_layers"] = c.max_window_layers;
  }
  if (c.arch != ModelArch::mistral && c.arch != ModelArch::llama) {
    json types = json::array();
    for (bool s : c.layer_sliding) types.push_back(s ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
  }
  if (c.arch == ModelArch::gemma2) {
    // transformers v5 declares it an int; write an integer when it is one.
    double q = c.query_pre_attn_scalar;
    j["query_pre_attn_scalar"] = q == std::floor(q) ? json(static_cast<int64_t>(q)) : json(q);
    j["attn_logit_softcapping"] = c.attn_logit_softcap > 0 ? json(c.attn_logit_softcap) : json();
    j["final_logit_softcapping"] = c.final_logit_softcap > 0 ? json(c.final_logit_softcap) : json();
  }
  j["bos_token_id"] = c.bos_token_id >= 0 ? json(c.bos_token_id) : json();
  if (c.eos_token_ids.size() == 1)
    j["eos_token_id"] = c.eos_token_ids[0];
  else if (c.eos_token_ids.empty())
    j["eos_token_id"] = json();
  else
    j["eos_token_id"] = c.eos_token_ids;
  if (c.pad_token_id >= 0) j["pad_token_id"] = c.pad_token_id;
  j["initializer_range"] = c.initializer_range;
  j["torch_dtype"] = c.torch_dtype;
  return j.dump(2) + "\n";
}

}  // namespace luatune
