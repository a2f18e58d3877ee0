// Lua module `distill`: a frozen teacher's logits (and optionally hidden states) as a training
// signal for a student, as a trainer hook (host/distill/distill.h), and the per-row divergences.
#include <ATen/ATen.h>

#include "bindings/hook_class.h"
#include "bindings/lua_util.h"
#include "bindings/model_class.h"
#include "bindings/modules.h"
#include "bindings/tensor_class.h"
#include "host/core/error.h"
#include "host/distill/distill.h"

namespace luatune {

using DistillerPtr = std::shared_ptr<Distiller>;

template <>
struct LuaClass<DistillerPtr> {
  static constexpr const char* name = "Distiller";
};

namespace {

std::string describe_distiller(const DistillerPtr& d) {
  const DistillOptions& o = d->options();
  char buf[160];
  std::snprintf(buf, sizeof(buf), "Distiller(%s, temperature %g, alpha %g, %zu hidden pairs)", o.loss.c_str(),
                o.temperature, o.alpha, o.hidden_layers.size());
  return buf;
}

std::shared_ptr<TrainerHook> distiller_hook(lua_State* L, int idx) {
  DistillerPtr* d = lt_test<DistillerPtr>(L, idx);
  return d ? *d : nullptr;
}

// The loss options shared by distill.new and distill.divergence, from the table at idx.
void read_loss_options(lua_State* L, int idx, DistillOptions& o) {
  o.loss = lt_opt_string(L, idx, "loss", o.loss);
  o.temperature = lt_opt_number(L, idx, "temperature", o.temperature);
  o.beta = lt_opt_number(L, idx, "beta", o.beta);
}

// Details: docs/distill.md.
const LtFunc kDistillNew{
    "distill",
    "new",
    "teacher: Model, student: Model, opts?: Opts",
    "Distiller # a hook for train.new(student, ...)",
    "each micro-batch's loss becomes (1 - alpha) LM + alpha T^2 KD (+ hidden_weight * hidden); the teacher "
    "is "
    "frozen and runs without autograd",
    {{"loss", "string", "\"forward_kl\"", "\"forward_kl\" KL(t||s), \"reverse_kl\" KL(s||t) or \"jsd\""},
     {"temperature", "number", "1", "T: both distributions are softened by it"},
     {"alpha", "number", "0.5", "the KD term's weight"},
     {"beta", "number", "0.5", "jsd's mixture weight on the teacher"},
     {"chunk", "integer", "1024", "rows of logits that exist at once"},
     {"hidden_layers", "integer[][]", "",
      "{{student_layer, teacher_layer}, ...} (0-based) hidden states to match"},
     {"hidden_loss", "string", "\"cosine\"", "the hidden-state loss"},
     {"hidden_weight", "number", "1", "the hidden term's weight"},
     {"seed", "integer", "0", "seed of the projections between widths"}}};
int l_distill_new(lua_State* L) {
  auto teacher = lt_check<std::shared_ptr<Model>>(L, 1);
  auto student = lt_check<std::shared_ptr<Model>>(L, 2);
  DistillOptions o;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lt_check_options(L, 3, kDistillNew);
    read_loss_options(L, 3, o);
    o.alpha = lt_opt_number(L, 3, "alpha", o.alpha);
    o.chunk = lt_opt_int(L, 3, "chunk", o.chunk);
    o.hidden_loss = lt_opt_string(L, 3, "hidden_loss", o.hidden_loss);
    o.hidden_weight = lt_opt_number(L, 3, "hidden_weight", o.hidden_weight);
    o.seed = static_cast<uint64_t>(lt_opt_int(L, 3, "seed", 0, 0));
    lua_getfield(L, 3, "hidden_layers");
    if (!lua_isnil(L, -1)) {
      const int list = lua_gettop(L);
      LT_CHECK(lt_is_list(L, list),
               "distill.new: hidden_layers must be a list of {student_layer, teacher_layer}");
      for (size_t i = 1; i <= lua_objlen(L, list); i++) {
        lua_rawgeti(L, list, static_cast<int>(i));
        LT_CHECK(lua_istable(L, -1) && lua_objlen(L, -1) == 2,
                 "distill.new: hidden_layers[" << i << "] must be a pair {student_layer, teacher_layer}");
        lua_rawgeti(L, -1, 1);
        lua_rawgeti(L, -2, 2);
        const int top = lua_gettop(L);
        o.hidden_layers.emplace_back(lt_check_int(L, top - 1), lt_check_int(L, top));
        lua_pop(L, 3);
      }
    }
    lua_pop(L, 1);
  }
  lt_push<DistillerPtr>(L, std::make_shared<Distiller>(teacher, student, o));
  return 1;
}

// No T^2 factor (docs/distill.md).
const LtFunc kDistillDivergence{
    "distill",
    "divergence",
    "student_logits: Tensor, teacher_logits: Tensor, opts?: Opts",
    "Tensor # one value per row",
    "the per-row divergence",
    {{"loss", "string", "\"forward_kl\"", "\"forward_kl\", \"reverse_kl\" or \"jsd\""},
     {"temperature", "number", "1", "T"},
     {"beta", "number", "0.5", "jsd's mixture weight on the teacher"}}};
int l_distill_divergence(lua_State* L) {
  const at::Tensor& s = lt_check<at::Tensor>(L, 1);
  const at::Tensor& t = lt_check<at::Tensor>(L, 2);
  DistillOptions o;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    lt_check_options(L, 3, kDistillDivergence);
    read_loss_options(L, 3, o);
  }
  lt_push<at::Tensor>(L, distill_divergence(s, t, o));
  return 1;
}

const LtFunc kDistillerTeacher{"Distiller", "teacher", "", "Model", "the teacher model"};
int l_distill_teacher(lua_State* L) {
  lt_push<std::shared_ptr<Model>>(L, lt_check<DistillerPtr>(L, 1)->teacher());
  return 1;
}

const luaL_Reg distiller_methods[] = {{"teacher", l_distill_teacher}, {nullptr, nullptr}};
const luaL_Reg distill_funcs[] = {
    {"new", l_distill_new}, {"divergence", l_distill_divergence}, {nullptr, nullptr}};

}  // namespace

LtModuleApi lt_api_distill() {
  return {"distill",
          "knowledge distillation from a frozen teacher, as a trainer hook",
          {kDistillNew, kDistillDivergence, kDistillerTeacher},
          {{"Distiller", "a distillation hook for train.new"}}};
}

}  // namespace luatune

extern "C" int luaopen_distill(lua_State* L) {
  using namespace luatune;
  lt_register_class<DistillerPtr, describe_distiller>(L, distiller_methods);
  lua_pop(L, 1);
  lt_register_hook_getter(distiller_hook);
  lt_new_module(L, distill_funcs);
  return 1;
}
