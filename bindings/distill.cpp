// Lua module `distill`: a frozen teacher's logits (and optionally hidden states) as a training
// signal for a student, as a trainer hook (host/distill/distill.h).
#include "bindings/hook_class.h"
#include "bindings/lua_util.h"
#include "bindings/model_class.h"
#include "host/distill/distill.h"

namespace luatune {
namespace {
const luaL_Reg distill_funcs[] = {{nullptr, nullptr}};
}  // namespace
}  // namespace luatune

extern "C" int luaopen_distill(lua_State* L) {
  luatune::lt_new_module(L, luatune::distill_funcs);
  return 1;
}
