// LoRA / DoRA: the adapter's forward, applying adapters to a model, PEFT's adapter directory in
// and out, and merging. What PEFT does and where we read it: docs/lora.md.
#include "host/adapt/lora.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "host/adapt/peft.h"
#include "host/core/error.h"
#include "host/text/tokenizer_parts.h"

namespace luatune {

using json = nlohmann::json;

const char* const kLoraTargetNames[7] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                         "gate_proj", "up_proj", "down_proj"};

double LoraConfig::scale() const {
  return rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

// ============================================================================================
// The adapter

LoraAdapter::LoraAdapter(int64_t r_, double alpha_, double dropout_, bool rslora_, bool dora_)
    : r(r_), alpha(alpha_), dropout(dropout_), rslora(rslora_), dora(dora_) {
  LoraConfig c;
  c.r = r;
  c.alpha = alpha;
  c.rslora = rslora;
  scale = c.scale();
}

at::Tensor LoraAdapter::dora_weight_norm(const at::Tensor& weight) const {
  at::NoGradGuard no_grad;  // PEFT detaches both B@A and the norm (DoRA paper, section 4.3)
  at::Tensor w = weight.to(at::kFloat) + at::matmul(lora_B, lora_A) * scale;  // (out, in)
  return at::linalg_vector_norm(w, 2, at::IntArrayRef{1}, false, c10::nullopt);
}

at::Tensor LoraAdapter::forward(const Linear& base, const at::Tensor& x) const {
  at::Tensor result = base.base_forward(x);  // (..., out) in the base dtype (4-bit W dequantized)
  const at::ScalarType out_dtype = result.scalar_type();
  // As PEFT: the input is cast to the adapter's dtype; the sum is formed there and cast back.
  at::Tensor xa = x.to(lora_A.scalar_type());
  const bool drop = training && dropout > 0;
  if (drop) xa = at::dropout(xa, dropout, true);
  at::Tensor update = at::linear(at::linear(xa, lora_A), lora_B);  // (..., out)
  if (!dora) return at::add(result, update, scale).to(out_dtype);  // one pass: result + scale * update

  // DoRA: base(x) + (m/||W+sBA|| - 1) * x W^T + (m/||W+sBA||) * s * B A x. Without dropout x W^T is
  // the base result less its bias (PEFT reuses it); with dropout it is recomputed on the dropped x.
  at::Tensor w = base.dense_weight().to(lora_A.scalar_type());
  at::Tensor mag_scale = magnitude / dora_weight_norm(w);  // (out), broadcast over the last dim
  at::Tensor xw;
  if (drop)
    xw = at::linear(xa, w);
  else
    xw = base.bias.defined() ? result - base.bias : result;
  return (result + ((mag_scale - 1) * xw + mag_scale * update * scale)).to(out_dtype);
}

std::vector<std::pair<std::string, at::Tensor*>> LoraAdapter::parameters() {
  std::vector<std::pair<std::string, at::Tensor*>> out = {{"lora_A.weight", &lora_A},
                                                          {"lora_B.weight", &lora_B}};
  if (dora) out.emplace_back("lora_magnitude_vector", &magnitude);
  return out;
}

at::Tensor LoraAdapter::merged_weight(const Linear& base) const {
  at::NoGradGuard no_grad;
  at::Tensor w = base.dense_weight().to(at::kFloat) + at::matmul(lora_B, lora_A).to(at::kFloat) * scale;
  if (dora) {
    at::Tensor norm = at::linalg_vector_norm(w, 2, at::IntArrayRef{1}, false, c10::nullopt);
    w = (magnitude.to(at::kFloat) / norm).unsqueeze(1) * w;
  }
  return w;
}

// ============================================================================================
// The model's Linears, by HF module name

namespace {

struct LinearRef {
  std::string name;    // "model.layers.3.mlp.up_proj"
  std::string kind;    // "up_proj"
  int64_t layer = -1;  // 3
  Linear* linear = nullptr;
};

std::vector<LinearRef> model_linears(Model& m) {
  std::vector<LinearRef> out;
  const std::string suffix = ".weight", prefix = "model.layers.";
  for (const ParamSlot& s : model_slots(m)) {
    if (!s.linear || s.name.size() < suffix.size() ||
        s.name.compare(s.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    LinearRef ref;
    ref.name = s.name.substr(0, s.name.size() - suffix.size());
    ref.kind = ref.name.substr(ref.name.rfind('.') + 1);
    if (ref.name.compare(0, prefix.size(), prefix) == 0)
      ref.layer = std::stoll(ref.name.substr(prefix.size()));
    ref.linear = s.linear;
    out.push_back(std::move(ref));
  }
  return out;
}

std::string join(const std::vector<std::string>& v, const std::string& sep = ", ") {
  std::string s;
  for (size_t i = 0; i < v.size(); i++) s += (i ? sep : "") + v[i];
  return s;
}

std::vector<std::string> all_linear() {
  return {std::begin(kLoraTargetNames), std::end(kLoraTargetNames)};
}

bool is_all_linear(const std::string& s) {
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return std::tolower(ch); });
  return lower == "all-linear";
}

// PEFT's list matching: the module name equals the entry or ends in "." + entry.
bool name_matches(const std::string& name, const std::string& entry) {
  if (name == entry) return true;
  return name.size() > entry.size() && name.compare(name.size() - entry.size(), entry.size(), entry) == 0 &&
         name[name.size() - entry.size() - 1] == '.';
}

// The Linears `c` selects. `where` prefixes errors ("lora.apply", or the adapter_config.json path).
std::vector<LinearRef> select_linears(Model& m, const LoraConfig& c, const std::string& where) {
  std::vector<LinearRef> linears = model_linears(m);
  for (int64_t l : c.layers)
    LT_CHECK(l >= 0 && l < m.config.num_layers, where << ": layer " << l
                                                      << " does not exist (the model has layers 0.."
                                                      << m.config.num_layers - 1 << ")");
  std::set<int64_t> layers(c.layers.begin(), c.layers.end());
  auto in_layers = [&](const LinearRef& ref) { return layers.empty() || layers.count(ref.layer) > 0; };

  std::vector<LinearRef> out;
  if (!c.target_regex.empty()) {
    Regex re("^(?:" + c.target_regex + ")\\z", where + ": target_modules");
    for (const LinearRef& ref : linears)
      if (!re.find_all(ref.name).empty() && in_layers(ref)) out.push_back(ref);
    LT_CHECK(!out.empty(), where << ": target_modules regex \"" << c.target_regex
                                 << "\" matches no Linear (names look like model.layers.0.self_attn.q_proj)");
    return out;
  }
  std::vector<std::string> targets = c.targets;
  LT_CHECK(!targets.empty(), where << ": targets is empty (expected names such as q_proj, or all-linear)");
  if (std::any_of(targets.begin(), targets.end(), is_all_linear)) {
    LT_CHECK(targets.size() == 1, where << ": all-linear cannot be combined with other targets");
    targets = all_linear();
  }
  // Exact names are taken as they are; suffixes follow the layer filter (PEFT does the same).
  for (const std::string& t : targets) {
    bool any = false;
    for (const LinearRef& ref : linears) any = any || name_matches(ref.name, t);
    LT_CHECK(any, where << ": unknown target \"" << t << "\" (expected " << join(all_linear())
                        << ", all-linear, or a module name such as model.layers.0.self_attn.q_proj)");
  }
  for (const LinearRef& ref : linears) {
    bool exact = std::find(targets.begin(), targets.end(), ref.name) != targets.end();
    bool suffix = std::any_of(targets.begin(), targets.end(),
                              [&](const std::string& t) { return name_matches(ref.name, t); });
    if (exact || (suffix && in_layers(ref))) out.push_back(ref);
  }
  LT_CHECK(!out.empty(), where << ": the targets match no Linear in layers " << join([&] {
                           std::vector<std::string> s;
                           for (int64_t l : c.layers) s.push_back(std::to_string(l));
                           return s;
                         }()));
  return out;
}

int64_t apply_config(Model& m, const LoraConfig& c, uint64_t seed, const std::string& where) {
  LT_CHECK(c.r >= 1, where << ": r must be a positive integer, got " << c.r);
  LT_CHECK(std::isfinite(c.alpha) && c.alpha > 0,
           where << ": alpha must be a positive number, got " << c.alpha);
  LT_CHECK(c.dropout >= 0 && c.dropout < 1, where << ": dropout must be in [0, 1), got " << c.dropout);
  std::vector<LinearRef> selected = select_linears(m, c, where);
  for (const LayerWeights& layer : m.layers)
    LT_CHECK(!layer.adaption, where << ": the model already has an adaption prompt (LLaMA-Adapter); LoRA and "
                                       "adaption prompts are not combined (start from a fresh model)");
  for (const LinearRef& ref : model_linears(m))
    LT_CHECK(!ref.linear->adapter, where << ": the model already has an adapter on " << ref.name
                                         << " (merge it with lora.merge, or start from a fresh model)");
  peft_freeze_base(m);

  // Drawn in float32 on CPU in checkpoint order, then moved: the same seed gives the same
  // adapter on every device.
  at::Generator gen = at::detail::createCPUGenerator(seed);
  for (const LinearRef& ref : selected) {
    Linear& lin = *ref.linear;
    const int64_t n_out = lin.out_features(), n_in = lin.in_features();
    auto a = std::make_shared<LoraAdapter>(c.r, c.alpha, c.dropout, c.rslora, c.dora);
    // kaiming_uniform_(a=sqrt(5)) on (r, in): gain sqrt(2/(1+5)), bound gain*sqrt(3/in) = 1/sqrt(in).
    const double bound = 1.0 / std::sqrt(static_cast<double>(n_in));
    a->lora_A = at::empty({c.r, n_in}, at::kFloat).uniform_(-bound, bound, gen).to(lin.weight.device());
    a->lora_B = at::zeros({n_out, c.r}, at::TensorOptions(at::kFloat).device(lin.weight.device()));
    if (c.dora) a->magnitude = a->dora_weight_norm(lin.dense_weight());
    for (auto& [name, t] : a->parameters()) t->set_requires_grad(true);
    lin.adapter = a;
  }
  return static_cast<int64_t>(selected.size());
}

// Every Linear with an adapter, which must be LoRA.
std::vector<std::pair<LinearRef, LoraAdapter*>> lora_adapters(Model& m, const std::string& where) {
  std::vector<std::pair<LinearRef, LoraAdapter*>> out;
  for (const LinearRef& ref : model_linears(m)) {
    if (!ref.linear->adapter) continue;
    auto* a = dynamic_cast<LoraAdapter*>(ref.linear->adapter.get());
    LT_CHECK(a, where << ": the adapter on " << ref.name << " is not a LoRA adapter");
    out.emplace_back(ref, a);
  }
  LT_CHECK(!out.empty(), where << ": the model has no LoRA adapters (call lora.apply or lora.load first)");
  return out;
}

LoraConfig config_of(Model& model, const std::string& where) {
  auto adapters = lora_adapters(model, where);
  const LoraAdapter& first = *adapters[0].second;
  LoraConfig c;
  c.r = first.r;
  c.alpha = first.alpha;
  c.dropout = first.dropout;
  c.rslora = first.rslora;
  c.dora = first.dora;
  // Describe the adapted set as PEFT would: kinds (+ layers_to_transform) when that reproduces it
  // exactly, else the full module names.
  std::set<std::string> kinds, names;
  std::set<int64_t> layers;
  for (const auto& [ref, a] : adapters) {
    kinds.insert(ref.kind);
    names.insert(ref.name);
    layers.insert(ref.layer);
  }
  c.targets.clear();
  for (const char* k : kLoraTargetNames)
    if (kinds.count(k)) c.targets.push_back(k);
  if (static_cast<int64_t>(layers.size()) != model.config.num_layers)
    c.layers.assign(layers.begin(), layers.end());
  std::set<std::string> implied;
  for (const LinearRef& ref : model_linears(model))
    if (kinds.count(ref.kind) && layers.count(ref.layer)) implied.insert(ref.name);
  if (implied != names) {
    c.targets.clear();
    for (const auto& [ref, a] : adapters) c.targets.push_back(ref.name);
    c.layers.clear();
  }
  return c;
}

}  // namespace

int64_t lora_apply(Model& model, const LoraConfig& config, uint64_t seed) {
  return apply_config(model, config, seed, "lora.apply");
}

LoraConfig lora_config_of(Model& model) {
  return config_of(model, "lora");
}

void lora_save(Model& model, const std::string& dir, const std::string& base_model_name_or_path) {
  LoraConfig c = config_of(model, "lora.save");
  // The fields of PEFT's LoraConfig that have existed since use_dora did (peft >= 0.9), so older
  // and newer peft both load it; newer fields take their defaults. Keys sorted, as PEFT writes them.
  json j = {
      {"alpha_pattern", json::object()},
      {"auto_mapping", nullptr},
      {"base_model_name_or_path",
       base_model_name_or_path.empty() ? json(nullptr) : json(base_model_name_or_path)},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"layers_pattern", nullptr},
      {"layers_to_transform", c.layers.empty() ? json(nullptr) : json(c.layers)},
      {"loftq_config", json::object()},
      {"lora_alpha", peft_number(c.alpha)},
      {"lora_dropout", c.dropout},
      {"megatron_config", nullptr},
      {"megatron_core", "megatron.core"},
      {"modules_to_save", nullptr},
      {"peft_type", "LORA"},
      {"r", c.r},
      {"rank_pattern", json::object()},
      {"revision", nullptr},
      {"target_modules", c.targets},
      {"task_type", "CAUSAL_LM"},
      {"use_dora", c.dora},
      {"use_rslora", c.rslora},
  };
  peft_dir_save(model, dir, j, "lora.save");
}

namespace {

// adapter_config.json (`j`, read from `path`) -> LoraConfig, rejecting what luatune cannot reproduce.
LoraConfig parse_adapter_config(const json& j, const std::string& path) {
  auto get = [&](const char* key) -> const json& {
    static const json null_json;
    auto it = j.find(key);
    return it == j.end() ? null_json : *it;
  };
  auto unsupported = [&](const char* key, const std::string& why) {
    fail(path + ": " + key + " " + get(key).dump() + " is not supported by luatune (" + why + ")");
  };
  const json& type = get("peft_type");
  if (type == "ADAPTION_PROMPT")
    fail(path + ": peft_type \"ADAPTION_PROMPT\" is an adaption prompt (LLaMA-Adapter), not LoRA",
         "load it with adaption_prompt_load (in Lua, lora.load reads both kinds)");
  LT_CHECK(type == "LORA", path << ": peft_type " << type.dump() << " is not supported (expected \"LORA\")");

  LoraConfig c;
  const json& r = get("r");
  LT_CHECK(r.is_number_integer() && r.get<int64_t>() >= 1,
           path << ": r must be a positive integer, got " << r.dump());
  c.r = r.get<int64_t>();
  c.alpha = get("lora_alpha").is_number() ? get("lora_alpha").get<double>() : 8.0;  // PEFT's default
  c.dropout = get("lora_dropout").is_number() ? get("lora_dropout").get<double>() : 0.0;
  c.rslora = get("use_rslora").is_boolean() && get("use_rslora").get<bool>();
  c.dora = get("use_dora").is_boolean() && get("use_dora").get<bool>();

  const json& targets = get("target_modules");
  if (targets.is_null()) {
    c.targets = {"q_proj", "v_proj"};  // PEFT's default for llama, mistral, qwen2, gemma2
  } else if (targets.is_string()) {
    std::string s = targets.get<std::string>();
    if (is_all_linear(s))
      c.targets = {s};
    else
      c.target_regex = s;
  } else {
    LT_CHECK(targets.is_array(), path << ": target_modules must be a list of names or a regex string");
    c.targets.clear();
    for (const json& t : targets) {
      LT_CHECK(t.is_string(), path << ": target_modules must be a list of names, got " << t.dump());
      c.targets.push_back(t.get<std::string>());
    }
  }
  const json& layers = get("layers_to_transform");
  if (layers.is_number_integer()) {
    c.layers = {layers.get<int64_t>()};
  } else if (layers.is_array()) {
    for (const json& l : layers) {
      LT_CHECK(l.is_number_integer(), path << ": layers_to_transform must be integers, got " << l.dump());
      c.layers.push_back(l.get<int64_t>());
    }
  } else if (!layers.is_null()) {
    unsupported("layers_to_transform", "expected a layer number or a list of them");
  }
  const json& pattern = get("layers_pattern");
  bool pattern_ok = pattern.is_null() || pattern == "layers" || pattern == json::array() ||
                    pattern == json::array({"layers"}) || pattern == "";
  if (!pattern_ok) unsupported("layers_pattern", "the model's layers are model.layers.{i}");

  if (get("bias").is_string() && get("bias") != "none") unsupported("bias", "only \"none\"");
  if (get("fan_in_fan_out") == true) unsupported("fan_in_fan_out", "HF Llama-style models store (out, in)");
  if (get("lora_bias") == true) unsupported("lora_bias", "lora_B has no bias here");
  if (get("use_qalora") == true) unsupported("use_qalora", "plain LoRA and DoRA only");
  for (const char* key : {"modules_to_save", "exclude_modules", "layer_replication", "target_parameters",
                          "trainable_token_indices"})
    if (!get(key).is_null() && !get(key).empty()) unsupported(key, "luatune adapts Linear projections only");
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (!get(key).is_null() && !get(key).empty()) unsupported(key, "one r and alpha for every module");
  return c;
}

}  // namespace

LoraConfig lora_load(Model& model, const std::string& dir) {
  std::string config_path;
  LoraConfig c = parse_adapter_config(peft_config_read(dir, &config_path), config_path);
  peft_weights_load(
      model, dir, [&] { apply_config(model, c, 0, config_path); },
      [&] {
        for (LinearRef& ref : model_linears(model)) ref.linear->adapter.reset();
      },
      "r=" + std::to_string(c.r) + " from adapter_config.json");
  return c;
}

void lora_merge(Model& model) {
  for (const LayerWeights& layer : model.layers)
    LT_CHECK(!layer.adaption,
             "lora.merge: the model has an adaption prompt (LLaMA-Adapter), which cannot be "
             "merged into the weights (its attention over the prompt depends on each input); "
             "save it with lora.save instead");
  for (auto& [ref, a] : lora_adapters(model, "lora.merge")) {
    Linear& lin = *ref.linear;
    at::Tensor merged = a->merged_weight(lin);
    if (lin.quant) {
      // QLoRA: the merge is made on the dequantized weight and stays dense (model dtype), ready
      // for a bf16 HF save; re-quantizing would add a second rounding to the adapter's update.
      lin.weight = merged.to(model.dtype()).detach().set_requires_grad(false);
      lin.quant.reset();
    } else {
      at::NoGradGuard no_grad;
      lin.weight.copy_(merged);  // cast back to the base dtype, in the weight's own storage
    }
    lin.adapter.reset();
  }
}

}  // namespace luatune
