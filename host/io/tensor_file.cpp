// Tensor files in PyTorch's pickle format (see tensor_file.h).
#include "host/io/tensor_file.h"

#include <ATen/ATen.h>
#include <ATen/core/Dict.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "host/core/error.h"
#include "host/core/files.h"

namespace luatune {

static void save_ivalue(const std::string& path, const c10::IValue& v) {
  std::vector<char> bytes = torch::jit::pickle_save(v);
  file_write_atomic(path, std::string(bytes.begin(), bytes.end()));
}

void tensor_file_save(const std::string& path, const at::Tensor& t) {
  LT_CHECK(t.defined(), "cannot save '" << path << "': the tensor was released");
  // Saved from the CPU so the file loads on machines without the device it came from.
  save_ivalue(path, t.detach().cpu());
}

void tensor_file_save(const std::string& path, const NamedTensors& dict) {
  c10::Dict<std::string, at::Tensor> d;
  for (const auto& [name, t] : dict) {
    LT_CHECK(t.defined(), "cannot save '" << path << "': tensor '" << name << "' was released");
    d.insert(name, t.detach().cpu());
  }
  save_ivalue(path, d);
}

TensorFile tensor_file_load(const std::string& path) {
  std::string bytes = file_read(path);
  c10::IValue v;
  try {
    v = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    // LibTorch's reason, first line only (c10::Error appends a C++ backtrace).
    std::string why = e.what();
    if (auto* ce = dynamic_cast<const c10::Error*>(&e)) why = ce->what_without_backtrace();
    why = why.substr(0, why.find('\n'));
    fail(
        "cannot load '" + path + "': not a PyTorch tensor file (" + why + ")",
        "expected a file written by torch.save / luatune's torch.save holding a tensor or a dict of tensors");
  }
  TensorFile out;
  if (v.isTensor()) {
    out.tensor = v.toTensor();
    return out;
  }
  if (v.isGenericDict()) {
    out.is_dict = true;
    for (const auto& entry : v.toGenericDict()) {
      LT_CHECK(entry.key().isString() && entry.value().isTensor(),
               "cannot load '" << path << "': expected a dict of string -> tensor, found "
                               << entry.key().tagKind() << " -> " << entry.value().tagKind());
      out.dict.emplace_back(entry.key().toStringRef(), entry.value().toTensor());
    }
    return out;
  }
  fail("cannot load '" + path + "': expected a tensor or a dict of tensors, found " + v.tagKind());
}

}  // namespace luatune
