// QLoRA at the model level (qlora.h): which Linears hold 4-bit weights, putting them there and
// taking them out.
#include "host/adapt/qlora.h"

#include <ATen/ATen.h>

#include "host/core/error.h"

namespace luatune {

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
    if (lin->quant || quant_skipped(name, skip)) continue;
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

}  // namespace luatune
