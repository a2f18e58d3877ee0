// The Lua modules luatune provides; the runner opens each as a global of the same name. What each
// exposes is declared in bindings/api/<module>.yaml (bindings/lua_api.h); bindings/<module>.cpp registers
// it (LT_REGISTER, bindings/lua_util.h).
#pragma once

#include <lua.hpp>

#include <string>
#include <vector>

namespace luatune {

// Every module, in the order the runner opens them (and bindings/api/modules.yaml lists them).
const std::vector<std::string>& lt_modules();
// Opens every module into L as a global of its name, and as package.loaded[name] for require.
void lt_open_modules(lua_State* L);

}  // namespace luatune
