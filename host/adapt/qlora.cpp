// QLoRA at the model level (qlora.h): which Linears hold 4-bit weights, putting them there and
// taking them out, and the quantization_config transformers reads.
#include "host/adapt/qlora.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "host/core/device.h"
#include "host/core/error.h"

namespace luatune {

using json = nlohmann::json;

bool qlora_skipped(const std::string& name, const std::vector<std::string>& skip) {
  for (const std::string& s : skip) {
    if (name == s) return true;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0 &&
        name[name.size() - s.size() - 1] == '.')
      return true;
  }
  return false;
}

std::vector<std::pair<std::string, Linear*>> qlora_linears(Model& model) {
  std::vector<std::pair<std::string, Linear*>> out;
  const std::string suffix = ".weight";
  for (const ParamSlot& s : model_slots(model)) {
    if (!s.is_linear_weight()) continue;
    out.emplace_back(s.name.substr(0, s.name.size() - suffix.size()), s.linear);
  }
  return out;
}

int64_t qlora_quantize(Model& model, const QuantConfig& config, const std::vector<std::string>& skip) {
  quant_config_check(config, "qlora.quantize");
  auto linears = qlora_linears(model);
  for (auto& [name, lin] : linears)
    LT_CHECK(!lin->adapter,
             "qlora.quantize: " << name << " already has an adapter (quantize first, then lora.apply)");
  int64_t n = 0;
  for (auto& [name, lin] : linears) {
    if (lin->quant || qlora_skipped(name, skip)) continue;
    auto [packed, state] = quantize_4bit(lin->weight, config);
    lin->weight = packed;  // the dense weight goes as soon as its codes exist
    lin->quant = std::make_shared<QuantState>(std::move(state));
    n++;
  }
  return n;
}

int64_t qlora_dequantize(Model& model) {
  int64_t n = 0;
  const at::ScalarType dtype = model.dtype();
  for (auto& [name, lin] : qlora_linears(model)) {
    if (!lin->quant) continue;
    lin->weight = dequantize_4bit(lin->weight, *lin->quant, dtype).set_requires_grad(false);
    lin->quant.reset();
    n++;
  }
  return n;
}

int64_t qlora_count(const Model& model) {
  int64_t n = 0;
  for (auto& [name, lin] : qlora_linears(const_cast<Model&>(model))) n += lin->quant ? 1 : 0;
  return n;
}

bool qlora_config_of(const Model& model, QuantConfig* out) {
  for (auto& [name, lin] : qlora_linears(const_cast<Model&>(model))) {
    if (!lin->quant) continue;
    const QuantState& s = *lin->quant;
    out->type = s.type;
    out->blocksize = s.blocksize;
    out->double_quant = s.nested;
    out->nested_blocksize = s.nested_blocksize;
    return true;
  }
  return false;
}

void qlora_require_dense(const Model& model, const std::string& what) {
  int64_t n = qlora_count(model);
  LT_CHECK(n == 0,
           what << ": the model has " << n
                << " 4-bit Linears; this needs dense weights (qlora.dequantize(model) first, or load it "
                   "without quantize=)");
}

std::string qlora_hf_quantization_config(const Model& model) {
  QuantConfig c;
  if (!qlora_config_of(model, &c)) return "";
  json skip = json::array();
  for (auto& [name, lin] : qlora_linears(const_cast<Model&>(model)))
    if (!lin->quant) skip.push_back(name);
  // BitsAndBytesConfig.to_dict() as transformers writes it (quant_method first, then sorted keys).
  json q = json::object();
  q["quant_method"] = "bitsandbytes";
  q["_load_in_4bit"] = true;
  q["_load_in_8bit"] = false;
  q["bnb_4bit_compute_dtype"] = dtype_name(model.dtype());
  q["bnb_4bit_quant_storage"] = "uint8";
  q["bnb_4bit_quant_type"] = quant_type_name(c.type);
  q["bnb_4bit_use_double_quant"] = c.double_quant;
  q["llm_int8_enable_fp32_cpu_offload"] = false;
  q["llm_int8_has_fp16_weight"] = false;
  q["llm_int8_skip_modules"] = skip.empty() ? json(nullptr) : skip;
  q["llm_int8_threshold"] = 6.0;
  q["load_in_4bit"] = true;
  q["load_in_8bit"] = false;
  return q.dump();
}

}  // namespace luatune
