// QLoRA: a model whose decoder-layer Linears hold 4-bit weights (host/quant/quant.h), with LoRA
// adapters (host/adapt/lora.h) trained on top: quantizing a model's Linears, undoing it, and
// which of them are 4-bit. (config.json's quantization_config is written by model_save.)
#pragma once

#include <string>
#include <vector>

#include "host/model/transformer.h"
#include "host/quant/quant.h"

namespace luatune {

// The Linears QLoRA quantizes: the seven projections of every decoder layer (embeddings, norms and
// lm_head stay in the model dtype, as transformers' bitsandbytes integration leaves the output
// layer). `skip` entries are matched as LoRA targets are (a full HF module name or its ending).
// Quantizes each in place (the dense weight is freed as soon as its codes exist); returns how
// many. Fails if the model already has adapters (quantize first, then lora.apply).
int64_t qlora_quantize(Model& model, const QuantConfig& config, const std::vector<std::string>& skip = {});
// Replaces every 4-bit weight with its dequantized weight in the model dtype (frozen).
int64_t qlora_dequantize(Model& model);
// How many Linears hold 4-bit weights.
int64_t qlora_count(const Model& model);
// The settings of the first quantized Linear (the model's quantization); false when there is none.
bool qlora_config_of(const Model& model, QuantConfig* out);
// The decoder-layer Linears QLoRA would quantize, by HF module name, with their Linear.
std::vector<std::pair<std::string, Linear*>> qlora_linears(Model& model);
// Fails with "<what>: the model has 4-bit weights (...)" when any Linear is quantized, for
// operations that need dense weights (pruning, distillation's teacher surgery).
void qlora_require_dense(const Model& model, const std::string& what);

}  // namespace luatune
