// GGUF in: a llama.cpp model file as a Hugging Face model directory (`runner convert x.gguf DIR`).
// Weights dequantised from every type host/io/ggml_quants.cpp reads, llama.cpp's Q/K row permutation
// undone, config.json rebuilt from the metadata, and the tokenizer rebuilt from tokenizer.ggml.* with the
// pre-tokenizer llama.cpp chooses by tokenizer.ggml.pre. Facts and sources: docs/gguf.md, "GGUF in".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace luatune {

struct GgufConvertOptions {
  std::string dtype = "float32";  // the safetensors' dtype: float32, bfloat16 or float16
};

// Writes `out_dir` (which must not exist, or be empty): config.json, generation_config.json,
// model.safetensors (or shards), tokenizer.json and tokenizer_config.json (with the file's
// chat_template). Nothing appears under `out_dir` unless all of it was written. Fails in one line naming
// the file and the key, tensor or type it cannot convert.
void gguf_convert(const std::string& gguf_path, const std::string& out_dir,
                  const GgufConvertOptions& options = {});

// Llama 3.1's rope scaling as llama.cpp's rope_freqs.weight holds it: one factor per rotary pair,
// computed in float32 as its converter does (the export writes them; the import recovers
// rope_scaling from them). docs/gguf.md, "Architectures".
std::vector<float> gguf_llama3_rope_factors(double theta, int64_t head_dim, double factor,
                                            double low_freq_factor, double high_freq_factor,
                                            int64_t original_max_position);

}  // namespace luatune
