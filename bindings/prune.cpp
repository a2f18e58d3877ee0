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

using ShearedPtr = std::shared_ptr<ShearedPruner>;

}  // namespace

template <>
struct LuaClass<ShearedPtr> {
  static constexpr const char* name = "ShearedPruner";
};

namespace {

std::string describe_sheared(const ShearedPtr& p) {
  return "ShearedPruner(target " + shape_string(p->target().shape) + ", step " + std::to_string(p->steps()) +
         ")";
}

std::shared_ptr<TrainerHook> sheared_hook(lua_State* L, int idx) {
  ShearedPtr* p = lt_test<ShearedPtr>(L, idx);
  return p ? *p : nullptr;
}

// A shape as {layers=, heads=, kv_heads=, head_dim=, hidden=, intermediate=} (+ whole_groups).
void push_shape(lua_State* L, const ModelShape& s) {
  lua_createtable(L, 0, 7);
  lt_set_number(L, "layers", static_cast<double>(s.layers));
  lt_set_number(L, "heads", static_cast<double>(s.heads));
  lt_set_number(L, "kv_heads", static_cast<double>(s.kv_heads));
  lt_set_number(L, "head_dim", static_cast<double>(s.head_dim));
  lt_set_number(L, "hidden", static_cast<double>(s.hidden));
  lt_set_number(L, "intermediate", static_cast<double>(s.intermediate));
}

// prune.sheared(model, {layers=0, heads=0, hidden=0, intermediate=0, round_to=1, warmup_steps=0,
//   mask_lr=1, lambda_lr=1, init_mean=5, init_std=0.01, temperature=2/3, seed=0}) -> ShearedPruner
int l_prune_sheared(lua_State* L) {
  auto& model = lt_check<std::shared_ptr<Model>>(L, 1);
  luaL_checktype(L, 2, LUA_TTABLE);
  lt_check_options(L, 2,
                   {"layers", "heads", "hidden", "intermediate", "round_to", "warmup_steps", "mask_lr",
                    "lambda_lr", "init_mean", "init_std", "temperature", "seed"});
  ShearedOptions o;
  o.target.layers = lt_opt_number(L, 2, "layers", 0);
  o.target.heads = lt_opt_number(L, 2, "heads", 0);
  o.target.hidden = lt_opt_number(L, 2, "hidden", 0);
  o.target.intermediate = lt_opt_number(L, 2, "intermediate", 0);
  auto whole = [&](const char* key, double def) {
    double v = lt_opt_number(L, 2, key, def);
    LT_CHECK(v >= 0 && v == static_cast<double>(static_cast<int64_t>(v)),
             "prune.sheared: " << key << " must be a whole number >= 0, got " << v);
    return static_cast<int64_t>(v);
  };
  o.target.round_to = whole("round_to", 1);
  LT_CHECK(o.target.round_to >= 1, "prune.sheared: round_to must be at least 1");
  o.warmup_steps = whole("warmup_steps", 0);
  o.seed = static_cast<uint64_t>(whole("seed", 0));
  o.mask_lr = lt_opt_number(L, 2, "mask_lr", o.mask_lr);
  o.lambda_lr = lt_opt_number(L, 2, "lambda_lr", o.lambda_lr);
  o.init_mean = lt_opt_number(L, 2, "init_mean", o.init_mean);
  o.init_std = lt_opt_number(L, 2, "init_std", o.init_std);
  o.temperature = lt_opt_number(L, 2, "temperature", o.temperature);
  lt_push<ShearedPtr>(L, std::make_shared<ShearedPruner>(model, o));
  return 1;
}

// pruner:target() -> {layers=, heads=, kv_heads=, head_dim=, hidden=, intermediate=, whole_groups=}
int l_sheared_target(lua_State* L) {
  const TargetShape& t = lt_check<ShearedPtr>(L, 1)->target();
  push_shape(L, t.shape);
  lua_pushboolean(L, t.whole_groups);
  lua_setfield(L, -2, "whole_groups");
  return 1;
}

// pruner:expected_sparsity() -> {layers=, heads=, hidden=, intermediate=} (0 for kinds without a mask)
int l_sheared_expected_sparsity(lua_State* L) {
  ShearedPruner& p = *lt_check<ShearedPtr>(L, 1);
  lua_createtable(L, 0, 4);
  for (const char* kind : {"layers", "heads", "hidden", "intermediate"})
    lt_set_number(L, kind, p.expected_sparsity(kind));
  return 1;
}

// pruner:masks() -> {layers=Tensor(L), heads=Tensor(L, H), intermediate=Tensor(L, I), hidden=Tensor(C)}:
// the deterministic masks of the kinds that have one.
int l_sheared_masks(lua_State* L) {
  StructureMasks m = lt_check<ShearedPtr>(L, 1)->deterministic_masks();
  lua_createtable(L, 0, 4);
  const std::pair<const char*, at::Tensor*> fields[] = {
      {"layers", &m.layer}, {"heads", &m.head}, {"intermediate", &m.intermediate}, {"hidden", &m.hidden}};
  for (const auto& [key, t] : fields) {
    if (!t->defined()) continue;
    lt_push<at::Tensor>(L, *t);
    lua_setfield(L, -2, key);
  }
  return 1;
}

// pruner:finalize() -> the new shape (keys of target()); the model is pruned in place.
int l_sheared_finalize(lua_State* L) {
  ShearedPruner& p = *lt_check<ShearedPtr>(L, 1);
  bool whole_groups = p.target().whole_groups;
  push_shape(L, p.finalize());
  lua_pushboolean(L, whole_groups);
  lua_setfield(L, -2, "whole_groups");
  return 1;
}

const luaL_Reg sheared_methods[] = {{"target", l_sheared_target},
                                    {"expected_sparsity", l_sheared_expected_sparsity},
                                    {"masks", l_sheared_masks},
                                    {"finalize", l_sheared_finalize},
                                    {nullptr, nullptr}};

// ==== end sheared ============================================================================

// ==== importance =============================================================================

// ==== end importance =========================================================================

// ==== unstructured ===========================================================================

// ==== end unstructured =======================================================================

const luaL_Reg prune_funcs[] = {
    // surgery and targets entries

    // sheared entries
    {"sheared", l_prune_sheared},

    // importance entries

    // unstructured entries

    {nullptr, nullptr}};

}  // namespace

}  // namespace luatune

extern "C" int luaopen_prune(lua_State* L) {
  using namespace luatune;
  // sheared: class registration
  lt_register_class<ShearedPtr, describe_sheared>(L, sheared_methods);
  lua_pop(L, 1);
  lt_register_hook_getter(sheared_hook);

  lt_new_module(L, prune_funcs);
  return 1;
}
