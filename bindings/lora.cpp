// Lua module `lora`: LoRA / DoRA adapters on a Model (host/adapt/lora.h) and LLaMA-Adapter's
// adaption prompts (host/adapt/adaption_prompt.h), saved and loaded in PEFT's format. Layer numbers
// are HF's, as in the weight names (model.layers.0 is layer 0).
#include "host/adapt/lora.h"

#include <cmath>

#include "bindings/lua_util.h"
#include "bindings/model_class.h"
#include "bindings/modules.h"
#include "bindings/tensor_class.h"
#include "host/adapt/adaption_prompt.h"
#include "host/adapt/peft.h"
#include "host/core/error.h"
#include "host/io/hub_cache.h"

namespace luatune {

namespace {

Model& check_model(lua_State* L, int idx) {
  return *lt_check<std::shared_ptr<Model>>(L, idx);
}

// lora.apply's `key` option: a string or a list of strings (nil leaves `out` alone).
void opt_string_list(lua_State* L, int idx, const char* key, std::vector<std::string>& out) {
  lua_getfield(L, idx, key);
  if (lua_type(L, -1) == LUA_TSTRING) {
    out = {lua_tostring(L, -1)};
  } else if (lua_istable(L, -1)) {
    LT_CHECK(lt_is_list(L, -1), "lora.apply: " << key << " must be a string or a list of strings");
    out.clear();
    size_t n = lua_objlen(L, -1);
    for (size_t i = 1; i <= n; i++) {
      lua_rawgeti(L, -1, static_cast<int>(i));
      LT_CHECK(lua_type(L, -1) == LUA_TSTRING,
               "lora.apply: " << key << " must be a string or a list of strings");
      out.push_back(lua_tostring(L, -1));
      lua_pop(L, 1);
    }
  } else {
    LT_CHECK(lua_isnil(L, -1), "lora.apply: " << key << " must be a string or a list of strings");
  }
  lua_pop(L, 1);
}

const LtFunc kLoraApply{
    "lora",
    "apply",
    "model: Model, opts?: Opts",
    "integer # the Linears adapted",
    "wraps the targeted Linears: base(x) + B(A(dropout(x))) * alpha/r, A kaiming-uniform, B zero (the output "
    "is unchanged); freezes every base weight",
    {{"r", "integer", "16", "rank of A and B"},
     {"alpha", "number", "32", "the update is scaled by alpha/r (alpha/sqrt(r) with rslora)"},
     {"dropout", "number", "0.05", "dropout on the adapter's input, only while training"},
     {"targets", "string|string[]", "{\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\"}",
      "names among q/k/v/o_proj, gate/up/down_proj, \"all-linear\", or full module names"},
     {"layers", "integer[]", "",
      "HF layer numbers to adapt (0-based, as in the names); default: every layer"},
     {"rslora", "boolean", "false", "rank-stabilised scale alpha/sqrt(r)"},
     {"dora", "boolean", "false", "DoRA: weight-decomposed LoRA (a learned magnitude per output row)"},
     {"seed", "integer", "0", "seed of A's initialisation (a generator of its own)"}}};
int l_lora_apply(lua_State* L) {
  Model& m = check_model(L, 1);
  LoraConfig c;
  uint64_t seed = 0;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lt_check_options(L, 2, kLoraApply);
    double r = lt_opt_number(L, 2, "r", static_cast<double>(c.r));
    LT_CHECK(r >= 1 && r == static_cast<double>(static_cast<int64_t>(r)),
             "lora.apply: r must be a positive integer, got " << r);
    c.r = static_cast<int64_t>(r);
    c.alpha = lt_opt_number(L, 2, "alpha", c.alpha);
    c.dropout = lt_opt_number(L, 2, "dropout", c.dropout);
    c.rslora = lt_opt_bool(L, 2, "rslora", c.rslora);
    c.dora = lt_opt_bool(L, 2, "dora", c.dora);
    seed = static_cast<uint64_t>(lt_opt_int(L, 2, "seed", 0, 0));
    opt_string_list(L, 2, "targets", c.targets);
    lua_getfield(L, 2, "layers");
    if (!lua_isnil(L, -1)) {
      LT_CHECK(lua_istable(L, -1) && lt_is_list(L, -1), "lora.apply: layers must be a list of layer numbers");
      size_t n = lua_objlen(L, -1);
      for (size_t i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, static_cast<int>(i));
        c.layers.push_back(lt_check_int(L, -1));
        lua_pop(L, 1);
      }
    }
    lua_pop(L, 1);
  }
  lua_pushnumber(L, static_cast<double>(lora_apply(m, c, seed)));
  return 1;
}

const LtFunc kLoraAdaptionPrompt{"lora",
                                 "adaption_prompt",
                                 "model: Model, opts?: Opts",
                                 "integer # the layers adapted (the top ones)",
                                 "LLaMA-Adapter (PEFT's ADAPTION_PROMPT): a learnable prompt and a zero gate "
                                 "in each of the top layers; base "
                                 "frozen, so the model starts out exactly the base model",
                                 {{"adapter_len", "integer", "10", "prompt vectors per adapted layer"},
                                  {"adapter_layers", "integer", "30", "adapted layers, counted from the top"},
                                  {"seed", "integer", "0", "seed of the prompt's initialisation"}}};
int l_lora_adaption_prompt(lua_State* L) {
  Model& m = check_model(L, 1);
  AdaptionPromptConfig c;
  uint64_t seed = 0;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lt_check_options(L, 2, kLoraAdaptionPrompt);
    // Whole numbers here; their ranges are adaption_prompt_apply's checks.
    auto whole = [&](const char* key, int64_t def) {
      double v = lt_opt_number(L, 2, key, static_cast<double>(def));
      LT_CHECK(v == std::floor(v),
               "lora.adaption_prompt: " << key << " must be a positive integer, got " << v);
      return static_cast<int64_t>(v);
    };
    c.adapter_len = whole("adapter_len", c.adapter_len);
    c.adapter_layers = whole("adapter_layers", c.adapter_layers);
    seed = static_cast<uint64_t>(lt_opt_int(L, 2, "seed", 0, 0));
  }
  lua_pushnumber(L, static_cast<double>(adaption_prompt_apply(m, c, seed)));
  return 1;
}

// LoRA or adaption prompt, whichever the model has.
const LtFunc kLoraSave{
    "lora",
    "save",
    "model: Model, dir: string, opts?: Opts",
    "",
    "writes adapter_config.json and adapter_model.safetensors as peft writes them",
    {{"base_model", "string", "",
      "recorded in adapter_config.json; default: the directory the model came from (\"org/name\" for a "
      "hub-cache snapshot, as peft records it)"}}};
int l_lora_save(lua_State* L) {
  Model& m = check_model(L, 1);
  std::string dir = luaL_checkstring(L, 2);
  const std::string hub_name = hub_model_name_of(m.source_dir);
  std::string base = hub_name.empty() ? m.source_dir : hub_name;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lt_check_options(L, 3, kLoraSave);
    base = lt_opt_string(L, 3, "base_model", base);
  }
  if (adaption_prompt_present(m))
    adaption_prompt_save(m, dir, base);
  else
    lora_save(m, dir, base);
  return 0;
}

const LtFunc kLoraLoad{"lora", "load", "model: Model, dir: string",
                       "table # the config read: {r, alpha, dropout, targets, layers, rslora, dora}, or "
                       "{adapter_len, adapter_layers} "
                       "for an adaption prompt",
                       "applies a PEFT LoRA/DoRA adapter or adaption prompt and loads its weights"};
int l_lora_load(lua_State* L) {
  Model& m = check_model(L, 1);
  std::string dir = luaL_checkstring(L, 2);
  if (peft_adapter_type(dir) == "ADAPTION_PROMPT") {
    AdaptionPromptConfig a = adaption_prompt_load(m, dir);
    lua_createtable(L, 0, 2);
    lt_set_number(L, "adapter_len", static_cast<double>(a.adapter_len));
    lt_set_number(L, "adapter_layers", static_cast<double>(a.adapter_layers));
    return 1;
  }
  LoraConfig c = lora_load(m, dir);
  lua_createtable(L, 0, 7);
  lt_set_number(L, "r", static_cast<double>(c.r));
  lt_set_number(L, "alpha", c.alpha);
  lt_set_number(L, "dropout", c.dropout);
  lua_pushboolean(L, c.rslora);
  lua_setfield(L, -2, "rslora");
  lua_pushboolean(L, c.dora);
  lua_setfield(L, -2, "dora");
  if (!c.target_regex.empty()) {
    lua_pushstring(L, c.target_regex.c_str());
  } else {
    lua_createtable(L, static_cast<int>(c.targets.size()), 0);
    for (size_t i = 0; i < c.targets.size(); i++) {
      lua_pushstring(L, c.targets[i].c_str());
      lua_rawseti(L, -2, static_cast<int>(i + 1));
    }
  }
  lua_setfield(L, -2, "targets");
  lua_createtable(L, static_cast<int>(c.layers.size()), 0);
  for (size_t i = 0; i < c.layers.size(); i++) {
    lua_pushnumber(L, static_cast<double>(c.layers[i]));
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
  lua_setfield(L, -2, "layers");
  return 1;
}

const LtFunc kLoraMerge{"lora", "merge", "model: Model", "",
                        "folds the adapters into the base weights (float32, cast back) and removes them"};
int l_lora_merge(lua_State* L) {
  lora_merge(check_model(L, 1));
  return 0;
}

// (adaption prompts: ["model.layers.1.self_attn.adaption_prompt"], [...adaption_gate])
const LtFunc kLoraParameters{
    "lora", "parameters", "model: Model",
    "table<string, Tensor> # {[\"model.layers.0.self_attn.q_proj.lora_A.weight\"] = Tensor, ...}",
    "the adapter weights by name, sharing storage with the model"};
int l_lora_parameters(lua_State* L) {
  Model& m = check_model(L, 1);
  lua_newtable(L);
  for (auto& [name, t] : m.adapter_parameters()) {
    lt_push<at::Tensor>(L, *t);
    lua_setfield(L, -2, name.c_str());
  }
  return 1;
}

const luaL_Reg lora_funcs[] = {{"apply", l_lora_apply}, {"adaption_prompt", l_lora_adaption_prompt},
                               {"save", l_lora_save},   {"load", l_lora_load},
                               {"merge", l_lora_merge}, {"parameters", l_lora_parameters},
                               {nullptr, nullptr}};

}  // namespace

LtModuleApi lt_api_lora() {
  return {"lora",
          "LoRA and DoRA adapters and LLaMA-Adapter prompts, in and out of PEFT's format",
          {kLoraApply, kLoraAdaptionPrompt, kLoraSave, kLoraLoad, kLoraMerge, kLoraParameters}};
}

}  // namespace luatune

extern "C" int luaopen_lora(lua_State* L) {
  luatune::lt_new_module(L, luatune::lora_funcs);
  return 1;
}
