// The Lua modules luatune provides; runner/recipe_run.cpp opens each as a global of the same name.
// Each binding file also declares what its module exposes (bindings/lua_api.h: lt_api_<module>).
#pragma once

#include <lua.hpp>

#include "bindings/lua_api.h"

extern "C" {
int luaopen_config(lua_State* L);
int luaopen_torch(lua_State* L);
int luaopen_train(lua_State* L);
int luaopen_tokenizer(lua_State* L);
int luaopen_models(lua_State* L);
int luaopen_data(lua_State* L);
int luaopen_metrics(lua_State* L);
int luaopen_eval(lua_State* L);
int luaopen_lora(lua_State* L);
int luaopen_qlora(lua_State* L);
int luaopen_prune(lua_State* L);
int luaopen_dist(lua_State* L);
int luaopen_distill(lua_State* L);
int luaopen_sweep(lua_State* L);
int luaopen_hw(lua_State* L);
int luaopen_export(lua_State* L);
}

namespace luatune {
LtModuleApi lt_api_config();
LtModuleApi lt_api_torch();
LtModuleApi lt_api_train();
LtModuleApi lt_api_tokenizer();
LtModuleApi lt_api_models();
LtModuleApi lt_api_data();
LtModuleApi lt_api_metrics();
LtModuleApi lt_api_eval();
LtModuleApi lt_api_lora();
LtModuleApi lt_api_qlora();
LtModuleApi lt_api_prune();
LtModuleApi lt_api_dist();
LtModuleApi lt_api_distill();
LtModuleApi lt_api_sweep();
LtModuleApi lt_api_hw();
LtModuleApi lt_api_export();
}  // namespace luatune
