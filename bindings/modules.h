// The Lua modules luatune provides; the runner opens each as a global of the same name. What each
// exposes is declared in bindings/lua_api.yaml (bindings/lua_api.h).
#pragma once

#include <lua.hpp>

#include <vector>

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

struct LtModule {
  const char* name;
  lua_CFunction open;
};
// Every module, in the order the runner opens them (and bindings/lua_api.yaml declares them).
const std::vector<LtModule>& lt_modules();
// Opens every module into L as a global of its name, and as package.loaded[name] for require.
void lt_open_modules(lua_State* L);

}  // namespace luatune
