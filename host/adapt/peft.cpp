// What every adapter kind shares: freezing the base; PEFT's adapter directory written atomically,
// its config read, its weights loaded into freshly applied adapters with a rollback on failure.
#include "host/adapt/peft.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/core/number.h"
#include "host/core/tensor_ops.h"
#include "host/dist/dist.h"
#include "host/io/safetensors.h"
#include "host/model/transformer.h"

namespace luatune {

using json = nlohmann::json;

const char* const kPeftConfigFile = "adapter_config.json";
const char* const kPeftWeightsFile = "adapter_model.safetensors";
const char* const kPeftPrefix = "base_model.model.";

void peft_freeze_base(Model& model) {
  for (auto& [name, t] : model.named_parameters()) {
    if (!t->defined() || !t->requires_grad()) continue;
    if (t->is_leaf())
      t->set_requires_grad(false);  // in place: every handle on this weight sees it frozen
    else
      *t = t->detach();
  }
}

json peft_number(double v) {
  if (number_is_whole(v)) return json(static_cast<int64_t>(v));
  return json(v);
}

void peft_dir_save(Model& model, const std::string& dir, const json& config, const std::string& where) {
  model.ensure_full_weights();  // ZeRO-3: the sharded adapters, gathered on every rank
  DistMainOnly main_only;       // data parallel: rank 0 writes, the others wait for the files
  if (!main_only) return;
  LT_CHECK(!dir.empty(), where << ": empty directory name");
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto& [name, t] : model.adapter_parameters()) tensors.emplace_back(kPeftPrefix + name, t->detach());

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  LT_CHECK(dir_exists(dir), dir << ": cannot create directory (" << ec.message() << ")");
  // Weights first, config last: a directory with an adapter_config.json is complete.
  safetensors_save_file(dir + "/" + kPeftWeightsFile, tensors, {{"format", "pt"}});
  file_write_atomic(dir + "/" + kPeftConfigFile, config.dump(2) + "\n");
}

json peft_config_read(const std::string& dir, std::string* path_out) {
  LT_CHECK(dir_exists(dir), dir << ": not a directory (expected a PEFT adapter directory with "
                                << kPeftConfigFile << " and " << kPeftWeightsFile << ")");
  const std::string path = dir + "/" + kPeftConfigFile;
  if (!file_exists(path))  // a LoRA run's output_dir holds its adapter in adapter/
    fail(path + ": missing (expected a PEFT adapter directory)",
         file_exists(dir + "/adapter/" + kPeftConfigFile) ? "a LoRA run's adapter is in " + dir + "/adapter"
                                                          : "");
  if (path_out) *path_out = path;
  json j = json_parse_checked(file_read(path), path);
  LT_CHECK(j.is_object(), path << ": expected a JSON object");
  auto type = j.find("peft_type");
  LT_CHECK(type != j.end() && type->is_string(),
           path << ": peft_type is missing (is this a PEFT adapter_config.json?)");
  return j;
}

std::string peft_adapter_type(const std::string& dir) {
  return peft_config_read(dir).at("peft_type").get<std::string>();
}

void peft_weights_load(Model& model, const std::string& dir, const std::function<void()>& apply,
                       const std::function<void()>& remove, const std::string& shape_hint) {
  const std::string weights_path = dir + "/" + kPeftWeightsFile;
  if (!file_exists(weights_path)) {
    if (file_exists(dir + "/adapter_model.bin"))
      fail(weights_path + ": missing; only adapter_model.bin (pickle) is there",
           "convert it with peft: PeftModel.from_pretrained(...).save_pretrained(dir, "
           "safe_serialization=True)");
    fail(weights_path + ": missing (expected a PEFT adapter directory)");
  }
  std::shared_ptr<SafetensorsFile> file = SafetensorsFile::open(weights_path);

  // Apply, then fill; on any error take the adapters off again and restore the base weights' flags.
  std::vector<std::pair<at::Tensor*, bool>> grad_flags;
  for (auto& [name, t] : model.named_parameters()) grad_flags.emplace_back(t, t->requires_grad());
  apply();
  try {
    std::map<std::string, at::Tensor*> wanted;
    for (auto& [name, t] : model.adapter_parameters()) wanted[kPeftPrefix + name] = t;
    for (const SafetensorsEntry& e : file->entries())
      LT_CHECK(wanted.count(e.name), weights_path
                                         << ": tensor " << e.name
                                         << " belongs to no adapter that adapter_config.json creates");
    for (auto& [name, t] : wanted) {
      const SafetensorsEntry* e = file->find(name);
      LT_CHECK(e, weights_path << ": tensor " << name << " is missing");
      LT_CHECK(e->shape == t->sizes().vec(),
               weights_path << ": tensor " << name << " has shape " << shape_str(e->shape) << ", expected "
                            << shape_str(t->sizes()) << " (" << shape_hint << ")");
      LT_CHECK(at::isFloatingType(e->dtype), weights_path << ": tensor " << name << " has dtype "
                                                          << e->dtype_name << ", expected a floating dtype");
      // A copy, never a view of the mapped file.
      *t = file->tensor(name).to(t->device(), at::kFloat, false, true).set_requires_grad(true);
    }
  } catch (...) {
    remove();
    for (auto& [t, flag] : grad_flags)
      if (t->is_leaf()) t->set_requires_grad(flag);
    throw;
  }
}

}  // namespace luatune
