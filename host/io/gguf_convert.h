// GGUF in: a llama.cpp model file as a Hugging Face model directory (`runner convert x.gguf DIR`).
// Weights dequantised from every type host/io/ggml_quants.cpp reads, llama.cpp's Q/K row permutation
// undone, config.json rebuilt from the metadata, and the tokenizer rebuilt from tokenizer.ggml.* with the
// pre-tokenizer llama.cpp chooses by tokenizer.ggml.pre. Facts and sources: docs/gguf.md, "GGUF in".
#pragma once

#include <string>

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

}  // namespace luatune
