// Lua module `distill`: a frozen teacher's logits (and optionally hidden states) as a training
// signal for a student, as a trainer hook (host/distill/distill.h), and the per-row divergences.
#include <ATen/ATen.h>

#include "bindings/dataset_class.h"
#include "bindings/hook_class.h"
#include "bindings/lua_util.h"
#include "bindings/model_class.h"
#include "bindings/tensor_class.h"
#include "host/core/error.h"
#include "host/distill/distill.h"
#include "host/distill/teacher_cache.h"

namespace luatune {

using DistillerPtr = std::shared_ptr<Distiller>;

LT_CLASS(DistillerPtr, "Distiller");

using CachedDistillerPtr = std::shared_ptr<CachedDistiller>;

LT_CLASS(CachedDistillerPtr, "CachedDistiller");

namespace {

std::string describe_distiller(const DistillerPtr& d) {
  const DistillOptions& o = d->options();
  char buf[160];
  std::snprintf(buf, sizeof(buf), "Distiller(%s, temperature %g, alpha %g, %zu hidden pairs%s)",
                o.loss.c_str(), o.temperature, o.alpha, o.hidden_layers.size(),
                d->teacher_sharded() ? ", teacher sharded" : "");
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
    o.shard_teacher = lt_opt_bool(L, 3, "shard_teacher", o.shard_teacher);
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

int l_distill_teacher_memory(lua_State* L) {
  const DistillerPtr& d = lt_check<DistillerPtr>(L, 1);
  FrozenShardsMemory m = d->teacher_memory();
  lt_push_numbers(L, {{"layer_elements", m.layer_elements},
                      {"full_layer_elements", m.full_layer_elements},
                      {"layer_bytes", m.layer_bytes},
                      {"full_layer_bytes", m.full_layer_bytes}});
  lua_pushboolean(L, d->teacher_sharded());
  lua_setfield(L, -2, "sharded");
  return 1;
}
LT_REGISTER("Distiller:teacher_memory", l_distill_teacher_memory);

// ============================================================================================
// Cached teacher outputs (host/distill/teacher_cache.h, docs/distill.md "Cached teacher")

std::string describe_cached(const CachedDistillerPtr& d) {
  const TeacherCacheInfo& m = d->info();
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "CachedDistiller(forward_kl, temperature %g, alpha %g, k %lld %s, %lld rows)",
                d->options().temperature, d->options().alpha, static_cast<long long>(m.k), m.dtype.c_str(),
                static_cast<long long>(m.rows));
  return buf;
}
LT_REGISTER_HOOK_CLASS("distill", CachedDistillerPtr, describe_cached);

int l_distill_write_cache(lua_State* L) {
  auto teacher = lt_check<std::shared_ptr<Model>>(L, 1);
  auto data = lt_check<std::shared_ptr<Dataset>>(L, 2);
  TeacherCacheOptions o;
  if (lt_check_options(L, 3, lt_api("distill.write_cache"))) {
    o.path = lt_opt_string(L, 3, "path", o.path);
    o.k = lt_opt_int(L, 3, "k", o.k);
    o.dtype = lt_opt_string(L, 3, "dtype", o.dtype);
    o.temperature = lt_opt_number(L, 3, "temperature", o.temperature);
    o.batch_size = lt_opt_int(L, 3, "batch_size", o.batch_size);
    o.chunk = lt_opt_int(L, 3, "chunk", o.chunk);
  }
  TeacherCacheInfo m = teacher_cache_write(*teacher, *data, o);
  lt_push_numbers(L, {{"rows", static_cast<double>(m.rows)},
                      {"entries", static_cast<double>(m.entries)},
                      {"k", static_cast<double>(m.k)},
                      {"bytes", static_cast<double>(m.bytes)}});
  lt_set_string(L, "dtype", m.dtype);
  return 1;
}
LT_REGISTER("distill.write_cache", l_distill_write_cache);

int l_distill_cached(lua_State* L) {
  auto student = lt_check<std::shared_ptr<Model>>(L, 1);
  CachedDistillOptions o;
  if (lt_check_options(L, 2, lt_api("distill.cached"))) {
    o.path = lt_opt_string(L, 2, "path", o.path);
    o.loss = lt_opt_string(L, 2, "loss", o.loss);
    o.temperature = lt_opt_number(L, 2, "temperature", o.temperature);
    o.alpha = lt_opt_number(L, 2, "alpha", o.alpha);
    o.chunk = lt_opt_int(L, 2, "chunk", o.chunk);
  }
  lt_push<CachedDistillerPtr>(L, std::make_shared<CachedDistiller>(student, o));
  return 1;
}
LT_REGISTER("distill.cached", l_distill_cached);

}  // namespace

}  // namespace luatune
