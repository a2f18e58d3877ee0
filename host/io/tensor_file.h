// Saving and loading single tensors or name->tensor tables in PyTorch's pickle format, so a file
// written by luatune opens with Python's torch.load and the other way round. Written atomically.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

namespace luatune {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct TensorFile {
  bool is_dict = false;
  at::Tensor tensor;  // when !is_dict
  NamedTensors dict;  // when is_dict, in file order
};

void tensor_file_save(const std::string& path, const at::Tensor& t);
void tensor_file_save(const std::string& path, const NamedTensors& dict);
TensorFile tensor_file_load(const std::string& path);

}  // namespace luatune
