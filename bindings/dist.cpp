// Lua module `dist`: where this process sits in a data-parallel job and the collectives recipes
// may need (host/dist/dist.h). The trainer, ds:batches, lora.save and model:save already act on
// it; single-process runs see rank 0 of 1 and every call is a no-op. docs/distributed.md.
#include "host/dist/dist.h"
#include "bindings/lua_util.h"
#include "bindings/tensor_class.h"
#include "host/core/error.h"

namespace luatune {

namespace {

// The process's place in the job, as host/dist reports it.
template <int (*get)()>
int l_dist_number(lua_State* L) {
  return lua_pushnumber(L, get()), 1;
}
LT_REGISTER("dist.rank", l_dist_number<dist_rank>);
LT_REGISTER("dist.world_size", l_dist_number<dist_world_size>);
LT_REGISTER("dist.local_rank", l_dist_number<dist_local_rank>);

int l_dist_is_main(lua_State* L) {
  return lua_pushboolean(L, dist_is_main()), 1;
}
LT_REGISTER("dist.is_main", l_dist_is_main);

int l_dist_barrier(lua_State* L) {
  dist_barrier();
  return 0;
}
LT_REGISTER("dist.barrier", l_dist_barrier);

int l_dist_all_reduce(lua_State* L) {
  at::Tensor& t = lt_check<at::Tensor>(L, 1);
  std::string op = luaL_optstring(L, 2, "sum");
  LT_CHECK(op == "sum" || op == "mean",
           "dist.all_reduce: op must be \"sum\" or \"mean\", got \"" << op << "\"");
  dist_all_reduce_sum_(t);
  if (op == "mean" && dist_world_size() > 1) t.div_(dist_world_size());
  lua_pushvalue(L, 1);
  return 1;
}
LT_REGISTER("dist.all_reduce", l_dist_all_reduce);

int l_dist_broadcast(lua_State* L) {
  at::Tensor& t = lt_check<at::Tensor>(L, 1);
  int root = static_cast<int>(luaL_optinteger(L, 2, 0));
  LT_CHECK(root >= 0 && root < dist_world_size(),
           "dist.broadcast: root " << root << " is not a rank (0.." << dist_world_size() - 1 << ")");
  dist_broadcast_(t, root);
  lua_pushvalue(L, 1);
  return 1;
}
LT_REGISTER("dist.broadcast", l_dist_broadcast);

int l_dist_info(lua_State* L) {
  lua_newtable(L);
  lt_set_number(L, "rank", dist_rank());
  lt_set_number(L, "world_size", dist_world_size());
  lt_set_number(L, "local_rank", dist_local_rank());
  lt_set_string(L, "backend", dist_backend());
  lt_set_number(L, "timeout", static_cast<double>(dist_timeout().count()) / 1000.0);
  return 1;
}
LT_REGISTER("dist.info", l_dist_info);

}  // namespace

}  // namespace luatune
