// Lua module `prune`: structured model surgery and target shapes (host/prune/surgery.h), the
// Sheared-LLaMA pruner as a trainer hook (host/prune/sheared.h), importance-based width and depth
// pruning (host/prune/importance.h) and unstructured / N:M sparsity (host/prune/unstructured.h).
// Numbers at the boundary are HF's 0-based layer, head and channel numbers (as in weight names).
#include <ATen/ATen.h>

#include "bindings/batch_class.h"
#include "bindings/hook_class.h"
#include "bindings/lua_util.h"
#include "bindings/model_class.h"
#include "bindings/tensor_class.h"
#include "host/core/error.h"
#include "host/prune/importance.h"
#include "host/prune/sheared.h"
#include "host/prune/surgery.h"
#include "host/prune/unstructured.h"

namespace luatune {

namespace {

// ==== surgery and targets ====================================================================

// ==== end surgery and targets ================================================================

// ==== sheared ================================================================================

// ==== end sheared ============================================================================

// ==== importance =============================================================================

// ==== end importance =========================================================================

// ==== unstructured ===========================================================================

// ==== end unstructured =======================================================================

const luaL_Reg prune_funcs[] = {
    // surgery and targets entries

    // sheared entries

    // importance entries

    // unstructured entries

    {nullptr, nullptr}};

}  // namespace

}  // namespace luatune

extern "C" int luaopen_prune(lua_State* L) {
  using namespace luatune;
  // sheared: class registration

  lt_new_module(L, prune_funcs);
  return 1;
}
