// What every PEFT adapter kind shares (LoRA/DoRA in lora.cpp, adaption prompts in
// adaption_prompt.cpp): freezing the base when adapters go on, and PEFT's adapter directory,
// adapter_config.json + adapter_model.safetensors with tensor names under "base_model.model."
// (PeftModel.base_model is the tuner, its .model the HF model). Each kind writes and parses its own
// config fields; the files, names and checks live here once.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace luatune {

class Model;

extern const char* const kPeftConfigFile;   // "adapter_config.json"
extern const char* const kPeftWeightsFile;  // "adapter_model.safetensors"
extern const char* const kPeftPrefix;       // "base_model.model."

// Sets requires_grad false on every base weight (embeddings and norms included), in place so every
// handle on a weight sees it: applying adapters trains the adapters only, as PEFT does.
void peft_freeze_base(Model& model);

// A JSON number as PEFT writes it: integral values as integers (lora_alpha 32, not 32.0).
nlohmann::json peft_number(double v);

// Writes `dir`/adapter_model.safetensors (every model.adapter_parameters() tensor under
// kPeftPrefix + its name) then `dir`/adapter_config.json, each atomically, creating `dir`: a
// directory with a config is complete. Rank 0 writes, the other ranks wait for the files.
void peft_dir_save(Model& model, const std::string& dir, const nlohmann::json& config,
                   const std::string& where);

// `dir`/adapter_config.json parsed; fails unless it is a JSON object with a string peft_type.
// `path` receives the config's path, for the caller's own error messages.
nlohmann::json peft_config_read(const std::string& dir, std::string* path = nullptr);
// The peft_type of the adapter in `dir` ("LORA", "ADAPTION_PROMPT", ...).
std::string peft_adapter_type(const std::string& dir);

// Loads `dir`/adapter_model.safetensors into the adapters that `apply` creates on `model`: every
// stored tensor must be one of model.adapter_parameters() (by PEFT name) and every such parameter
// must be stored with its shape; values are copied to float32 on the parameter's device and made
// trainable. On any failure, `remove` takes the adapters off, the base weights get their
// requires_grad flags back, and the error propagates. `shape_hint` ends shape errors
// ("r=4 from adapter_config.json").
void peft_weights_load(Model& model, const std::string& dir, const std::function<void()>& apply,
                       const std::function<void()>& remove, const std::string& shape_hint);

}  // namespace luatune
