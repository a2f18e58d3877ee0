// LLaMA-Adapter (PEFT's adaption prompt): the gated prompt attention of one layer, applying prompts
// to the top layers of a model, and PEFT's ADAPTION_PROMPT directory in and out. What PEFT does
// and where we read it: docs/lora.md, section "LLaMA-Adapter".
#include "host/adapt/adaption_prompt.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <memory>

#include "host/adapt/peft.h"
#include "host/core/error.h"

namespace luatune {

using json = nlohmann::json;

// ============================================================================================
// The adapter's attention

at::Tensor AdaptionPrompt::forward(const LayerWeights& L, const ModelConfig& c, const at::Tensor& q) const {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const int64_t KV = c.num_kv_heads, A = prompt.size(1);
  const at::ScalarType dtype = q.scalar_type();
  // The prompt goes through the frozen projections in the model's dtype (PEFT keeps it there).
  at::Tensor p = prompt.to(dtype);  // (1, A, C)
  // (1, A, KV*D) -> (1, KV, A, D) -> (1, H, A, D): each KV head serves H/KV consecutive query
  // heads, as for the layer's own keys. Batch 1 broadcasts over B in the matmuls.
  auto heads = [&](const at::Tensor& x) {
    return x.view({1, A, KV, D}).transpose(1, 2).repeat_interleave(H / KV, 1);
  };
  at::Tensor k = heads(L.k.base_forward(p)), v = heads(L.v.base_forward(p));
  // No mask (every position sees the whole prompt) and no RoPE on the prompt's keys.
  at::Tensor scores = at::matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(D));  // (B, H, T, A)
  at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(dtype);
  at::Tensor ctx = at::matmul(gate.to(dtype) * probs, v);  // (B, H, T, D)
  ctx = ctx.transpose(1, 2).reshape({B, T, H * D});
  // o_proj without its bias: the layer's own output already carries it once, and a zero gate must
  // leave the model unchanged.
  Linear o = L.o;
  o.bias = at::Tensor();
  return o.base_forward(ctx);  // (B, T, C)
}

std::vector<std::pair<std::string, at::Tensor*>> AdaptionPrompt::parameters() {
  return {{"adaption_prompt", &prompt}, {"adaption_gate", &gate}};
}

AdaptionPrompt* adaption_prompt_of(const LayerWeights& L) {
  return dynamic_cast<AdaptionPrompt*>(L.attn_branch.get());
}

// ============================================================================================
// Applying prompts to a model

namespace {

int64_t apply_config(Model& m, const AdaptionPromptConfig& c, uint64_t seed, const std::string& where) {
  const ModelConfig& mc = m.config;
  LT_CHECK(c.adapter_len >= 1, where << ": adapter_len must be a positive integer, got " << c.adapter_len);
  LT_CHECK(c.adapter_layers >= 1 && c.adapter_layers <= mc.num_layers,
           where << ": adapter_layers must be in 1.." << mc.num_layers << " (the model's layers), got "
                 << c.adapter_layers);
  LT_CHECK(mc.arch != ModelArch::qwen3 && mc.arch != ModelArch::gemma2,
           where << ": " << mc.model_type()
                 << " models are not supported (adaption prompts follow PEFT's maths for llama and mistral; "
                    "luatune also takes qwen2; expected one of those)");
  LT_CHECK(
      m.adapter_parameters().empty(),
      where << ": the model already has adapters (LoRA and adaption prompts are not combined, nor applied "
               "twice; start from a fresh model)");
  peft_freeze_base(m);

  // Drawn in float32 on CPU, lowest adapted layer first, then moved: the same seed gives the same
  // prompts on every device.
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const auto on_device = at::TensorOptions(at::kFloat).device(m.device());
  for (int64_t l = mc.num_layers - c.adapter_layers; l < mc.num_layers; l++) {
    auto a = std::make_shared<AdaptionPrompt>();
    a->prompt =
        at::empty({1, c.adapter_len, mc.hidden_size}, at::kFloat).normal_(0.0, 1.0, gen).to(m.device());
    a->gate = at::zeros({1}, on_device);
    a->prompt.set_requires_grad(true);
    a->gate.set_requires_grad(true);
    m.layers[l].attn_branch = a;
  }
  return c.adapter_layers;
}

void remove_all(Model& m) {
  for (LayerWeights& L : m.layers)
    if (adaption_prompt_of(L)) L.attn_branch.reset();
}

}  // namespace

int64_t adaption_prompt_apply(Model& model, const AdaptionPromptConfig& config, uint64_t seed) {
  return apply_config(model, config, seed, "lora.adaption_prompt");
}

bool adaption_prompt_present(const Model& model) {
  for (const LayerWeights& L : model.layers)
    if (adaption_prompt_of(L)) return true;
  return false;
}

AdaptionPromptConfig adaption_prompt_config_of(const Model& model) {
  AdaptionPromptConfig c;
  c.adapter_layers = 0;
  for (const LayerWeights& L : model.layers) {
    const AdaptionPrompt* a = adaption_prompt_of(L);
    if (!a) continue;
    c.adapter_layers++;
    c.adapter_len = a->prompt.size(1);
  }
  LT_CHECK(c.adapter_layers > 0, "lora: the model has no adaption prompts (call lora.adaption_prompt first)");
  return c;
}

// ============================================================================================
// PEFT's ADAPTION_PROMPT directory

void adaption_prompt_save(Model& model, const std::string& dir, const std::string& base_model_name_or_path) {
  AdaptionPromptConfig c = adaption_prompt_config_of(model);
  // PeftConfig's long-standing fields plus AdaptionPromptConfig's three, so older and newer peft
  // both load it. Keys sorted, as PEFT writes them.
  json j = {
      {"adapter_layers", c.adapter_layers},
      {"adapter_len", c.adapter_len},
      {"auto_mapping", nullptr},
      {"base_model_name_or_path",
       base_model_name_or_path.empty() ? json(nullptr) : json(base_model_name_or_path)},
      {"inference_mode", true},
      {"peft_type", "ADAPTION_PROMPT"},
      {"revision", nullptr},
      {"target_modules", "self_attn"},
      {"task_type", "CAUSAL_LM"},
  };
  peft_dir_save(model, dir, j, "lora.save");
}

AdaptionPromptConfig adaption_prompt_load(Model& model, const std::string& dir) {
  std::string path;
  json j = peft_config_read(dir, &path);
  const json& type = j.at("peft_type");
  LT_CHECK(type == "ADAPTION_PROMPT", path
                                          << ": peft_type " << type.dump()
                                          << " is not an adaption prompt (expected \"ADAPTION_PROMPT\"; LoRA "
                                             "adapters load with lora_load)");
  auto positive = [&](const char* key) {
    auto it = j.find(key);
    LT_CHECK(it != j.end() && it->is_number_integer() && it->get<int64_t>() >= 1,
             path << ": " << key << " must be a positive integer, got "
                  << (it == j.end() ? "nothing" : it->dump()));
    return it->get<int64_t>();
  };
  AdaptionPromptConfig c;
  c.adapter_len = positive("adapter_len");
  c.adapter_layers = positive("adapter_layers");
  auto targets = j.find("target_modules");
  LT_CHECK(targets == j.end() || targets->is_null() || *targets == "self_attn",
           path << ": target_modules " << targets->dump()
                << " is not supported by luatune (the attention modules are model.layers.{i}.self_attn)");
  peft_weights_load(
      model, dir, [&] { apply_config(model, c, 0, path); }, [&] { remove_all(model); },
      "adapter_len=" + std::to_string(c.adapter_len) + " from adapter_config.json");
  return c;
}

}  // namespace luatune
