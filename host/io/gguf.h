// GGUF v3 files (llama.cpp's model format) written from tensors and metadata, and ggml's block
// quantizations. Facts and sources: docs/gguf.md.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace luatune {

// ggml tensor types luatune reads (the numbers are ggml's enum ggml_type): every type llama.cpp's
// Llama-family files use. It writes F32, F16, BF16, Q8_0, Q4_0, Q4_K and Q6_K (ggml_type_writes).
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  BF16 = 30
};

const char* ggml_type_name(GgmlType t);             // "f32", "q8_0", ...
GgmlType ggml_type_parse(const std::string& name);  // a type luatune writes; fails naming those
bool ggml_type_writes(GgmlType t);                  // ggml_quantize takes it (the rest are read only)
int64_t ggml_block_size(GgmlType t);                // elements per block (1 for f32/f16/bf16, 32, 256)
int64_t ggml_type_bytes(GgmlType t);                // bytes per block

// ggml's scalar conversions: fp16 rounds to nearest even (NaN -> 0x7e00 with its sign, as
// ggml_compute_fp32_to_fp16); bf16 rounds to nearest even, a NaN keeps its top bits and is made quiet.
uint16_t ggml_fp32_to_fp16(float f);
float ggml_fp16_to_fp32(uint16_t h);
uint16_t ggml_fp32_to_bf16(float f);
float ggml_bf16_to_fp32(uint16_t h);

int64_t ggml_row_bytes(GgmlType t, int64_t n);

// The pre-tokenizer regexes llama.cpp implements under a name (llama-vocab.cpp), as tokenizer.json files
// spell them: Llama 3's ("llama-bpe") and Qwen2's ("qwen2"), and the digit split that SmolLM's and
// StarCoder's ("smollm", "starcoder") put before GPT-2's regex. The export names them; the import
// (gguf_convert) writes them back. docs/gguf.md, "Tokenizer".
extern const char* const kGgufLlama3Regex;
extern const char* const kGgufQwen2Regex;
extern const char* const kGgufDigitsRegex;

// The bytes of `values` (row-major, n a multiple of the block size) in ggml's layout for `t`, as
// ggml's reference quantize_row_*_ref writes them (what llama-quantize writes without an imatrix).
std::string ggml_quantize(GgmlType t, const float* values, int64_t n);
// The same into `out` (ggml_row_bytes(t, n) bytes), blocks split over LibTorch's CPU threads.
void ggml_quantize_into(GgmlType t, const float* values, int64_t n, char* out);
// The inverse, for tests and checks: n floats from `bytes`.
std::vector<float> ggml_dequantize(GgmlType t, const std::string& bytes, int64_t n);

// One metadata value: GGUF's value types (uint8 ... float64, bool, string, and arrays of one type).
struct GgufValue {
  // GGUF's numbering: u8 = 0 ... f64 = 12, in this order.
  enum class Type : uint32_t { u8, i8, u16, i16, u32, i32, f32, boolean, string, array, u64, i64, f64 };
  Type type = Type::u32;
  Type item_type = Type::u32;    // arrays: the type of every item
  uint64_t u = 0;                // unsigned and bool
  int64_t i = 0;                 // signed
  double f = 0;                  // f32 / f64
  std::string s;                 // string
  std::vector<GgufValue> items;  // array items (all item_type)

  static GgufValue u32(uint32_t v) { return unsigned_value(Type::u32, v); }
  static GgufValue i32(int32_t v) { return signed_value(Type::i32, v); }
  static GgufValue u64(uint64_t v) { return unsigned_value(Type::u64, v); }
  static GgufValue i64(int64_t v) { return signed_value(Type::i64, v); }
  static GgufValue f32(float v) { return float_value(Type::f32, v); }
  static GgufValue f64(double v) { return float_value(Type::f64, v); }
  static GgufValue boolean(bool v) { return unsigned_value(Type::boolean, v ? 1 : 0); }
  static GgufValue str(std::string v);
  static GgufValue strings(const std::vector<std::string>& v);
  static GgufValue i32s(const std::vector<int32_t>& v);
  static GgufValue f32s(const std::vector<float>& v);

 private:
  static GgufValue unsigned_value(Type t, uint64_t v);
  static GgufValue signed_value(Type t, int64_t v);
  static GgufValue float_value(Type t, double v);
};

// Builds a GGUF file: metadata in insertion order (general.alignment, a u32 power of two >= 8, is
// honoured when set), tensors in insertion order, each converted from its tensor (any float dtype,
// on any device) to `type`. ggml's dimension order is the reverse of PyTorch's: a (rows, cols)
// weight is written with ne = {cols, rows}; the row length must be a multiple of the type's block
// size. add_tensor keeps a reference to the tensor (no copy) and checks everything it can; write()
// converts one slice of rows at a time while streaming, so an 8B model never sits in memory twice.
class GgufWriter {
 public:
  void set(const std::string& key, GgufValue v);  // replaces an earlier value of the key
  void add_tensor(const std::string& name, const at::Tensor& t, GgmlType type);
  // Writes the file atomically (a temporary beside it, then rename); fails naming the path.
  // Nothing is left under `path` or beside it when it fails.
  void write(const std::string& path) const;
  size_t tensor_count() const { return tensors_.size(); }

 private:
  std::vector<std::pair<std::string, GgufValue>> kv_;
  struct Entry {
    std::string name;
    std::vector<int64_t> ne;  // ggml order
    GgmlType type;
    at::Tensor tensor;  // as given: read (converted, sliced) only by write()
  };
  std::vector<Entry> tensors_;
};

// A parsed GGUF file (for tests and `runner` checks): version, metadata and tensor infos, and each
// tensor's bytes.
struct GgufFile {
  uint32_t version = 0;
  std::vector<std::pair<std::string, GgufValue>> kv;
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    uint64_t offset = 0;  // from the start of the data section
    std::string bytes;    // empty when read without data
  };
  std::vector<Tensor> tensors;
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // where the data section starts in the file
  const GgufValue* find(const std::string& key) const;
};
// Fails with one line naming the path and what is wrong. with_data = false reads the header only
// (metadata and tensor infos, still checked against the file's size).
GgufFile gguf_read(const std::string& path, bool with_data = true);

}  // namespace luatune
