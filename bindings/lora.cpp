// Lua module `lora`: LoRA / DoRA adapters on a Model (host/adapt/lora.h) and LLaMA-Adapter's
// adaption prompts (host/adapt/adaption_prompt.h), saved and loaded in PEFT's format. Layer numbers
// are HF's, as in the weight names (model.layers.0 is layer 0).
#include "host/adapt/lora.h"

#include <cmath>

#include "bindings/lua_util.h"
#include "bindings/model_class.h"
#include "bindings/tensor_class.h"
#include "host/adapt/adaption_prompt.h"
#include "host/adapt/peft.h"
#include "host/core/error.h"
#include "host/io/hub_cache.h"

namespace luatune {

namespace {

int l_lora_apply(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  LoraConfig c;
  uint64_t seed = 0;
  if (lt_check_options_over(L, 2, lt_api("lora.apply"))) {
    double r = lt_opt_number(L, 2, "r", static_cast<double>(c.r));
    LT_CHECK(r >= 1 && r == static_cast<double>(static_cast<int64_t>(r)),
             "lora.apply: r must be a positive integer, got " << r);
    c.r = static_cast<int64_t>(r);
    c.alpha = lt_opt_number(L, 2, "alpha", c.alpha);
    c.dropout = lt_opt_number(L, 2, "dropout", c.dropout);
    c.rslora = lt_opt_bool(L, 2, "rslora", c.rslora);
    c.dora = lt_opt_bool(L, 2, "dora", c.dora);
    seed = static_cast<uint64_t>(lt_opt_int(L, 2, "seed", 0, 0));
    std::vector<ConfigValue> targets;
    for (const std::string& t : c.targets) targets.push_back(ConfigValue::of_string(t));
    lt_check_defaults(L, 2, {{"targets", ConfigValue::of_list(targets)}});
    lt_opt_strings(L, 2, "targets", "lora.apply", &c.targets);
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
LT_REGISTER("lora.apply", l_lora_apply);

int l_lora_adaption_prompt(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  AdaptionPromptConfig c;
  uint64_t seed = 0;
  if (lt_check_options_over(L, 2, lt_api("lora.adaption_prompt"))) {  // extra's keys over opts
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
LT_REGISTER("lora.adaption_prompt", l_lora_adaption_prompt);

// LoRA or adaption prompt, whichever the model has.
int l_lora_save(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  std::string dir = luaL_checkstring(L, 2);
  const std::string hub_name = hub_model_name_of(m.source_dir);
  std::string base = hub_name.empty() ? m.source_dir : hub_name;
  if (lt_check_options(L, 3, lt_api("lora.save"))) {
    base = lt_opt_string(L, 3, "base_model", base);
  }
  if (adaption_prompt_present(m))
    adaption_prompt_save(m, dir, base);
  else
    lora_save(m, dir, base);
  return 0;
}
LT_REGISTER("lora.save", l_lora_save);

int l_lora_load(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  std::string dir = luaL_checkstring(L, 2);
  if (peft_adapter_type(dir) == "ADAPTION_PROMPT") {
    AdaptionPromptConfig a = adaption_prompt_load(m, dir);
    lt_push_numbers(L, {{"adapter_len", a.adapter_len}, {"adapter_layers", a.adapter_layers}});
    return 1;
  }
  LoraConfig c = lora_load(m, dir);
  lt_push_numbers(L, {{"r", c.r}, {"alpha", c.alpha}, {"dropout", c.dropout}});
  lt_set_bool(L, "rslora", c.rslora);
  lt_set_bool(L, "dora", c.dora);
  if (!c.target_regex.empty()) {
    lua_pushstring(L, c.target_regex.c_str());
  } else {
    lt_push_list(L, c.targets);
  }
  lua_setfield(L, -2, "targets");
  lt_set_list(L, "layers", c.layers);
  return 1;
}
LT_REGISTER("lora.load", l_lora_load);

int l_lora_merge(lua_State* L) {
  lora_merge(lt_check_model(L, 1));
  return 0;
}
LT_REGISTER("lora.merge", l_lora_merge);

// (adaption prompts: ["model.layers.1.self_attn.adaption_prompt"], [...adaption_gate])
int l_lora_parameters(lua_State* L) {
  lt_push_named_tensors(L, lt_check_model(L, 1).adapter_parameters());
  return 1;
}
LT_REGISTER("lora.parameters", l_lora_parameters);

}  // namespace

}  // namespace luatune
