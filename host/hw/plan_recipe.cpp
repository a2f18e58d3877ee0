// Recipe config -> planner inputs, and metrics.jsonl -> run summary (see plan_recipe.h).
#include "host/hw/plan_recipe.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <type_traits>

#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/strings.h"
#include "host/io/hub_cache.h"
#include "host/io/jsonl.h"
#include "host/prune/surgery.h"

namespace luatune {

const std::vector<std::string> kPlanExtraKeys = {"model_preset",  "method", "gpus",      "nproc",
                                                 "gpus_per_node", "shard",  "optimizer", "optimizer_offload",
                                                 "margin"};

bool hw_plan_extra_set(PlanExtras* ex, const std::string& key, const std::string& text) {
  auto count = [&](int64_t* out) {
    double n = 0;
    if (!str_to_number(text, &n) || n < 1 || n != static_cast<double>(static_cast<int64_t>(n)))
      fail_usage("runner plan: " + key + " must be a whole number >= 1, got '" + text + "'");
    *out = static_cast<int64_t>(n);
  };
  if (key == "model_preset") {
    ex->model_preset = text;
  } else if (key == "method") {
    if (text != "full" && text != "lora" && text != "qlora")
      fail_usage("runner plan: method must be full, lora or qlora, got '" + text + "'");
    ex->method = text;
  } else if (key == "gpus" || key == "nproc") {
    int64_t n = 0;
    count(&n);
    if (ex->gpus != 1 && n != ex->gpus)
      fail_usage("runner plan: gpus and nproc disagree (" + std::to_string(ex->gpus) + " and " + text + ")",
                 "they are the same setting: give one");
    ex->gpus = n;
  } else if (key == "gpus_per_node") {
    count(&ex->gpus_per_node);
  } else if (key == "shard") {
    try {
      plan_shard_parse(text);
    } catch (const Error&) {
      fail_usage("runner plan: shard must be none, optimizer, gradients or full, got '" + text + "'",
                 "FSDP's NO_SHARD, SHARD_GRAD_OP, FULL_SHARD and the ZeRO stage 0-3 work too");
    }
    ex->shard = text;
  } else if (key == "optimizer") {
    if (text != "adamw" && text != "adamw8bit" && text != "sgd")
      fail_usage("runner plan: optimizer must be adamw, adamw8bit or sgd, got '" + text + "'");
    ex->optimizer = text;
  } else if (key == "margin") {
    if (text != "true" && text != "false")
      fail_usage("runner plan: margin must be true or false, got '" + text + "'",
                 "false plans the model alone, without the calibration's margin (docs/hardware.md)");
    ex->margin = text == "true";
  } else if (key == "optimizer_offload") {
    if (text != "none" && text != "cpu")
      fail_usage("runner plan: optimizer_offload must be none or cpu, got '" + text + "'");
    ex->optimizer_offload = text;
  } else {
    return false;
  }
  return true;
}

namespace {

using json = nlohmann::json;

const json* field(const json& cfg, const std::string& dotted) {
  const json* at = &cfg;
  for (const auto& part : str_split(dotted, '.')) {
    if (!at->is_object() || !at->contains(part)) return nullptr;
    at = &(*at)[part];
  }
  return at;
}

// The first of `keys` the config has, with its type checked; `found` names it.
template <class T>
bool pick(const json& cfg, const std::vector<std::string>& keys, T* out, std::string* found) {
  for (const auto& k : keys)
    if (const json* v = field(cfg, k)) {
      bool ok = std::is_same<T, bool>::value          ? v->is_boolean()
                : std::is_same<T, std::string>::value ? v->is_string()
                                                      : v->is_number();
      LT_CHECK(ok, "plan: config key '" << k << "' has an unexpected type (" << v->type_name() << ")");
      *out = v->get<T>();
      *found = k;
      return true;
    }
  return false;
}

std::string norm_dtype(const std::string& d) {
  if (d == "bf16" || d == "bfloat16") return "bf16";
  if (d == "fp16" || d == "f16" || d == "float16" || d == "half") return "fp16";
  if (d == "fp32" || d == "f32" || d == "float32" || d == "float") return "fp32";
  fail("plan: dtype '" + d + "' is not one the planner knows", "expected bf16, fp16 or fp32");
}

// The model config of `cut`, a pruned shape of `base`.
ModelConfig pruned_config(const ModelConfig& base, const ModelShape& cut) {
  ModelConfig pruned = base;
  pruned.num_layers = cut.layers;
  pruned.num_heads = cut.heads;
  pruned.num_kv_heads = cut.kv_heads;
  pruned.head_dim = cut.head_dim;
  pruned.head_dim_explicit = true;
  pruned.hidden_size = cut.hidden;
  pruned.intermediate_size = cut.intermediate;
  return pruned;
}

// The unpruned model as the frozen teacher of `o` (teacher_dtype, teacher_shard, teacher_cache and its
// k and dtype, as the pruning recipes name them); returns how it is held, for the phase's line.
std::string plan_teacher(const json& cfg, const ModelConfig& base, PlanOptions* o) {
  std::string key, text;
  double v = 0;
  PlanOptions::Teacher& teacher = o->teacher;
  teacher.present = true;
  teacher.config = base;
  teacher.dtype = pick(cfg, {"teacher_dtype"}, &text, &key) && !text.empty() ? norm_dtype(text) : o->dtype;
  bool shard = false;
  teacher.sharded = pick(cfg, {"teacher_shard"}, &shard, &key) && shard;
  if (pick(cfg, {"teacher_cache"}, &text, &key) && !text.empty()) {
    teacher.cache_k = 64;
    if (pick(cfg, {"teacher_cache_k"}, &v, &key)) teacher.cache_k = static_cast<int64_t>(v);
    if (pick(cfg, {"teacher_cache_dtype"}, &text, &key) && !text.empty())
      teacher.cache_dtype = norm_dtype(text);
    teacher.sharded = false;
    return " distilled from the whole model's cached top-" + std::to_string(teacher.cache_k) + " " +
           teacher.cache_dtype + " logits (teacher_cache: no teacher on the GPU)";
  }
  return " distilled from the whole model, frozen in " + teacher.dtype + ", " +
         (teacher.sharded && o->gpus > 1
              ? "sharded across the " + std::to_string(o->gpus) + " ranks (teacher_shard=true)"
              : "whole on every rank" + std::string(o->gpus > 1 ? " (teacher_shard=false)" : ""));
}

// llama31_sheared's two phases (recipes/llama31_sheared.lua, scripts/lua/pruning.lua): the masks
// learnt with the whole model's weights, then the model cut to the target shape and trained again,
// distilled (distill = true) from the whole model as a frozen teacher. The steps split by
// prune_fraction as pruning.lua splits them.
void plan_sheared(const json& cfg, PlanRequest* r) {
  std::string key;
  TargetSparsity t;
  double v = 0;
  if (pick(cfg, {"target_layer_sparsity"}, &v, &key)) t.layers = v;
  if (pick(cfg, {"target_head_sparsity"}, &v, &key)) t.heads = v;
  if (pick(cfg, {"target_hidden_sparsity"}, &v, &key)) t.hidden = v;
  if (pick(cfg, {"target_intermediate_sparsity"}, &v, &key)) t.intermediate = v;
  if (pick(cfg, {"round_to"}, &v, &key)) t.round_to = static_cast<int64_t>(v);
  const ModelShape cut = prune_targets(r->model, t).shape;
  double fraction = 0.5;
  pick(cfg, {"prune_fraction"}, &fraction, &key);
  PlanOptions pruning = r->options, recovery = r->options;
  pruning.structure_masks = true;
  if (r->options.max_steps > 0) {
    pruning.max_steps =
        std::max<int64_t>(1, static_cast<int64_t>(std::floor(r->options.max_steps * fraction + 0.5)));
    recovery.max_steps = std::max<int64_t>(0, r->options.max_steps - pruning.max_steps);
  } else if (r->options.run_tokens > 0) {
    pruning.run_tokens = r->options.run_tokens * fraction;
    recovery.run_tokens = r->options.run_tokens - pruning.run_tokens;
  }
  bool distill = true;
  pick(cfg, {"distill"}, &distill, &key);
  std::string what = "the pruned model (" + shape_string(cut) + ")";
  if (distill) what += plan_teacher(cfg, r->model, &recovery);
  r->phases.push_back({"pruning",
                       "masks and weights of the whole model (" + shape_string(model_shape(r->model)) + ")",
                       r->model, pruning});
  r->phases.push_back({"recovery", what, pruned_config(r->model, cut), recovery});
}

// minitron_prune_distill (recipes/minitron_prune_distill.lua): a one-shot cut to shape{} counts or
// sparsity{} shares (no training of the whole model: its importance pass runs without gradients), then
// distill.max_steps steps of the cut model distilled from the whole one.
void plan_minitron(const json& cfg, PlanRequest* r) {
  std::string key;
  double v = 0;
  ModelShape want = model_shape(r->model);
  bool counts = false;
  for (auto [name, at] : {std::pair<const char*, int64_t*>{"shape.hidden", &want.hidden},
                          {"shape.intermediate", &want.intermediate},
                          {"shape.heads", &want.heads},
                          {"shape.kv_heads", &want.kv_heads},
                          {"shape.layers", &want.layers}})
    if (pick(cfg, {name}, &v, &key) && v > 0) {
      *at = static_cast<int64_t>(v);
      counts = true;
    }
  TargetSparsity t;
  if (pick(cfg, {"sparsity.hidden"}, &v, &key)) t.hidden = v;
  if (pick(cfg, {"sparsity.intermediate"}, &v, &key)) t.intermediate = v;
  if (pick(cfg, {"sparsity.heads"}, &v, &key)) t.heads = v;
  if (pick(cfg, {"sparsity.layers"}, &v, &key)) t.layers = v;
  const ModelShape cut =
      counts ? prune_targets_counts(r->model, want).shape : prune_targets(r->model, t).shape;
  PlanOptions distill = r->options;
  distill.max_steps = pick(cfg, {"distill.max_steps"}, &v, &key) ? static_cast<int64_t>(v) : 0;
  distill.run_tokens = 0;
  if (pick(cfg, {"distill.gradient_accumulation_steps"}, &v, &key) && v >= 1)
    distill.gradient_accumulation_steps = static_cast<int64_t>(v);
  const std::string what =
      "the pruned model (" + shape_string(cut) + ")" + plan_teacher(cfg, r->model, &distill);
  r->phases.push_back({"distillation", what, pruned_config(r->model, cut), distill});
}

void plan_phases(const json& cfg, const std::string& recipe, PlanRequest* r) {
  const std::string name = path_basename(recipe);
  if (name.find("sheared") != std::string::npos && field(cfg, "target_layer_sparsity")) plan_sheared(cfg, r);
  if (name.find("minitron") != std::string::npos && field(cfg, "distill.max_steps")) plan_minitron(cfg, r);
}

}  // namespace

PlanRequest hw_plan_request(const json& cfg, const std::string& recipe, const PlanExtras& extras) {
  PlanRequest r;
  PlanOptions& o = r.options;
  std::string key;
  // The model: a preset, else base_model's config.json.
  if (!extras.model_preset.empty()) {
    if (!hw_model_preset(extras.model_preset, &r.model))
      fail_usage("plan: no model preset '" + extras.model_preset + "'",
                 "presets: " + str_join(hw_model_presets(), ", "));
    r.model_source = "preset " + extras.model_preset;
  } else {
    std::string base;
    if (!pick(cfg, {"base_model"}, &base, &key))
      fail_usage("plan: the recipe's config names no base_model",
                 "pass model_preset=" + str_join(hw_model_presets(), "|") + " to plan a known shape");
    // "org/name": its snapshot in the hub cache; one missing there says where it looked.
    std::string why;
    if (model_path_available(base, &why))
      base = model_path_resolve(base);
    else if (hub_name_shaped(base))
      fail_usage("plan: " + key + ": " + why);
    std::string file = dir_exists(base) ? base + "/config.json" : base;
    if (!file_exists(file))
      fail_usage("plan: " + key + " '" + base + "' has no config.json to read the model's shape from",
                 "point " + key + "= at a Hugging Face model directory, or pass model_preset=" +
                     str_join(hw_model_presets(), "|"));
    r.model = model_config_load(file);
    r.model_source = file;
  }
  // Method: given, else the quantize and use_lora keys, a lora table, or the recipe's name.
  bool flag = false;
  std::string method = extras.method;
  if (method.empty()) {
    // models.load's quantize= as recipes pass it on: "nf4" / "fp4", true, or an options table.
    const json* q = field(cfg, "quantize");
    const bool quantize = q && ((q->is_string() && !q->get<std::string>().empty()) || q->is_object() ||
                                (q->is_boolean() && q->get<bool>()));
    if (quantize)
      method = "qlora";
    else if (pick(cfg, {"use_lora"}, &flag, &key))
      method = flag ? "lora" : "full";
    else if (field(cfg, "lora") || path_basename(recipe).find("lora") != std::string::npos)
      method = "lora";
    else
      method = "full";
    r.notes.push_back("method " + method + " (from the config and the recipe's name; method= overrides)");
  }
  o.method = plan_method_parse(method);
  // A pruning job (the shipped pruning recipes, or a config with pruning targets) trains every
  // weight of the model it cuts: adapters are no advice for it.
  const std::string name = path_basename(recipe);
  const bool pruning = name.find("prune") != std::string::npos || name.find("sheared") != std::string::npos ||
                       name.find("minitron") != std::string::npos || field(cfg, "target_layer_sparsity") ||
                       field(cfg, "prune_fraction") || field(cfg, "prune");
  if (pruning && o.method == PlanMethod::method_full) {
    o.adapters_ok = false;
    r.notes.push_back("a pruning job: every weight trains, so the advice below leaves LoRA and QLoRA out");
  }
  std::string dtype = "bf16";
  if (pick(cfg, {"dtype"}, &dtype, &key)) dtype = norm_dtype(dtype);
  o.dtype = dtype;
  pick(cfg, {"master_weights"}, &o.master_weights, &key);
  double v = 0;
  // The keys are the recipes' (run_keys.lua), which train.new and lora.apply take under the same names.
  if (pick(cfg, {"batch_size"}, &v, &key)) o.batch_size = static_cast<int64_t>(v);
  if (pick(cfg, {"max_length"}, &v, &key)) o.max_length = static_cast<int64_t>(v);
  if (!pick(cfg, {"gradient_checkpointing"}, &o.gradient_checkpointing, &key))
    o.gradient_checkpointing = false;
  if (pick(cfg, {"loss_chunk"}, &v, &key)) o.loss_chunk = static_cast<int64_t>(v);
  // The trainer's sharding and optimizer keys: plan's own key=value wins over the config. A key the
  // recipe does not declare cannot be given to a run of it, so the plan says so.
  auto trainer_key = [&](const std::string& name, const std::string& given, std::string* out) {
    const json* v = field(cfg, name);
    if (!given.empty()) {
      *out = given;
      if (!v)
        r.notes.push_back("note: " + (recipe.empty() ? std::string("the recipe") : path_basename(recipe)) +
                          " declares no '" + name + "' key: planned with " + name + "=" + given +
                          ", but a run needs the recipe to take " + name + "= and pass it to train.new");
    } else if (v && v->is_string()) {
      *out = v->get<std::string>();
    } else if (v && v->is_number_integer() && name == "shard") {
      *out = std::to_string(v->get<int64_t>());  // the ZeRO stage
    } else if (v) {
      fail("plan: config key '" + name + "' has an unexpected type (" + v->type_name() + ")");
    }
  };
  trainer_key("optimizer", extras.optimizer, &o.optimizer);
  trainer_key("optimizer_offload", extras.optimizer_offload, &o.optimizer_offload);
  std::string shard = "none";
  trainer_key("shard", extras.shard, &shard);
  o.shard = plan_shard_parse(shard);
  if (pick(cfg, {"lora.r"}, &v, &key)) o.lora_r = static_cast<int64_t>(v);
  if (pick(cfg, {"lora.dropout"}, &v, &key)) o.lora_dropout = v;
  if (const json* t = field(cfg, "lora.targets")) {
    if (t->is_array()) {
      o.lora_targets.clear();
      for (const auto& e : *t)
        if (e.is_string()) o.lora_targets.push_back(e.get<std::string>());
    } else if (t->is_string()) {
      o.lora_targets = {t->get<std::string>()};
    }
  } else if (o.method != PlanMethod::method_full) {
    o.lora_targets = {"q_proj", "k_proj", "v_proj", "o_proj"};  // lora.apply's default (LoraConfig)
  }
  o.gpus = extras.gpus;
  o.gpus_per_node = extras.gpus_per_node;
  // The run's length: max_steps, else epochs over the data file's text (4 bytes a token: English
  // under Llama 3's tokenizer is about that; the printout says it is an estimate).
  if (pick(cfg, {"gradient_accumulation_steps"}, &v, &key) && v >= 1)
    o.gradient_accumulation_steps = static_cast<int64_t>(v);
  if (pick(cfg, {"max_steps"}, &v, &key) && v > 0) {
    o.max_steps = static_cast<int64_t>(v);
  } else {
    std::string data;
    double epochs = 1;
    pick(cfg, {"num_train_epochs"}, &epochs, &key);
    if (pick(cfg, {"data"}, &data, &key) && file_exists(data) && epochs > 0) {
      const double bytes = static_cast<double>(std::filesystem::file_size(data));
      o.run_tokens = epochs * bytes / 4;
      o.run_tokens_source = "estimated: " + str_from_number(epochs) + " epoch" + (epochs == 1 ? "" : "s") +
                            " of " + data + "'s " + str_from_number(std::round(bytes / 1e6 * 10) / 10) +
                            " MB at 4 bytes a token";
    }
  }
  plan_phases(cfg, recipe, &r);
  return r;
}

RunSummary hw_read_metrics(const std::string& path) {
  JsonlReadOptions o;
  o.bad = JsonlBad::skip;  // a damaged (or absurdly nested) line is skipped
  JsonlReader in(path, o);
  LT_CHECK(in.is_open(), "hw: cannot read '" << path << "' (a run's metrics.jsonl)");
  RunSummary s;
  std::vector<std::pair<double, double>> steps;  // (tokens, step_time)
  while (in.next()) {
    const json& j = in.value();
    if (!j.is_object()) continue;
    if (j.contains("config") && j["config"].is_object()) s.config_json = j["config"].dump();
    auto num = [&](const char* k) { return j.contains(k) && j[k].is_number() ? j[k].get<double>() : -1.0; };
    if (num("step_time") > 0 && num("tokens") > 0) {
      steps.emplace_back(num("tokens"), num("step_time"));
      s.peak_memory_gb = std::max(s.peak_memory_gb, num("peak_memory_gb"));
    }
    if (num("loss") >= 0) s.loss = num("loss");
    if (num("eval_loss") >= 0) s.eval_loss = num("eval_loss");
    if (num("accuracy") >= 0) s.accuracy = num("accuracy");
    if (num("eval_accuracy") >= 0) s.accuracy = num("eval_accuracy");
  }
  LT_CHECK(!steps.empty(), "hw: '" << path << "' has no training steps (no lines with tokens and step_time)");
  s.steps = static_cast<int64_t>(steps.size());
  for (size_t i = steps.size() > 1 ? 1 : 0; i < steps.size(); i++) {
    s.tokens += steps[i].first;
    s.seconds += steps[i].second;
  }
  s.timed_steps = static_cast<int64_t>(steps.size() > 1 ? steps.size() - 1 : 1);
  s.tokens_per_s = s.seconds > 0 ? s.tokens / s.seconds : 0;
  s.step_time_s = s.seconds / static_cast<double>(s.timed_steps);
  return s;
}

}  // namespace luatune
