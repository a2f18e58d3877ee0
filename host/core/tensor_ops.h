// Tensor helpers behind the `torch` Lua module that are not one LibTorch call: the index rule,
// building a tensor from flat Lua values, and the one-line description used by tostring.
//
// The index rule (one rule for every tensor position in luatune): tensors are indexed as in
// PyTorch. Positions and dimensions are 0-based, negative ones count from the end (-1 is last),
// slices are half-open start:stop:step with any part optional, "..." fills the remaining
// dimensions, "none" inserts a new dimension of size 1, and a bool or int64 tensor indexes by
// mask or by positions. Lua tables that luatune returns (shapes, tolist) are ordinary 1-based
// Lua lists.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace luatune {

struct IndexItem {
  enum class Kind { select, slice, ellipsis, newaxis, tensor };
  Kind kind = Kind::select;
  int64_t index = 0;                   // select
  std::optional<int64_t> start, stop;  // slice
  int64_t step = 1;                    // slice
  at::Tensor tensor;                   // tensor

  static IndexItem of_select(int64_t index) {
    IndexItem it;
    it.index = index;
    return it;
  }
  static IndexItem of_tensor(at::Tensor t) {
    IndexItem it;
    it.kind = Kind::tensor;
    it.tensor = std::move(t);
    return it;
  }
};

// Parses one item of a text index ("3", "-1", "1:4", "::2", ":", "...", "none").
IndexItem index_parse_item(const std::string& text);
// Parses a comma-separated text index: "0, 1:3, ...".
std::vector<IndexItem> index_parse(const std::string& spec);

at::Tensor tensor_index(const at::Tensor& t, const std::vector<IndexItem>& items);
void tensor_index_put(at::Tensor& t, const std::vector<IndexItem>& items, const at::Tensor& value);

// Builds a tensor of `shape` from row-major values (float64 on the way in, then cast to dtype).
at::Tensor tensor_from_values(const std::vector<double>& values, const std::vector<int64_t>& shape,
                              c10::ScalarType dtype);
// "Tensor(float32, [2, 3], cpu)"; "Tensor(released)" for an undefined tensor.
std::string tensor_describe(const at::Tensor& t);
// "[2, 3]"
std::string shape_str(at::IntArrayRef shape);

}  // namespace luatune
