// Loading, initialising and saving models in Hugging Face's directory layout.
#include "host/model/checkpoint.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "host/core/device.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/strings.h"
#include "host/core/tensor_ops.h"
#include "host/dist/dist.h"
#include "host/io/hub_cache.h"
#include "host/io/safetensors.h"
#include "host/quant/quant.h"

namespace luatune {

using json = nlohmann::json;

namespace {

// Points every weight slot of `m` (sized from its config) at `tensors`' entries by HF name.
void model_bind(Model& m, std::map<std::string, at::Tensor>& tensors) {
  for (ParamSlot& slot : model_slots(m)) *slot.tensor = tensors.at(slot.name);
}

at::ScalarType checkpoint_dtype(const ModelConfig& c, const std::string& requested,
                                const std::string& where) {
  if (!requested.empty() && requested != "auto") return dtype_parse(requested);
  at::ScalarType t;
  if (dtype_try_parse(c.torch_dtype, &t) && at::isFloatingType(t)) return t;
  fail(where + ": torch_dtype \"" + c.torch_dtype + "\" is not a floating dtype; pass dtype= explicitly");
}

bool ignorable_tensor(const std::string& name, const ModelConfig& c) {
  // Old Llama checkpoints stored RoPE buffers; tied models sometimes keep a copy of the embedding.
  if (name.find("rotary_emb.inv_freq") != std::string::npos) return true;
  if (c.score_head && name == "score.weight") return true;  // the reward model's (reward_load_head)
  return c.tie_word_embeddings && name == "lm_head.weight";
}

// The layers the weights hold (1 + the largest N of "model.layers.N."), checked against
// num_hidden_layers before the model's per-layer slots are sized from config.json.
void check_layer_count(const ModelConfig& c, const SafetensorsReader& reader, const std::string& dir,
                       const std::string& config_path) {
  const std::string prefix = "model.layers.";
  int64_t layers = 0;
  for (const auto& name : reader.names()) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const size_t end = name.find('.', prefix.size());
    const std::string n = name.substr(prefix.size(), end == std::string::npos ? end : end - prefix.size());
    if (n.empty() || n.size() > 9 || n.find_first_not_of("0123456789") != std::string::npos) continue;
    layers = std::max<int64_t>(layers, std::stoll(n) + 1);
  }
  LT_CHECK(layers == c.num_layers,
           config_path << ": num_hidden_layers is " << c.num_layers << ", but the weights in " << dir
                       << " have "
                       << (layers == 0 ? std::string("no model.layers.* tensors")
                                       : std::to_string(layers) + " layers (model.layers.0 to model.layers." +
                                             std::to_string(layers - 1) + ")"));
}

// "model.layers.3.mlp.up_proj.weight (11008x4096 bfloat16, 86.0 MiB)", for out-of-memory messages.
std::string tensor_text(const std::string& name, const std::vector<int64_t>& shape, at::ScalarType dtype) {
  double n = 1;
  std::string dims;
  for (int64_t d : shape) {
    n *= static_cast<double>(d);
    dims += (dims.empty() ? "" : "x") + std::to_string(d);
  }
  return name + " (" + dims + " " + dtype_name(dtype) + ", " + bytes_text(n * at::elementSize(dtype)) + ")";
}

}  // namespace

// `name_or_dir`: a local directory, or a Hub id ("org/name[@revision]") in the hub cache (hub_cache.h).
std::shared_ptr<Model> model_load(const std::string& name_or_dir, const LoadOptions& options) {
  const std::string dir = model_path_from_hub(name_or_dir);
  LT_CHECK(dir_exists(dir), dir << ": not a directory (expected a Hugging Face model directory)");
  ModelConfig config = model_config_load(dir);
  const std::string config_path = dir + "/config.json";
  at::ScalarType dtype = checkpoint_dtype(config, options.dtype, config_path);
  c10::Device device = device_parse(options.device);
  if (options.quantize) quant_config_check(options.quant, "models.load: quantize");
  SafetensorsReader reader(dir);
  auto has = [&](const std::string& name) { return reader.contains(name); };
  check_layer_count(config, reader, dir, config_path);

  auto model = std::make_shared<Model>();
  model->config = config;
  model->config.torch_dtype = dtype_name(dtype);
  model->source_dir = dir;
  std::vector<ParamSlot> slots = model_slots(*model);

  // Weights stored 4-bit (bitsandbytes' layout) bring their quant-state tensors along.
  std::set<std::string> wanted;
  std::set<std::string> stored_4bit;
  for (const ParamSlot& slot : slots) {
    wanted.insert(slot.name);
    if (slot.is_linear_weight() && quant_state_present(slot.name, has)) stored_4bit.insert(slot.name);
  }
  std::vector<std::string> unexpected;
  for (const auto& name : reader.names()) {
    if (wanted.count(name) || ignorable_tensor(name, config)) continue;
    auto dot = name.find(".weight.");  // "<linear>.weight.absmax" and the rest of a 4-bit weight's state
    if (dot != std::string::npos && stored_4bit.count(name.substr(0, dot + std::strlen(".weight")))) continue;
    unexpected.push_back(name);
  }
  if (!unexpected.empty()) {
    std::string list;
    for (size_t i = 0; i < unexpected.size() && i < 3; i++) list += (i ? ", " : "") + unexpected[i];
    if (unexpected.size() > 3) list += ", ... (" + std::to_string(unexpected.size()) + " in all)";
    fail(reader.file_of(unexpected[0]) + ": tensor " + unexpected[0] + " is not part of a " +
         config.arch_name() + " with this config.json (unexpected: " + list + ")");
  }

  // One tensor at a time: a zero-copy view of the mapped file, converted and moved, then the view
  // dropped. Peak extra host memory is one converted tensor (on the device: one dense Linear when
  // quantizing while loading).
  for (const ParamSlot& slot : slots) {
    const std::string& name = slot.name;
    if (stored_4bit.count(name)) {
      const std::string file = reader.file_of(name);
      auto get = [&](const std::string& n) {
        LT_CHECK(reader.contains(n), file << ": tensor " << n << " is missing");
        return reader.tensor(n).clone();  // a copy, never a view of the mapped file
      };
      auto [packed, state] = quant_state_from_tensors(name, get, has, slot.shape, file);
      state.to(device);
      *slot.tensor = packed.to(device);
      slot.linear->quant = std::make_shared<QuantState>(std::move(state));
      continue;
    }
    LT_CHECK(reader.contains(name), dir << ": tensor " << name << " is missing (config.json describes a "
                                        << config.arch_name() << " with " << config.num_layers << " layers)");
    const SafetensorsEntry& e = reader.entry(name);
    LT_CHECK(e.shape == slot.shape, reader.file_of(name)
                                        << ": tensor " << name << " has shape " << shape_str(e.shape)
                                        << ", expected " << shape_str(slot.shape) << " from config.json");
    LT_CHECK(at::isFloatingType(e.dtype), reader.file_of(name)
                                              << ": tensor " << name << " has dtype " << e.dtype_name
                                              << ", expected a floating dtype");
    at::Tensor t = reader.tensor(name);
    if (t.scalar_type() != dtype || t.device() != device) {
      try {
        t = t.to(device, dtype);
      } catch (...) {
        rethrow_out_of_memory("models.load: " + dir + ": converting " + tensor_text(name, e.shape, dtype) +
                              " to " + device_name(device));
      }
      reader.drop_pages(name);  // the copy is all we keep: the mapped bytes can go
    }
    if (options.quantize && slot.is_linear_weight() &&
        !quant_skipped(name.substr(0, name.size() - std::strlen(".weight")), options.quantize_skip)) {
      auto [packed, state] = quantize_4bit(t, options.quant);
      t = at::Tensor();
      reader.drop_pages(name);
      *slot.tensor = packed;
      slot.linear->quant = std::make_shared<QuantState>(std::move(state));
      continue;
    }
    *slot.tensor = t.set_requires_grad(true);
  }
  return model;
}

std::shared_ptr<Model> model_init(const ModelConfig& config_in, uint64_t seed, at::ScalarType dtype,
                                  c10::Device device) {
  ModelConfig config = config_in;
  model_config_finalize(config, "models.init");
  config.torch_dtype = dtype_name(dtype);
  const auto expected = model_expected_tensors(config);
  // The bytes the weights take, checked before any is allocated: Linux overcommits, so a model far
  // larger than memory would not fail its allocation but be killed while it is filled in.
  double params = 0;
  for (const auto& [name, shape] : expected) {
    double n = 1;
    for (int64_t d : shape) n *= static_cast<double>(d);
    params += n;
  }
  const double bytes = params * static_cast<double>(at::elementSize(dtype));
  const uint64_t ram = host_memory_bytes();
  LT_CHECK(!device.is_cpu() || ram == 0 || bytes <= static_cast<double>(ram),
           "models.init: a " << config.model_type() << " of these sizes (" << config.num_layers
                             << " layers, hidden_size " << config.hidden_size << ", vocab_size "
                             << config.vocab_size << ") needs " << bytes_text(bytes) << " for its "
                             << str_from_number(params) << " parameters as " << dtype_name(dtype)
                             << ", more than this machine's " << bytes_text(static_cast<double>(ram))
                             << " of memory");
  at::Generator gen = at::detail::createCPUGenerator(seed);
  std::map<std::string, at::Tensor> tensors;
  auto make = [&](const std::string& name, const std::vector<int64_t>& shape) {
    at::Tensor t;
    bool is_norm = name.find("norm.weight") != std::string::npos;
    bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (is_norm)
      t = config.gemma_norms ? at::zeros(shape, at::kFloat) : at::ones(shape, at::kFloat);
    else if (is_bias)
      t = at::zeros(shape, at::kFloat);
    else
      t = at::normal(0.0, config.initializer_range, shape, gen, at::TensorOptions(at::kFloat));
    if (name == "model.embed_tokens.weight" && config.pad_token_id >= 0 &&
        config.pad_token_id < config.vocab_size)
      t[config.pad_token_id].zero_();
    return t.to(device, dtype).set_requires_grad(true);
  };
  for (const auto& [name, shape] : expected) {
    try {
      tensors[name] = make(name, shape);
    } catch (...) {
      rethrow_out_of_memory("models.init: allocating " + tensor_text(name, shape, dtype) + " on " +
                            device_name(device) + " (the model needs " + bytes_text(bytes) + " in all)");
    }
  }
  auto model = std::make_shared<Model>();
  model->config = config;
  model_bind(*model, tensors);
  return model;
}

void model_save(const Model& model, const std::string& dir, const SaveOptions& options) {
  LT_CHECK(!dir.empty(), "model:save: empty directory name");
  // Data parallel: every rank holds the same model; rank 0 writes it, the others wait for it.
  // ZeRO-3 first gathers the sharded layers on every rank (a collective).
  model.ensure_full_weights();
  DistMainOnly main_only;
  if (!main_only) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  LT_CHECK(dir_exists(dir), dir << ": cannot create directory (" << ec.message() << ")");
  ModelConfig c = model.config;
  c.torch_dtype = dtype_name(model.dtype());
  {
    // quantization_config says whether transformers must load this directory with bitsandbytes.
    // The model's quantization is its first 4-bit Linear's; the Linears left dense are listed.
    json extra = json::parse(c.extra_json);
    const QuantState* first_4bit = nullptr;
    std::vector<std::string> dense;
    for (const ParamSlot& s : model_slots(const_cast<Model&>(model))) {
      if (!s.is_linear_weight()) continue;
      if (s.is_4bit() && !first_4bit) first_4bit = s.linear->quant.get();
      if (!s.is_4bit()) dense.push_back(s.name.substr(0, s.name.size() - std::strlen(".weight")));
    }
    if (first_4bit)
      extra["quantization_config"] = json::parse(quant_hf_config(*first_4bit, model.dtype(), dense));
    else
      extra.erase("quantization_config");
    c.extra_json = extra.dump();
  }
  std::vector<std::pair<std::string, at::Tensor>> tensors = model.state();
  for (auto& [name, t] : tensors) t = t.detach();
  for (const auto& [name, t] : options.extra_tensors) tensors.emplace_back(name, t.detach());
  SafetensorsWriteOptions wo;
  wo.max_shard_bytes = options.max_shard_bytes;
  safetensors_save_dir(dir, tensors, wo);

  for (const auto& f : options.tokenizer_files) {
    std::string target = dir + "/" + path_basename(f);
    if (std::filesystem::equivalent(f, target, ec)) continue;
    file_write_atomic(target, file_read(f));
  }
  // generation_config.json: the source model's when it had one (sampling defaults users rely on),
  // else the token ids from the config, as transformers derives it.
  std::string gen_src = model.source_dir.empty() ? "" : model.source_dir + "/generation_config.json";
  std::string gen_dst = dir + "/generation_config.json";
  if (!gen_src.empty() && file_exists(gen_src)) {
    if (!std::filesystem::equivalent(gen_src, gen_dst, ec)) file_write_atomic(gen_dst, file_read(gen_src));
  } else {
    json g = {{"_from_model_config", true}};
    if (c.bos_token_id >= 0) g["bos_token_id"] = c.bos_token_id;
    if (c.eos_token_ids.size() == 1)
      g["eos_token_id"] = c.eos_token_ids[0];
    else if (!c.eos_token_ids.empty())
      g["eos_token_id"] = c.eos_token_ids;
    if (c.pad_token_id >= 0) g["pad_token_id"] = c.pad_token_id;
    file_write_atomic(gen_dst, g.dump(2) + "\n");
  }
  file_write_atomic(dir + "/config.json", model_config_to_json(c));
}

}  // namespace luatune
