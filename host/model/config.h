// The model configuration: one struct for every supported decoder-only family, read from and
// written to Hugging Face config.json. Per-architecture switches (biases, norms, softcaps, sliding
// windows) are explicit fields so the transformer code never branches on a family name.
// Facts and sources: docs/hf_models.md, "config.json" and "Weights and the forward pass".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace luatune {

enum class ModelArch { llama, mistral, qwen2, qwen3, gemma2 };

enum class RopeType { rope_default, rope_linear, rope_llama3, rope_yarn };

struct RopeConfig {
  RopeType type = RopeType::rope_default;
  double theta = 10000.0;
  double factor = 1.0;                       // linear, llama3, yarn
  double low_freq_factor = 1.0;              // llama3
  double high_freq_factor = 4.0;             // llama3
  int64_t original_max_position = 0;         // llama3, yarn
  double attention_factor = 1.0;             // yarn: cos/sin scale
  double beta_fast = 32.0, beta_slow = 1.0;  // yarn
  bool truncate = true;                      // yarn: round the correction range to whole dims
};

enum class Activation { act_silu, act_gelu_tanh, act_gelu };

struct ModelConfig {
  ModelArch arch = ModelArch::llama;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  bool head_dim_explicit = false;  // written to config.json when set or when != hidden/heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool rope_in_parameters = false;  // the file used transformers v5's "rope_parameters" form
  Activation act = Activation::act_silu;
  std::string act_name;  // as config.json names it (written back unchanged); "" = from `act`
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v (and o for Llama's attention_bias) biases
  bool o_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;      // Qwen3: per-head RMSNorm on q and k before RoPE
  bool gemma_norms = false;  // Gemma2: (1 + w) RMSNorm, four norms per layer, sqrt(hidden) embed scale
  double attn_scale = 0.0;   // softmax scale; 0 = head_dim^-0.5
  double query_pre_attn_scalar = 0.0;  // Gemma2 (kept for config.json)
  double attn_logit_softcap = 0.0;     // 0 = off
  double final_logit_softcap = 0.0;    // 0 = off
  int64_t sliding_window = 0;          // 0 = none
  std::vector<bool> layer_sliding;     // per layer: uses the sliding window
  int64_t bos_token_id = -1, pad_token_id = -1;
  std::vector<int64_t> eos_token_ids;
  double initializer_range = 0.02;
  std::string torch_dtype = "float32";  // as found in / written to config.json
  std::string extra_json = "{}";        // fields we carry through unchanged (JSON object text)
  // Mistral/Qwen2 details kept for a faithful config.json on save.
  bool use_sliding_window = false;
  int64_t max_window_layers = 0;
  // A <Family>ForSequenceClassification checkpoint with one label (a reward model): the body and
  // score.weight (1, C), no lm_head. The body loads as a Model; the score head is the reward
  // model's (host/train/reward.h).
  bool score_head = false;

  std::string arch_name() const;   // "LlamaForCausalLM" ("LlamaForSequenceClassification": score_head)
  std::string model_type() const;  // "llama"
  double softmax_scale() const;
};

// Upper bounds on config.json sizes (model_config_finalize; docs/limits.md): several times the
// largest released models, low enough that a typo fails before anything is allocated from it.
constexpr int64_t kModelMaxLayers = 1024;
constexpr int64_t kModelMaxHiddenSize = 131072;
constexpr int64_t kModelMaxIntermediateSize = 1048576;
constexpr int64_t kModelMaxVocabSize = 16777216;  // 2^24; token ids are stored in 31 bits
constexpr int64_t kModelMaxHeads = 4096;
constexpr int64_t kModelMaxHeadDim = 8192;

// Reads `dir`/config.json (or the file itself). Unsupported architectures or fields fail naming them.
ModelConfig model_config_load(const std::string& path);
ModelConfig model_config_parse(const std::string& json_text, const std::string& source);
// HF config.json text for `c` (fields we own overwrite those carried in extra_json).
std::string model_config_to_json(const ModelConfig& c);
// models.init: `arch`'s defaults with `fields_json` (a JSON object of config.json keys) on top.
// A key config.json does not have for these models fails, naming the nearest valid key.
ModelConfig model_config_with(const std::string& arch, const std::string& fields_json,
                              const std::string& source);
// Derived fields and consistency checks (heads divide, sizes positive); `source` names the origin.
void model_config_finalize(ModelConfig& c, const std::string& source);
ModelArch model_arch_parse(const std::string& name, const std::string& source);

}  // namespace luatune
