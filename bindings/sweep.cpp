// Lua module `sweep` over host/sweep/ (placeholder: the sweep engine is being written).
#include "bindings/lua_util.h"
#include "host/sweep/sweep.h"

namespace luatune {
namespace {

const luaL_Reg sweep_funcs[] = {{nullptr, nullptr}};

}  // namespace
}  // namespace luatune

extern "C" int luaopen_sweep(lua_State* L) {
  using namespace luatune;
  lt_new_module(L, sweep_funcs);
  return 1;
}
