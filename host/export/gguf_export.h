// A luatune model and its tokenizer as one GGUF file llama.cpp runs: llama.cpp's architecture keys,
// tensor names and layouts (the Q/K row permutation of its Llama converter, Gemma's 1 + w norms,
// llama3 RoPE frequency factors), its tokenizer metadata, and llama.cpp's choice of which tensors
// stay in higher precision for each output type. Facts and sources: docs/gguf.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "host/io/gguf.h"
#include "host/model/transformer.h"
#include "host/text/tokenizer.h"

namespace luatune {

struct GgufExportOptions {
  std::string outtype = "f16";  // f32 | f16 | bf16 | q8_0 | q4_0 | q4_k (llama.cpp's Q4_K_M mix)
  std::string name;             // general.name; "" = the model directory's name, else "luatune"
};

struct GgufExportResult {
  std::string path;
  uint64_t bytes = 0;   // size of the file written
  int64_t tensors = 0;  // tensors in it
  // What the file holds, as an outtype: the one asked for, unless no tensor could take its type (a
  // q4_k export of a model whose rows are not multiples of 256 is all q8_0): then the type most of
  // the quantised weights have, which general.file_type names too.
  std::string outtype;
  // "" unless quantised tensors fell back to another type: one line saying how many, to what, the
  // row lengths and the block they miss, and the file type when it changed (also printed).
  std::string note;
};

// Writes `path` atomically. Everything llama.cpp cannot express (an architecture, a tokenizer, a
// RoPE scaling, a disabled Gemma 2 softcap, unmerged adapters) fails with one line naming it before
// anything is written. Tensors whose rows do not fit the outtype's blocks fall back as llama.cpp's do
// (docs/gguf.md, "Quantization mix"); the export then prints its note.
GgufExportResult gguf_export(const Model& model, const Tokenizer& tok, const std::string& path,
                             const GgufExportOptions& options = {});

// ---------------------------------------------------------------------------------------------
// The pieces, exposed for tests.

// llama.cpp's converter (LlamaModel.permute): rows of q_proj/k_proj (weight or bias) regrouped from
// HF's rotate-half order to the interleaved pairs llama.cpp's "normal" RoPE rotates.
// w: (n_head * head_dim, ...) -> same shape.
at::Tensor gguf_permute_qk(const at::Tensor& w, int64_t n_head);
// The inverse (HF order back), for tests and readers.
at::Tensor gguf_unpermute_qk(const at::Tensor& w, int64_t n_head);

// The llama3 RoPE frequency factors (rope_freqs.weight, head_dim / 2 floats) as llama.cpp's
// converter computes them from the config's rope_scaling.
std::vector<float> gguf_llama3_rope_factors(const ModelConfig& c);

// The ggml type llama.cpp would give tensor `name` (GGUF name) of shape `shape` (PyTorch order) in
// a file of `outtype`; `layer`/`n_layers` place blk.N tensors (Q4_K_M's use_more_bits), `tied`
// says the model has no output.weight (token_embd then doubles as the output).
GgmlType gguf_tensor_type(const std::string& name, const std::vector<int64_t>& shape,
                          const std::string& outtype, int64_t layer, int64_t n_layers, bool tied);

}  // namespace luatune
