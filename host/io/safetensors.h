// safetensors files and sharded Hugging Face checkpoint directories: a strict, mmap-based reader
// (zero-copy CPU tensors where the dtype matches) and an atomic, sharding writer.
// Layout facts: docs/hf_models.md, "safetensors" and "Sharded checkpoints".
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace luatune {

struct SafetensorsEntry {
  std::string name;
  std::string dtype_name;  // as in the header: "BF16", "F32", ...
  at::ScalarType dtype;    // the LibTorch dtype it maps to
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range inside the data buffer (header-relative, END exclusive)
};

class SafetensorsMapping;  // the mmap of one file; kept alive by every tensor viewing it

// One .safetensors file, validated on open (header length, JSON, dtypes, offsets contiguous and
// non-overlapping from 0, sizes = numel * element size, file size). Errors: one line naming the file
// (and the tensor when one is at fault).
class SafetensorsFile {
 public:
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // in header order
  const SafetensorsEntry* find(const std::string& name) const;               // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // A CPU tensor viewing the mapped bytes (no copy); writing to it never reaches the file.
  at::Tensor tensor(const std::string& name) const;

 private:
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  std::shared_ptr<SafetensorsMapping> map_;
  friend class SafetensorsReader;
};

// A checkpoint: a directory with model.safetensors, or with model.safetensors.index.json and its
// shards, or a single .safetensors file path. Every file is validated when opened; a tensor named in
// the index but missing from its shard (or present in two shards) is an error naming both.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;  // error naming the dir when absent
  const std::string& file_of(const std::string& name) const;
  at::Tensor tensor(const std::string& name) const;  // zero-copy view, as SafetensorsFile::tensor
  // Drops the mapped pages lying wholly inside `name`'s bytes from this process's memory (they
  // are re-read from the file if touched again). For loaders that copied the tensor (converted
  // dtype, moved to a GPU) and hold no view of it: keeps peak RSS near one copy of the weights.
  // Never call it while a view of the tensor is alive and may have been written to.
  void drop_pages(const std::string& name) const;
  uint64_t total_bytes() const;

 private:
  std::string path_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index in files_
};

struct SafetensorsWriteOptions {
  uint64_t max_shard_bytes = 5000000000ull;  // HF's "5GB" (decimal)
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::string basename = "model";  // model.safetensors / model-00001-of-00002.safetensors
};

// Writes one file atomically (temp name in the same directory, then rename). Tensors may live on
// any device and dtype; each is copied to CPU contiguous one at a time, so peak extra host memory
// is one tensor. Names must be unique.
void safetensors_save_file(const std::string& path,
                           const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
// Writes `dir`/model.safetensors, or shards of at most max_shard_bytes plus
// model.safetensors.index.json ({"metadata":{"total_size":N},"weight_map":{...}}) when larger.
// Each file appears under its final name only when complete; stale shards of an earlier save with
// the same basename are removed. Returns the files written.
std::vector<std::string> safetensors_save_dir(const std::string& dir,
                                              const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                              const SafetensorsWriteOptions& options = {});

// "BF16" -> at::kBFloat16 etc.; throws naming the dtype when it is unknown or sub-byte (F4, F6_*).
at::ScalarType safetensors_dtype_parse(const std::string& name);
std::string safetensors_dtype_name(at::ScalarType t);

}  // namespace luatune
