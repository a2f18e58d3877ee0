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

void push_shape(lua_State* L, const ModelShape& s) {
  lt_push_numbers(L, {{"layers", s.layers},
                      {"heads", s.heads},
                      {"kv_heads", s.kv_heads},
                      {"head_dim", s.head_dim},
                      {"hidden", s.hidden},
                      {"intermediate", s.intermediate}});
}

void push_target(lua_State* L, const TargetShape& t) {
  push_shape(L, t.shape);
  lt_set_bool(L, "whole_groups", t.whole_groups);
}

// A Lua list of whole numbers at idx -> vector (what names the option in errors).
std::vector<int64_t> int_list(lua_State* L, int idx, const std::string& what) {
  LT_CHECK(lt_is_list(L, idx), "prune: " << what << " must be a list of 0-based numbers");
  std::vector<int64_t> out;
  for (size_t i = 1; i <= lua_objlen(L, idx); i++) {
    lua_rawgeti(L, idx, static_cast<int>(i));
    LT_CHECK(lua_type(L, -1) == LUA_TNUMBER, "prune: " << what << "[" << i << "] must be a number");
    double v = lua_tonumber(L, -1);
    LT_CHECK(v == static_cast<double>(static_cast<int64_t>(v)),
             "prune: " << what << "[" << i << "] must be whole");
    out.push_back(static_cast<int64_t>(v));
    lua_pop(L, 1);
  }
  return out;
}

// Per-layer lists: either one flat list for every layer or a list of L lists (entry k = layer k-1).
std::vector<std::vector<int64_t>> per_layer(lua_State* L, int idx, int64_t layers, const std::string& what) {
  LT_CHECK(lt_is_list(L, idx),
           "prune: " << what << " must be a list (one list for every layer, or a list per layer)");
  lua_rawgeti(L, idx, 1);
  bool nested = lua_istable(L, -1);
  lua_pop(L, 1);
  if (!nested) return std::vector<std::vector<int64_t>>(layers, int_list(L, idx, what));
  std::vector<std::vector<int64_t>> out;
  for (size_t i = 1; i <= lua_objlen(L, idx); i++) {
    lua_rawgeti(L, idx, static_cast<int>(i));
    out.push_back(int_list(L, lua_gettop(L), what + "[" + std::to_string(i) + "]"));
    lua_pop(L, 1);
  }
  return out;
}

TargetSparsity read_sparsity(lua_State* L, int idx) {
  TargetSparsity t;
  t.layers = lt_opt_number(L, idx, "layers", 0);
  t.heads = lt_opt_number(L, idx, "heads", 0);
  t.hidden = lt_opt_number(L, idx, "hidden", 0);
  t.intermediate = lt_opt_number(L, idx, "intermediate", 0);
  t.round_to = lt_opt_int(L, idx, "round_to", 1);
  return t;
}

int l_prune_shape(lua_State* L) {
  push_shape(L, model_shape(lt_check_model(L, 1).config));
  return 1;
}
LT_REGISTER("prune.shape", l_prune_shape);

// Rounding and the GQA rule: docs/pruning.md.
int l_prune_targets(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  lt_check_required_options(L, 2, lt_api("prune.targets"));
  push_target(L, prune_targets(m.config, read_sparsity(L, 2)));
  return 1;
}
LT_REGISTER("prune.targets", l_prune_targets);

int l_prune_apply(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  lt_check_required_options(L, 2, lt_api("prune.apply"));
  PruneSpec spec;
  const int64_t layers = m.config.num_layers;
  lua_getfield(L, 2, "layers");
  if (!lua_isnil(L, -1)) spec.layers = int_list(L, lua_gettop(L), "layers");
  lua_pop(L, 1);
  lua_getfield(L, 2, "hidden");
  if (!lua_isnil(L, -1)) spec.hidden = int_list(L, lua_gettop(L), "hidden");
  lua_pop(L, 1);
  lua_getfield(L, 2, "heads");
  if (!lua_isnil(L, -1)) spec.heads = per_layer(L, lua_gettop(L), layers, "heads");
  lua_pop(L, 1);
  lua_getfield(L, 2, "intermediate");
  if (!lua_isnil(L, -1)) spec.intermediate = per_layer(L, lua_gettop(L), layers, "intermediate");
  lua_pop(L, 1);
  push_shape(L, prune_apply(m, spec));
  return 1;
}
LT_REGISTER("prune.apply", l_prune_apply);

// ==== end surgery and targets ================================================================

// ==== sheared ================================================================================

using ShearedPtr = std::shared_ptr<ShearedPruner>;

}  // namespace

LT_CLASS(ShearedPtr, "ShearedPruner");

namespace {

std::string describe_sheared(const ShearedPtr& p) {
  return "ShearedPruner(target " + shape_string(p->target().shape) + ", step " + std::to_string(p->steps()) +
         ")";
}
LT_REGISTER_HOOK_CLASS("prune", ShearedPtr, describe_sheared);

// push_shape and push_target (the surgery section above) give shapes to Lua.

int l_prune_sheared(lua_State* L) {
  auto& model = lt_check<std::shared_ptr<Model>>(L, 1);
  lt_check_required_options(L, 2, lt_api("prune.sheared"));
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
LT_REGISTER("prune.sheared", l_prune_sheared);

int l_sheared_target(lua_State* L) {
  push_target(L, lt_check<ShearedPtr>(L, 1)->target());
  return 1;
}
LT_REGISTER("ShearedPruner:target", l_sheared_target);

int l_sheared_expected_sparsity(lua_State* L) {
  ShearedPruner& p = *lt_check<ShearedPtr>(L, 1);
  lua_createtable(L, 0, 4);
  for (const char* kind : {"layers", "heads", "hidden", "intermediate"})
    lt_set_number(L, kind, p.expected_sparsity(kind));
  return 1;
}
LT_REGISTER("ShearedPruner:expected_sparsity", l_sheared_expected_sparsity);

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
LT_REGISTER("ShearedPruner:masks", l_sheared_masks);

int l_sheared_finalize(lua_State* L) {
  ShearedPruner& p = *lt_check<ShearedPtr>(L, 1);
  TargetShape shape = p.target();
  shape.shape = p.finalize();
  push_target(L, shape);
  return 1;
}
LT_REGISTER("ShearedPruner:finalize", l_sheared_finalize);

// ==== end sheared ============================================================================

// ==== importance =============================================================================
// prune.importance scores structures; prune.minitron, prune.taylor and prune.depth score, select
// (prune_select) and cut (prune_apply) in one call. Calibration: a Lua list of Batch. Uses
// lt_check_model, push_shape and read_sparsity from the surgery section.

std::vector<Batch> importance_calibration(lua_State* L, int idx) {
  std::string what = std::string("prune.") + lt_fname(L) + ": calibration";
  if (!lua_istable(L, idx) || !lt_is_list(L, idx))
    luaL_argerror(L, idx, "a list of Batch expected (from ds:batches or train.batch)");
  std::vector<Batch> out;
  size_t n = lua_objlen(L, idx);
  for (size_t i = 1; i <= n; i++) {
    lua_rawgeti(L, idx, static_cast<int>(i));
    Batch* b = lt_test<Batch>(L, -1);
    LT_CHECK(b, what << " entry " << i << " is not a Batch (from ds:batches or train.batch)");
    out.push_back(*b);
    lua_pop(L, 1);
  }
  return out;
}

void importance_push_scores(lua_State* L, const StructureScores& s) {
  lua_createtable(L, 0, 4);
  for (auto [key, t] : {std::pair<const char*, const at::Tensor*>{"layer", &s.layer},
                        {"head", &s.head},
                        {"intermediate", &s.intermediate},
                        {"hidden", &s.hidden}}) {
    if (!t->defined()) continue;
    lt_push<at::Tensor>(L, *t);
    lua_setfield(L, -2, key);
  }
}

// The width and depth targets of prune.minitron / prune.taylor: shape={layers=, heads=, kv_heads=,
// hidden=, intermediate=} (kept counts, missing = unchanged) or sparsities layers=, heads=,
// hidden=, intermediate= in [0, 1) with round_to; not both.
TargetShape importance_targets(lua_State* L, int idx, const ModelConfig& c, bool allow_counts) {
  const char* kinds[] = {"layers", "heads", "hidden", "intermediate"};
  bool sparsities = lt_has_field(L, idx, "round_to");
  for (const char* k : kinds) sparsities = sparsities || lt_has_field(L, idx, k);
  if (allow_counts && lt_has_field(L, idx, "shape")) {
    LT_CHECK(!sparsities, "prune." << lt_fname(L) << ": give either shape (kept counts) or sparsities "
                                   << "(layers=, heads=, hidden=, intermediate=, round_to=), not both");
    lua_getfield(L, idx, "shape");
    if (!lua_istable(L, -1)) luaL_argerror(L, idx, "option 'shape' must be a table of kept counts");
    lt_check_options(L, lua_gettop(L), lt_api_table("PruneShapeOpts"));
    ModelShape want = model_shape(c);
    int top = lua_gettop(L);
    for (auto [key, field] : {std::pair<const char*, int64_t*>{"layers", &want.layers},
                              {"heads", &want.heads},
                              {"kv_heads", &want.kv_heads},
                              {"hidden", &want.hidden},
                              {"intermediate", &want.intermediate}}) {
      double v = lt_opt_number(L, top, key, static_cast<double>(*field));
      LT_CHECK(v >= 1 && v == static_cast<double>(static_cast<int64_t>(v)),
               "prune." << lt_fname(L) << ": shape." << key << " must be a positive whole number, got " << v);
      *field = static_cast<int64_t>(v);
    }
    // Only kv_heads given: whole groups go, each keeping its query heads.
    if (!lt_has_field(L, top, "heads") && c.num_kv_heads > 0)
      want.heads = want.kv_heads * (c.num_heads / c.num_kv_heads);
    lua_pop(L, 1);
    return prune_targets_counts(c, want);
  }
  return prune_targets(c, read_sparsity(L, idx));
}

std::string importance_depth_metric(lua_State* L, int idx, const char* key) {
  std::string metric = lt_opt_string(L, idx, key, "block_influence");
  LT_CHECK(metric == "block_influence" || metric == "layer_removal",
           "prune." << lt_fname(L) << ": " << key
                    << " must be \"block_influence\" or \"layer_removal\", got \"" << metric << "\"");
  return metric;
}

// Selects by `scores`, cuts, and returns {before=shape, after=shape}.
int importance_cut(lua_State* L, Model& m, const StructureScores& scores, const TargetShape& target) {
  ModelShape before = model_shape(m.config);
  PruneSpec spec = prune_select(m.config, scores, target);
  ModelShape after = prune_apply(m, spec);
  lua_createtable(L, 0, 2);
  push_shape(L, before);
  lua_setfield(L, -2, "before");
  push_shape(L, after);
  lua_setfield(L, -2, "after");
  return 1;
}

int l_prune_importance(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  std::vector<Batch> calib = importance_calibration(L, 2);
  lt_check_options(L, 3, lt_api("prune.importance"));
  std::string method = lt_opt_string(L, 3, "method", "activation");
  std::string variant = lt_opt_string(L, 3, "variant", "param_first");
  LT_CHECK(method == "taylor" || !lt_has_field(L, 3, "variant"),
           "prune.importance: option variant applies to method=\"taylor\" only");
  StructureScores s;
  if (method == "activation")
    s = activation_importance(m, calib);
  else if (method == "taylor")
    s = taylor_importance(m, calib, variant);
  else if (method == "block_influence")
    s.layer = block_influence(m, calib);
  else if (method == "layer_removal")
    s.layer = layer_removal_loss(m, calib);
  else
    fail("prune.importance: unknown method \"" + method +
         "\" (expected activation, taylor, block_influence or layer_removal)");
  importance_push_scores(L, s);
  return 1;
}
LT_REGISTER("prune.importance", l_prune_importance);

// Width by activation importance, depth by block influence (or layer-removal loss), all scored on
// the unpruned model, cut together.
int l_prune_minitron(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  std::vector<Batch> calib = importance_calibration(L, 2);
  lt_check_required_options(L, 3, lt_api("prune.minitron"));
  std::string metric = importance_depth_metric(L, 3, "depth_metric");
  TargetShape target = importance_targets(L, 3, m.config, true);
  StructureScores s = activation_importance(m, calib);
  if (metric == "layer_removal" && target.shape.layers < m.config.num_layers)
    s.layer = layer_removal_loss(m, calib);
  return importance_cut(L, m, s, target);
}
LT_REGISTER("prune.minitron", l_prune_minitron);

int l_prune_taylor(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  std::vector<Batch> calib = importance_calibration(L, 2);
  lt_check_required_options(L, 3, lt_api("prune.taylor"));
  std::string variant = lt_opt_string(L, 3, "variant", "param_first");
  TargetShape target = importance_targets(L, 3, m.config, false);
  return importance_cut(L, m, taylor_importance(m, calib, variant), target);
}
LT_REGISTER("prune.taylor", l_prune_taylor);

int l_prune_depth(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  std::vector<Batch> calib = importance_calibration(L, 2);
  lt_check_required_options(L, 3, lt_api("prune.depth"));
  if (!lt_has_field(L, 3, "layers"))
    luaL_argerror(L, 3, "option 'layers' (how many layers to remove, or a fraction) is required");
  std::string metric = importance_depth_metric(L, 3, "metric");
  const int64_t L0 = m.config.num_layers;
  double v = lt_opt_number(L, 3, "layers", 0);
  int64_t remove = 0;
  if (v > 0 && v < 1) {
    TargetSparsity t;
    t.layers = v;
    remove = L0 - prune_targets(m.config, t).shape.layers;
  } else {
    LT_CHECK(
        v >= 0 && v == static_cast<double>(static_cast<int64_t>(v)),
        "prune.depth: layers must be a whole number of layers to remove or a fraction in (0, 1), got " << v);
    remove = static_cast<int64_t>(v);
  }
  LT_CHECK(remove < L0,
           "prune.depth: cannot remove " << remove << " of " << L0 << " layers; at least one must stay");
  StructureScores s;
  s.layer = metric == "layer_removal" ? layer_removal_loss(m, calib) : block_influence(m, calib);
  ModelShape want = model_shape(m.config);
  want.layers = L0 - remove;
  PruneSpec spec = prune_select(m.config, s, prune_targets_counts(m.config, want));
  std::vector<int64_t> removed;
  for (int64_t l = 0, k = 0; l < L0; l++) {
    if (k < static_cast<int64_t>(spec.layers.size()) && spec.layers[k] == l)
      k++;
    else
      removed.push_back(l);
  }
  if (spec.layers.empty()) removed.clear();  // empty = every layer kept
  ModelShape after = prune_apply(m, spec);
  lua_createtable(L, 0, 3);
  lt_set_list(L, "removed", removed);
  lt_push<at::Tensor>(L, s.layer);
  lua_setfield(L, -2, "scores");
  push_shape(L, after);
  lua_setfield(L, -2, "after");
  return 1;
}
LT_REGISTER("prune.depth", l_prune_depth);

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
    lt_set_string(L, "name", r[i].name);
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
              s.find_first_not_of("0123456789:") == std::string::npos &&
              s.find(':', colon + 1) == std::string::npos;
  LT_CHECK(good, "prune.unstructured: pattern must look like \"2:4\" (n zeros in every m inputs), got \""
                     << s << "\"");
  o.n = std::stoll(s.substr(0, colon));
  o.m = std::stoll(s.substr(colon + 1));
  LT_CHECK(o.m > 0 && o.n > 0 && o.n < o.m,
           "prune.unstructured: pattern " << s << " needs 0 < n < m (2:4, 4:8)");
}

int l_prune_unstructured(lua_State* L) {
  Model& m = lt_check_model(L, 1);
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
  if (lt_check_options(L, 3, lt_api("prune.unstructured"))) {
    o.method = lt_opt_string(L, 3, "method", o.method);
    LT_CHECK(!(lt_has_field(L, 3, "sparsity") && lt_has_field(L, 3, "pattern")),
             "prune.unstructured: give sparsity or pattern, not both");
    o.sparsity = lt_opt_number(L, 3, "sparsity", o.sparsity);
    if (lt_has_field(L, 3, "pattern")) parse_pattern(lt_opt_string(L, 3, "pattern", ""), o);
    double bs = lt_opt_number(L, 3, "blocksize", static_cast<double>(o.blocksize));
    LT_CHECK(bs >= 1 && bs == std::floor(bs),
             "prune.unstructured: blocksize must be a positive integer, got " << bs);
    o.blocksize = static_cast<int64_t>(bs);
    o.dampening = lt_opt_number(L, 3, "dampening", o.dampening);
    lt_opt_strings(L, 3, "targets", "prune.unstructured", &o.targets);
  }
  push_sparsity_report(L, prune_unstructured(m, calibration, o));
  return 1;
}
LT_REGISTER("prune.unstructured", l_prune_unstructured);

int l_prune_sparsity(lua_State* L) {
  push_sparsity_report(L, measure_sparsity(lt_check_model(L, 1)));
  return 1;
}
LT_REGISTER("prune.sparsity", l_prune_sparsity);

// ==== end unstructured =======================================================================

}  // namespace

}  // namespace luatune
