// Lua module `distill`: a frozen teacher's logits (and optionally hidden states) as a training
// signal for a student, as a trainer hook (host/distill/distill.h), and the per-row divergences.
#include <ATen/ATen.h>

#include "bindings/hook_class.h"
#include "bindings/lua_util.h"
#include "bindings/model_class.h"
#include "bindings/tensor_class.h"
#include "host/core/error.h"
#include "host/distill/distill.h"

namespace luatune {

using DistillerPtr = std::shared_ptr<Distiller>;

LT_CLASS(DistillerPtr, "Distiller");

namespace {

std::string describe_distiller(const DistillerPtr& d) {
  const DistillOptions& o = d->options();
  char buf[160];
  std::snprintf(buf, sizeof(buf), "Distiller(%s, temperature %g, alpha %g, %zu hidden pairs)", o.loss.c_str(),
                o.temperature, o.alpha, o.hidden_layers.size());
  return buf;
}
LT_REGISTER_HOOK_CLASS("distill", DistillerPtr, describe_distiller);

// The loss options shared by distill.new and distill.divergence, from the table at idx.
void read_loss_options(lua_State* L, int idx, DistillOptions& o) {
  o.loss = lt_opt_string(L, idx, "loss", o.loss);
  o.temperature = lt_opt_number(L, idx, "temperature", o.temperature);
  o.beta = lt_opt_number(L, idx, "beta", o.beta);
}

// Details: docs/distill.md.
int l_distill_new(lua_State* L) {
  auto teacher = lt_check<std::shared_ptr<Model>>(L, 1);
  auto student = lt_check<std::shared_ptr<Model>>(L, 2);
  DistillOptions o;
  if (lt_check_options(L, 3, lt_api("distill.new"))) {
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
LT_REGISTER("distill.new", l_distill_new);

// No T^2 factor (docs/distill.md).
int l_distill_divergence(lua_State* L) {
  const at::Tensor& s = lt_check<at::Tensor>(L, 1);
  const at::Tensor& t = lt_check<at::Tensor>(L, 2);
  DistillOptions o;
  if (lt_check_options(L, 3, lt_api("distill.divergence"))) {
    read_loss_options(L, 3, o);
  }
  lt_push<at::Tensor>(L, distill_divergence(s, t, o));
  return 1;
}
LT_REGISTER("distill.divergence", l_distill_divergence);

int l_distill_teacher(lua_State* L) {
  lt_push<std::shared_ptr<Model>>(L, lt_check<DistillerPtr>(L, 1)->teacher());
  return 1;
}
LT_REGISTER("Distiller:teacher", l_distill_teacher);

}  // namespace

}  // namespace luatune
