// Lua module `hw`: hw.probe(), hw.catalog([path]), hw.params(model), hw.plan{...}, hw.plan_text(plan),
// hw.profile{...}, hw.project(profile, {...}), hw.monitor{...}, hw.run_summary(path),
// hw.read_json(path), hw.report(doc, {markdown=, html=}), hw.runner_path() over host/hw/.
// Sizes in the tables are GiB (keys end in _gb); counts are plain numbers.
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <climits>
#include <cmath>
#include <filesystem>
#include <memory>

#include "bindings/lua_util.h"
#include "bindings/model_class.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/core/strings.h"
#include "host/hw/catalog.h"
#include "host/hw/device_probe.h"
#include "host/hw/plan.h"
#include "host/hw/plan_recipe.h"
#include "host/hw/profile.h"
#include "host/hw/report.h"
#include "host/model/transformer.h"

namespace luatune {

using MonitorPtr = std::shared_ptr<HwMonitor>;

LT_CLASS(MonitorPtr, "HwMonitor");

namespace {

using json = nlohmann::json;

// ============================================================================================
// JSON (a Lua table becomes JSON through lt_to_json, bindings/lua_util.h)

json json_of(const std::vector<std::string>& v) {
  return json(v);
}

// ============================================================================================
// Shared readers

std::vector<GpuSpec> catalog_arg(lua_State* L, int idx) {
  if (lua_isnoneornil(L, idx)) return hw_catalog_load(hw_catalog_default_path());
  if (lua_type(L, idx) == LUA_TSTRING) {
    std::string path = lua_tostring(L, idx);
    return hw_catalog_load(path.empty() ? hw_catalog_default_path() : path);
  }
  // A table as hw.catalog() returns it.
  json j = {{"gpus", lt_to_json(L, idx, "hw: catalog")}};
  return hw_catalog_parse(j.dump(), "catalog table");
}

// A model: a Model, a preset name, a model directory or config.json path, or a table of
// config.json fields (with "model_type" or "architectures", or arch = "llama" and HF keys).
ModelConfig model_arg(lua_State* L, int idx, const char* what) {
  if (auto* m = lt_test<std::shared_ptr<Model>>(L, idx)) return (*m)->config;
  if (lua_type(L, idx) == LUA_TSTRING) {
    std::string s = lua_tostring(L, idx);
    ModelConfig c;
    if (hw_model_preset(s, &c)) return c;
    return model_config_load(s);
  }
  if (lua_istable(L, idx)) {
    json j = lt_to_json(L, idx, what);
    if (j.contains("arch") && j["arch"].is_string()) {
      std::string arch = j["arch"];
      j.erase("arch");
      return model_config_with(arch, j.dump(), what);
    }
    return model_config_parse(j.dump(), what);
  }
  fail(std::string(what) + ": expected a Model, a preset name (" + str_join(hw_model_presets(), ", ") +
       "), a model directory, or a table of config.json fields; got " + luaL_typename(L, idx));
}

json params_json(const HwParamCounts& n) {
  return {{"total", n.total},   {"embedding", n.embedding}, {"lm_head", n.lm_head},
          {"linear", n.linear}, {"norms", n.norms},         {"matmul", n.matmul}};
}

json gpu_json(const GpuSpec& g) {
  return {{"name", g.name},
          {"aliases", json_of(g.aliases)},
          {"memory_gb", g.memory_gb},
          {"bandwidth_gbs", g.bandwidth_gbs},
          {"bf16_tflops", g.bf16_tflops},
          {"fp16_tflops", g.fp16_tflops},
          {"bf16", g.bf16},
          {"interconnect", g.interconnect},
          {"price_per_hour", g.price_per_hour},
          {"price_source", g.price_source},
          {"price_date", g.price_date},
          {"notes", g.notes}};
}

// ============================================================================================
// Functions

int l_hw_probe(lua_State* L) {
  DeviceInfo d = hw_device_probe();
  json j = {{"kind", d.kind},           {"name", d.name},           {"device_count", d.device_count},
            {"memory_gb", d.memory_gb}, {"cpu_cores", d.cpu_cores}, {"nvml", d.nvml},
            {"notes", json_of(d.notes)}};
  if (d.sm_count > 0) j["sm_count"] = d.sm_count;
  if (!d.driver_version.empty()) j["driver_version"] = d.driver_version;
  if (!d.cuda_version.empty()) j["cuda_version"] = d.cuda_version;
  lt_push_json(L, j);
  return 1;
}
LT_REGISTER("hw.probe", l_hw_probe);

int l_hw_catalog(lua_State* L) {
  std::vector<GpuSpec> cat = catalog_arg(L, 1);
  json a = json::array();
  for (const auto& g : cat) a.push_back(gpu_json(g));
  lt_push_json(L, a);
  return 1;
}
LT_REGISTER("hw.catalog", l_hw_catalog);

int l_hw_params(lua_State* L) {
  lt_push_json(L, params_json(hw_param_counts(model_arg(L, 1, "hw.params"))));
  return 1;
}
LT_REGISTER("hw.params", l_hw_params);

int l_hw_presets(lua_State* L) {
  lt_push_json(L, json_of(hw_model_presets()));
  return 1;
}
LT_REGISTER("hw.presets", l_hw_presets);

json plan_json(const Plan& p) {
  json comp = json::object(), notes = json::object();
  for (const auto& [name, bytes] : plan_component_list(p.components)) {
    comp[name] = bytes / kGiB;
    std::string note = plan_component_note(p.options, name);
    if (!note.empty()) notes[name] = note;
  }
  const PlanComponents& m = p.components;
  json host = {
      {"master_weights_gb", m.host_master_weights / kGiB},
      {"optimizer_states_gb", m.host_optimizer_states / kGiB},
      {"grad_staging_gb", m.host_grad_staging / kGiB},
      {"per_rank_gb", (m.host_master_weights + m.host_optimizer_states + m.host_grad_staging) / kGiB},
      {"ranks_per_node", m.ranks_per_node},
      {"per_node_gb", m.host_per_node / kGiB}};
  json gpus = json::array();
  for (const GpuFit& f : p.gpus)
    gpus.push_back({{"gpu", f.gpu},
                    {"memory_gb", f.memory_gb},
                    {"fits", f.fits},
                    {"headroom_gb", f.headroom_gb},
                    {"max_micro_batch", f.max_micro_batch},
                    {"step_s", f.step_s >= 0 ? json(f.step_s) : json(nullptr)},
                    {"run_hours", f.run_hours >= 0 ? json(f.run_hours) : json(nullptr)},
                    {"cost_usd", f.cost_usd >= 0 ? json(f.cost_usd) : json(nullptr)},
                    {"advice", json_of(f.advice)}});
  const PlanOptions& o = p.options;
  return {{"components", comp},
          {"notes", notes},
          {"host_ram", host},
          {"total_gb", p.components.total / kGiB},
          {"peak_at", p.components.peak_at},
          {"params", params_json(p.params)},
          {"trainable", p.trainable},
          {"method", plan_method_name(o.method)},
          {"dtype", o.dtype},
          {"batch_size", o.batch_size},
          {"max_length", o.max_length},
          {"gradient_checkpointing", o.gradient_checkpointing},
          {"gradient_accumulation_steps", o.gradient_accumulation_steps},
          {"max_steps", o.max_steps},
          {"lora_r", o.lora_r},
          {"lora_targets", json_of(o.lora_targets)},
          {"optimizer", o.optimizer},
          {"optimizer_offload", o.optimizer_offload},
          {"shard", plan_shard_name(o.shard)},
          {"flops_per_token", p.flops_per_token},
          {"mfu_assumed", p.efficiency.mfu},
          {"mfu_source", p.efficiency.source},
          {"step_tokens", p.step_tokens},
          {"run_tokens", p.run_tokens},
          {"gpus", gpus},
          {"n_gpus", o.gpus},
          {"memory_formula", hw_plan_formula(o)},
          {"model", json::parse(model_config_to_json(p.model))},
          {"text", hw_plan_text(p)}};
}

// shard= as a name ("full", "FULL_SHARD") or the ZeRO stage (3); "" when not given.
std::string shard_arg(lua_State* L, int idx) {
  lua_getfield(L, idx, "shard");
  std::string s = lua_type(L, -1) == LUA_TNUMBER ? str_from_number(lua_tonumber(L, -1)) : "";
  lua_pop(L, 1);
  return s.empty() && lt_has_field(L, idx, "shard") ? lt_opt_string(L, idx, "shard", "none") : s;
}

// Either model= and the settings, or recipe_config= (a recipe's config, as `runner plan` reads it)
// with recipe= and optional overrides.
int l_hw_plan(lua_State* L) {
  lt_check_required_options(L, 1, lt_api("hw.plan"));
  LT_CHECK(!lt_has_field(L, 1, "gpus") || !lt_has_field(L, 1, "nproc"),
           "hw.plan: give gpus= or nproc= (the same setting), not both");
  const int64_t gpus = lt_opt_int(L, 1, "nproc", lt_opt_int(L, 1, "gpus", 1));
  const int64_t gpus_per_node = lt_opt_int(L, 1, "gpus_per_node", 0);
  ModelConfig model;
  PlanOptions o;
  if (lt_has_field(L, 1, "recipe_config")) {
    lua_getfield(L, 1, "recipe_config");
    json cfg = lt_to_json(L, -1, "hw.plan: recipe_config");
    lua_pop(L, 1);
    // "" = not given: the recipe's config decides (these keys' declared defaults are the model= path's).
    auto given = [&](const char* key) { return lt_has_field(L, 1, key) ? lt_opt_string(L, 1, key, "") : ""; };
    PlanExtras ex;
    ex.model_preset = given("model_preset");
    ex.method = given("method");
    ex.gpus = gpus;
    ex.gpus_per_node = gpus_per_node;
    ex.shard = shard_arg(L, 1);
    ex.optimizer = given("optimizer");
    ex.optimizer_offload = given("optimizer_offload");
    PlanRequest r = hw_plan_request(cfg, given("recipe"), ex);
    model = r.model;
    o = r.options;
  } else {
    LT_CHECK(lt_has_field(L, 1, "model"),
             "hw.plan: needs model= (a Model, preset name, model directory or config table)");
    lua_getfield(L, 1, "model");
    model = model_arg(L, lua_gettop(L), "hw.plan: model");
    lua_pop(L, 1);
    o.method = plan_method_parse(lt_opt_string(L, 1, "method", plan_method_name(o.method)));
    o.dtype = lt_opt_string(L, 1, "dtype", o.dtype);
    o.master_weights = lt_opt_bool(L, 1, "master_weights", o.master_weights);
    o.optimizer = lt_opt_string(L, 1, "optimizer", o.optimizer);
    o.batch_size = lt_opt_int(L, 1, "batch_size", o.batch_size, 1);
    o.max_length = lt_opt_int(L, 1, "max_length", o.max_length, 1);
    o.gradient_checkpointing = lt_opt_bool(L, 1, "gradient_checkpointing", o.gradient_checkpointing);
    o.loss_chunk = lt_opt_int(L, 1, "loss_chunk", o.loss_chunk, 1);
    o.max_steps = lt_opt_int(L, 1, "max_steps", o.max_steps, 0);  // 0: no time or cost
    o.gradient_accumulation_steps =
        lt_opt_int(L, 1, "gradient_accumulation_steps", o.gradient_accumulation_steps, 1);
    lua_getfield(L, 1, "lora");  // a recipe's lora table, checked as lora.apply checks it
    const int lora = lua_gettop(L);
    if (lt_check_options(L, lora, lt_api("lora.apply"))) {
      o.lora_r = lt_opt_int(L, lora, "r", o.lora_r, 1);
      o.lora_dropout = lt_opt_number(L, lora, "dropout", o.lora_dropout);
      lt_opt_strings(L, lora, "targets", "hw.plan: lora", &o.lora_targets);
    }
    lua_pop(L, 1);
    o.optimizer_offload = lt_opt_string(L, 1, "optimizer_offload", o.optimizer_offload);
    const std::string shard = shard_arg(L, 1);
    o.shard =
        plan_shard_parse(shard.empty() ? lt_opt_string(L, 1, "shard", plan_shard_name(o.shard)) : shard);
    o.gpus = gpus;
    o.gpus_per_node = gpus_per_node;
  }
  lua_getfield(L, 1, "catalog");
  std::vector<GpuSpec> cat = catalog_arg(L, lua_gettop(L));
  lua_pop(L, 1);
  if (lt_has_field(L, 1, "gpu")) cat = {hw_catalog_find(cat, lt_opt_string(L, 1, "gpu", ""))};
  lt_push_json(L, plan_json(hw_plan(model, o, cat)));
  return 1;
}
LT_REGISTER("hw.plan", l_hw_plan);

int l_hw_plan_text(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "text");
  LT_CHECK(lua_type(L, -1) == LUA_TSTRING, "hw.plan_text: expected a table from hw.plan (it has no 'text')");
  return 1;
}
LT_REGISTER("hw.plan_text", l_hw_plan_text);

// ---- profiles -------------------------------------------------------------------------------

// Reads a profile's inputs from the table at idx: hw.profile's options (checked: `strict`), or a
// profile table itself, from which hw.project reads the same keys (it holds more).
std::pair<ModelConfig, ProfileInput> profile_input(lua_State* L, int idx, bool strict) {
  if (strict) lt_check_options(L, idx, lt_api("hw.profile"));
  ProfileInput in;
  LT_CHECK(lt_has_field(L, idx, "model"), lt_fname(L) << ": the profile needs model= (its config)");
  lua_getfield(L, idx, "model");
  ModelConfig c = model_arg(L, lua_gettop(L), "hw.profile: model");
  lua_pop(L, 1);
  in.tokens = lt_opt_number(L, idx, "tokens", 0);
  in.seconds = lt_opt_number(L, idx, "seconds", 0);
  in.steps = lt_opt_int(L, idx, "steps", 0);
  in.seq_len = lt_opt_int(L, idx, "seq_len", 2048);
  in.method = plan_method_parse(lt_opt_string(L, idx, "method", "full"));
  in.lora_params = lt_opt_int(L, idx, "lora_params", 0);
  in.checkpointing = lt_opt_bool(L, idx, "checkpointing", false);
  in.peak_memory_gb = lt_opt_number(L, idx, "peak_memory_gb", 0);
  in.peak_tflops = lt_opt_number(L, idx, "peak_tflops", 0);
  in.price_per_hour = lt_opt_number(L, idx, "price_per_hour", 0);
  in.gpus = lt_opt_int(L, idx, "gpus", 1);
  in.device = lt_opt_string(L, idx, "device", "cpu");
  in.gpu = lt_opt_string(L, idx, "gpu", "");
  return {c, in};
}

json profile_json(const ModelConfig& c, const Profile& p) {
  const ProfileInput& in = p.in;
  json j = {{"model", json::parse(model_config_to_json(c))},
            {"tokens", in.tokens},
            {"seconds", in.seconds},
            {"steps", in.steps},
            {"seq_len", in.seq_len},
            {"method", plan_method_name(in.method)},
            {"lora_params", in.lora_params},
            {"checkpointing", in.checkpointing},
            {"gpus", in.gpus},
            {"device", in.device},
            {"tokens_per_s", p.tokens_per_s},
            {"step_time_s", p.step_time_s},
            {"flops_per_token", p.flops.model},
            {"hardware_flops_per_token", p.flops.hardware},
            {"flops_convention", p.flops.convention},
            {"flops_formula", p.flops.formula},
            {"gpu_hours", p.gpu_hours}};
  if (!in.gpu.empty()) j["gpu"] = in.gpu;
  if (in.peak_memory_gb > 0) j["peak_memory_gb"] = in.peak_memory_gb;
  if (in.peak_tflops > 0) j["peak_tflops"] = in.peak_tflops;
  if (in.price_per_hour > 0) j["price_per_hour"] = in.price_per_hour;
  if (p.mfu >= 0) j["mfu"] = p.mfu;
  if (p.hfu >= 0) j["hfu"] = p.hfu;
  if (p.cost_usd >= 0) j["cost_usd"] = p.cost_usd;
  if (p.usd_per_mtok >= 0) j["usd_per_mtok"] = p.usd_per_mtok;
  return j;
}

// Fills gpu, peak and price from the catalog when the device is a catalog GPU and they were not given.
void complete_from_catalog(lua_State* L, int idx, ProfileInput& in, const std::string& dtype) {
  if (in.device == "cpu" && in.gpu.empty()) return;
  lua_getfield(L, idx, "catalog");
  std::vector<GpuSpec> cat = catalog_arg(L, lua_gettop(L));
  lua_pop(L, 1);
  const GpuSpec* g = in.gpu.empty() ? hw_catalog_match(cat, in.device) : &hw_catalog_find(cat, in.gpu);
  if (!g) return;
  in.gpu = g->name;
  if (in.peak_tflops <= 0) in.peak_tflops = g->peak_tflops(dtype);
  if (in.price_per_hour <= 0) in.price_per_hour = g->price_per_hour;
}

int l_hw_profile(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  auto [c, in] = profile_input(L, 1, true);
  complete_from_catalog(L, 1, in, lt_opt_string(L, 1, "dtype", "bf16"));
  lt_push_json(L, profile_json(c, hw_profile(c, in)));
  return 1;
}
LT_REGISTER("hw.profile", l_hw_profile);

int l_hw_project(lua_State* L) {
  lt_check_options(L, 2, lt_api("hw.project"));
  std::vector<GpuSpec> cat;
  {
    if (lua_istable(L, 2))
      lua_getfield(L, 2, "catalog");
    else
      lua_pushnil(L);
    cat = catalog_arg(L, lua_gettop(L));
    lua_pop(L, 1);
  }
  ProjectOptions po;
  po.tokens = lua_istable(L, 2) ? lt_opt_number(L, 2, "tokens", 0) : 0;
  po.mfu = lua_istable(L, 2) ? lt_opt_number(L, 2, "mfu", 0) : 0;
  po.dtype = lua_istable(L, 2) ? lt_opt_string(L, 2, "dtype", "bf16") : "bf16";
  po.micro_batch_tokens = lua_istable(L, 2) ? lt_opt_int(L, 2, "micro_batch_tokens", 0) : 0;
  std::unique_ptr<Plan> plan;
  if (lua_istable(L, 2) && lt_has_field(L, 2, "plan")) {
    // Rebuild the fits from the plan table (hw.plan's output).
    plan = std::make_unique<Plan>();
    lua_getfield(L, 2, "plan");
    json pj = lt_to_json(L, -1, "hw.project: plan");
    lua_pop(L, 1);
    LT_CHECK(pj.is_object() && pj.contains("gpus") && pj.contains("total_gb"),
             "hw.project: plan must be a table from hw.plan");
    plan->components.total = pj["total_gb"].get<double>() * kGiB;
    for (const auto& g : pj["gpus"]) {
      GpuFit f;
      f.gpu = g.value("gpu", "");
      f.fits = g.value("fits", false);
      f.max_micro_batch = g.value("max_micro_batch", 0);
      if (g.contains("advice") && g["advice"].is_array())
        for (const auto& a : g["advice"]) f.advice.push_back(a.get<std::string>());
      plan->gpus.push_back(f);
    }
    po.plan = plan.get();
  }
  ModelConfig c;
  std::unique_ptr<Profile> prof;
  if (lua_istable(L, 1)) {
    auto [pc, in] = profile_input(L, 1, false);
    c = pc;
    prof = std::make_unique<Profile>(hw_profile(c, in));
  } else {
    LT_CHECK(lua_istable(L, 2) && lt_has_field(L, 2, "model"),
             "hw.project: without a profile, give model= in the options");
    lua_getfield(L, 2, "model");
    c = model_arg(L, lua_gettop(L), "hw.project: model");
    lua_pop(L, 1);
  }
  json rows = json::array();
  for (const ProjectionRow& r : hw_project(prof.get(), c, cat, po)) {
    json j = {{"gpu", r.gpu}, {"kind", r.kind}, {"fits", r.fits}, {"note", r.note}};
    if (r.has_plan) {
      j["predicted_peak_gb"] = r.predicted_peak_gb;
      j["max_micro_batch"] = r.max_micro_batch;
      if (!r.advice.empty())
        j["advice"] = json_of(r.advice);  // (an empty Lua table would read back as an object)
    }
    if (r.tokens_per_s > 0) j["tokens_per_s"] = r.tokens_per_s;
    if (r.hours >= 0) j["hours"] = r.hours;
    if (r.gpu_hours >= 0) j["gpu_hours"] = r.gpu_hours;
    if (r.cost_usd >= 0) j["cost_usd"] = r.cost_usd;
    if (r.usd_per_mtok >= 0) j["usd_per_mtok"] = r.usd_per_mtok;
    if (r.mfu >= 0) j["mfu"] = r.mfu;
    if (!r.bound.empty()) j["bound"] = r.bound;
    rows.push_back(j);
  }
  lt_push_json(L, rows);
  return 1;
}
LT_REGISTER("hw.project", l_hw_project);

int l_hw_projection_rule(lua_State* L) {
  lua_pushstring(L, hw_projection_rule().c_str());
  return 1;
}
LT_REGISTER("hw.projection_rule", l_hw_projection_rule);

// ---- monitor, run files, report ------------------------------------------------------------

std::string describe_monitor(const MonitorPtr& m) {
  return std::string("HwMonitor(") + (m && m->running() ? "sampling" : "stopped") + ")";
}
LT_REGISTER_CLASS("hw", MonitorPtr, describe_monitor);

int l_hw_monitor(lua_State* L) {
  lt_check_options(L, 1, lt_api("hw.monitor"));
  double interval = lua_istable(L, 1) ? lt_opt_number(L, 1, "interval", 0.5) : 0.5;
  int device = lua_istable(L, 1) ? static_cast<int>(lt_opt_int(L, 1, "device", 0, 0, 1 << 20)) : 0;
  LT_CHECK(interval > 0, "hw.monitor: interval must be positive seconds, got " << interval);
  lt_push<MonitorPtr>(L, std::make_shared<HwMonitor>(interval, device));
  return 1;
}
LT_REGISTER("hw.monitor", l_hw_monitor);

int l_hw_monitor_stop(lua_State* L) {
  MonitorPtr& m = lt_check<MonitorPtr>(L, 1);
  MonitorSummary s = m->stop();
  json j = {{"samples", s.samples}, {"seconds", s.seconds}};
  if (s.samples > 0) {
    j["util_mean"] = s.util_mean;
    j["util_max"] = s.util_max;
    j["mem_max_gb"] = s.mem_max_gb;
    j["power_mean_w"] = s.power_mean_w;
    j["energy_wh"] = s.energy_wh;
  }
  if (!s.note.empty()) j["note"] = s.note;
  lt_push_json(L, j);
  return 1;
}
LT_REGISTER("HwMonitor:stop", l_hw_monitor_stop);

int l_hw_run_summary(lua_State* L) {
  RunSummary s = hw_read_metrics(luaL_checkstring(L, 1));
  json j = {{"steps", s.steps},
            {"timed_steps", s.timed_steps},
            {"tokens", s.tokens},
            {"seconds", s.seconds},
            {"tokens_per_s", s.tokens_per_s},
            {"step_time_s", s.step_time_s},
            {"config", json::parse(s.config_json)}};
  if (s.peak_memory_gb > 0) j["peak_memory_gb"] = s.peak_memory_gb;
  if (s.loss >= 0) j["loss"] = s.loss;
  if (s.eval_loss >= 0) j["eval_loss"] = s.eval_loss;
  if (s.accuracy >= 0) j["accuracy"] = s.accuracy;
  lt_push_json(L, j);
  return 1;
}
LT_REGISTER("hw.run_summary", l_hw_run_summary);

int l_hw_read_json(lua_State* L) {
  std::string path = luaL_checkstring(L, 1);
  json j = json_parse_checked(file_read(path), "hw.read_json: " + path);
  lt_push_json(L, j);
  return 1;
}
LT_REGISTER("hw.read_json", l_hw_read_json);

void write_file(const std::string& path, const std::string& text) {
  std::error_code ec;
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  file_write_atomic(path, text);
}

int l_hw_report(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lt_check_required_options(L, 2, lt_api("hw.report"));
  json doc = lt_to_json(L, 1, "hw.report: doc");
  std::string md = lt_opt_string(L, 2, "markdown", ""), html = lt_opt_string(L, 2, "html", "");
  LT_CHECK(!md.empty() || !html.empty(), "hw.report: give markdown= and/or html= paths to write");
  // Render both before writing either, so a failure leaves no half of a report.
  std::string md_text = md.empty() ? "" : hw_report_markdown(doc);
  std::string html_text = html.empty() ? "" : hw_report_html(doc);
  if (!md.empty()) write_file(md, md_text);
  if (!html.empty()) write_file(html, html_text);
  lua_newtable(L);
  if (!md.empty()) lt_set_string(L, "markdown", md);
  if (!html.empty()) lt_set_string(L, "html", html);
  return 1;
}
LT_REGISTER("hw.report", l_hw_report);

int l_hw_runner_path(lua_State* L) {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  LT_CHECK(n > 0, "hw.runner_path: cannot read /proc/self/exe");
  lua_pushlstring(L, buf, static_cast<size_t>(n));
  return 1;
}
LT_REGISTER("hw.runner_path", l_hw_runner_path);

}  // namespace

}  // namespace luatune
