// The Lua modules luatune provides; runner/lua_host.cpp opens each as a global of the same name.
#pragma once

#include <lua.hpp>

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
