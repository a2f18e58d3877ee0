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

// The report both functions return: {sparsity = zeros / weights over the listed linears,
// layers = {{name=, zeros=, total=, sparsity=}, ...}} in layer order.
void push_sparsity_report(lua_State* L, const std::vector<LinearSparsity>& r) {
  int64_t zeros = 0, total = 0;
  lua_createtable(L, 0, 2);
  lua_createtable(L, static_cast<int>(r.size()), 0);
  for (size_t i = 0; i < r.size(); i++) {
    lua_createtable(L, 0, 4);
    lua_pushstring(L, r[i].name.c_str());
    lua_setfield(L, -2, "name");
    lt_set_number(L, "zeros", static_cast<double>(r[i].zeros));
    lt_set_number(L, "total", static_cast<double>(r[i].total));
    lt_set_number(L, "sparsity", r[i].sparsity());
    lua_rawseti(L, -2, static_cast<int>(i + 1));
    zeros += r[i].zeros;
    total += r[i].total;
  }
  lua_setfield(L, -2, "layers");
  lt_set_number(L, "sparsity", total ? static_cast<double>(zeros) / static_cast<double>(total) : 0.0);
}

// "2:4" -> n = 2, m = 4
void parse_pattern(const std::string& s, SparsityOptions& o) {
  size_t colon = s.find(':');
  bool good = colon != std::string::npos && colon > 0 && colon + 1 < s.size() &&
              s.find_first_not_of("0123456789:") == std::string::npos && s.find(':', colon + 1) == std::string::npos;
  LT_CHECK(good, "prune.unstructured: pattern must look like \"2:4\" (n zeros in every m inputs), got \"" << s << "\"");
  o.n = std::stoll(s.substr(0, colon));
  o.m = std::stoll(s.substr(colon + 1));
  LT_CHECK(o.m > 0 && o.n > 0 && o.n < o.m, "prune.unstructured: pattern " << s << " needs 0 < n < m (2:4, 4:8)");
}

// prune.unstructured(model, calibration, {method = "wanda", sparsity = 0.5 | pattern = "2:4",
//   blocksize = 128, dampening = 0.01, targets = {"q_proj", ...}}) -> report (as prune.sparsity)
// calibration: a list of Batch (nil or {} for magnitude).
int l_prune_unstructured(lua_State* L) {
  Model& m = *lt_check<std::shared_ptr<Model>>(L, 1);
  std::vector<Batch> calibration;
  if (!lua_isnoneornil(L, 2)) {
    LT_CHECK(lua_istable(L, 2) && lt_is_list(L, 2),
             "prune.unstructured: calibration must be a list of Batch (ds:batches / train.batch) or nil");
    size_t n = lua_objlen(L, 2);
    for (size_t i = 1; i <= n; i++) {
      lua_rawgeti(L, 2, static_cast<int>(i));
      calibration.push_back(lt_check<Batch>(L, lua_gettop(L)));
      lua_pop(L, 1);
    }
  }
  SparsityOptions o;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lt_check_options(L, 3, {"method", "sparsity", "pattern", "blocksize", "dampening", "targets"});
    o.method = lt_opt_string(L, 3, "method", o.method);
    LT_CHECK(!(lt_has_field(L, 3, "sparsity") && lt_has_field(L, 3, "pattern")),
             "prune.unstructured: give sparsity or pattern, not both");
    o.sparsity = lt_opt_number(L, 3, "sparsity", o.sparsity);
    if (lt_has_field(L, 3, "pattern")) parse_pattern(lt_opt_string(L, 3, "pattern", ""), o);
    double bs = lt_opt_number(L, 3, "blocksize", static_cast<double>(o.blocksize));
    LT_CHECK(bs >= 1 && bs == std::floor(bs), "prune.unstructured: blocksize must be a positive integer, got " << bs);
    o.blocksize = static_cast<int64_t>(bs);
    o.dampening = lt_opt_number(L, 3, "dampening", o.dampening);
    lua_getfield(L, 3, "targets");
    if (!lua_isnil(L, -1)) {
      LT_CHECK(lua_istable(L, -1) && lt_is_list(L, -1), "prune.unstructured: targets must be a list of linear names");
      size_t n = lua_objlen(L, -1);
      for (size_t i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, static_cast<int>(i));
        LT_CHECK(lua_type(L, -1) == LUA_TSTRING, "prune.unstructured: targets must be a list of linear names");
        o.targets.push_back(lua_tostring(L, -1));
        lua_pop(L, 1);
      }
    }
    lua_pop(L, 1);
  }
  push_sparsity_report(L, prune_unstructured(m, calibration, o));
  return 1;
}

// prune.sparsity(model) -> {sparsity = , layers = {{name=, zeros=, total=, sparsity=}, ...}} over every
// decoder linear weight
int l_prune_sparsity(lua_State* L) {
  push_sparsity_report(L, measure_sparsity(*lt_check<std::shared_ptr<Model>>(L, 1)));
  return 1;
}

// ==== end unstructured =======================================================================

const luaL_Reg prune_funcs[] = {
    // surgery and targets entries

    // sheared entries

    // importance entries

    // unstructured entries
    {"unstructured", l_prune_unstructured},
    {"sparsity", l_prune_sparsity},

    {nullptr, nullptr}};

}  // namespace

}  // namespace luatune

extern "C" int luaopen_prune(lua_State* L) {
  using namespace luatune;
  // sheared: class registration

  lt_new_module(L, prune_funcs);
  return 1;
}
