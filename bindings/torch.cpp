// Lua module `torch`: tensors as userdata, enough to write a custom metric or loss in a recipe.
// Every tensor method is also a module function: torch.exp(t) is t:exp(); creation, cat/stack,
// where, losses, save/load and seeds are module functions only, as in PyTorch. Indexing follows the rule in
// host/core/tensor_ops.h (PyTorch's: 0-based, negative from the end, half-open slices); Lua
// tables we return (shape, tolist) are ordinary 1-based lists. Numbers from Lua make float32
// tensors unless a dtype is given (Lua has one number type). Operators: + - * / % ^ and unary -
// are elementwise; == is torch.equal; < and <= compare one-element tensors; use :lt() etc. for
// elementwise comparisons and :matmul() for matrix products. Each function registers under its
// method name ("Tensor:exp", copied into the module when it opens) or, when it is a module function
// only, under "torch.tensor"; the op families (unary, binary, sizes) are tables of their own.
#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>
#include <ATen/core/grad_mode.h>

#include <cctype>
#include <cmath>
#include <functional>
#include <sstream>
#include <type_traits>

#include "bindings/lua_util.h"
#include "bindings/tensor_class.h"
#include "host/core/device.h"
#include "host/core/error.h"
#include "host/core/number.h"
#include "host/core/tensor_ops.h"
#include "host/io/tensor_file.h"

namespace luatune {

namespace {

// ============================================================================================
// Conversions

at::Tensor& check_tensor(lua_State* L, int idx) {
  return lt_check<at::Tensor>(L, idx);
}

int push_tensor(lua_State* L, at::Tensor t) {
  lt_push<at::Tensor>(L, std::move(t));
  return 1;
}

int push_tensor_list(lua_State* L, const std::vector<at::Tensor>& ts) {
  lua_createtable(L, static_cast<int>(ts.size()), 0);
  for (size_t i = 0; i < ts.size(); i++) {
    push_tensor(L, ts[i]);
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
  return 1;
}

// A Lua number keeps integer tensors integer when it is whole, as a Python int would.
at::Scalar check_scalar(lua_State* L, int idx) {
  if (lua_type(L, idx) == LUA_TBOOLEAN) return at::Scalar(static_cast<bool>(lua_toboolean(L, idx)));
  double v = luaL_checknumber(L, idx);
  return number_is_whole(v) ? at::Scalar(static_cast<int64_t>(v)) : at::Scalar(v);
}

// A tensor, or a number/boolean as a wrapped-number 0-dim tensor.
at::Tensor operand(lua_State* L, int idx) {
  if (at::Tensor* t = lt_test<at::Tensor>(L, idx)) return *t;
  at::Tensor s;
  if (lua_type(L, idx) == LUA_TBOOLEAN) {
    s = at::scalar_tensor(static_cast<bool>(lua_toboolean(L, idx)), at::kBool);
  } else if (lua_type(L, idx) == LUA_TNUMBER) {
    double v = lua_tonumber(L, idx);
    s = number_is_whole(v) ? at::scalar_tensor(static_cast<int64_t>(v), at::kLong)
                           : at::scalar_tensor(v, at::kDouble);
  } else {
    check_tensor(L, idx);  // raises "Tensor expected, got ..." (or "released")
  }
  // Marked as a wrapped number (a CPU 0-dim tensor, usable with tensors on any device), it
  // promotes as a Python scalar does: int64 tensor * 0.5 is float32, not float64.
  s.unsafeGetTensorImpl()->set_wrapped_number(true);
  return s;
}

// Sizes or dims from the arguments at idx: one list {2, 3} or numbers 2, 3. *next is the first
// argument after them.
std::vector<int64_t> int_list_args(lua_State* L, int idx, int* next) {
  std::vector<int64_t> out;
  if (lua_istable(L, idx) && lt_is_list(L, idx)) {
    for (size_t i = 1; i <= lua_objlen(L, idx); i++) {
      lua_rawgeti(L, idx, static_cast<int>(i));
      double v = lua_tonumber(L, -1);
      if (lua_type(L, -1) != LUA_TNUMBER || !number_is_whole(v))
        luaL_argerror(L, idx, "list of integers expected");
      out.push_back(static_cast<int64_t>(v));
      lua_pop(L, 1);
    }
    *next = idx + 1;
    return out;
  }
  while (lua_type(L, idx) == LUA_TNUMBER) out.push_back(lt_check_int(L, idx++));
  *next = idx;
  return out;
}

// The options every creation function takes (CreationOpts), checked and read.
at::TensorOptions creation_options(lua_State* L, int idx, c10::ScalarType default_dtype) {
  lt_check_options(L, idx, lt_api_table("CreationOpts"));
  at::TensorOptions o = at::TensorOptions().dtype(default_dtype);
  if (lt_has_field(L, idx, "dtype")) o = o.dtype(dtype_parse(lt_opt_string(L, idx, "dtype", "")));
  o = o.device(device_parse(lt_opt_string(L, idx, "device", "cpu")));
  return o;
}

// Pushes a freshly created tensor, applying the options' requires_grad (ATen's factories ignore it).
int push_created(lua_State* L, at::Tensor t, int options_idx) {
  if (lt_opt_bool(L, options_idx, "requires_grad", false)) t.requires_grad_(true);
  return push_tensor(L, std::move(t));
}

// One index item from the Lua value at idx: an integer, a text item ("1:3", ":", "...", "none") or a
// tensor; false when it is none of those.
bool index_item(lua_State* L, int idx, IndexItem* out) {
  if (lua_type(L, idx) == LUA_TNUMBER) return *out = IndexItem::of_select(lt_check_int(L, idx)), true;
  if (lua_type(L, idx) == LUA_TSTRING) return *out = index_parse_item(lua_tostring(L, idx)), true;
  if (at::Tensor* t = lt_test<at::Tensor>(L, idx)) return *out = IndexItem::of_tensor(*t), true;
  return false;
}

// An index from a Lua value: a number, a text index "0, 1:3", a tensor, or a list of those.
std::vector<IndexItem> index_spec(lua_State* L, int idx) {
  if (lua_type(L, idx) == LUA_TSTRING) return index_parse(lua_tostring(L, idx));
  IndexItem item;
  if (index_item(L, idx, &item)) return {item};
  luaL_argcheck(L, lua_istable(L, idx), idx,
                "index expected: an integer, a string like \"0, 1:3\", a tensor, or a list of those");
  std::vector<IndexItem> items(lua_objlen(L, idx));
  for (size_t i = 0; i < items.size(); i++) {
    lua_rawgeti(L, idx, static_cast<int>(i + 1));
    if (!index_item(L, -1, &items[i]))
      luaL_argerror(L, idx,
                    "index items are integers, strings (\"1:3\", \":\", \"...\", \"none\") or tensors");
    lua_pop(L, 1);
  }
  return items;
}

// Nested Lua tables -> flat values + shape, checking the nesting is rectangular.
void collect_values(lua_State* L, int idx, size_t depth, std::vector<int64_t>& shape,
                    std::vector<double>& values, bool& any_bool, bool& any_number, const std::string& where) {
  if (lua_type(L, idx) == LUA_TNUMBER || lua_type(L, idx) == LUA_TBOOLEAN) {
    LT_CHECK(depth == shape.size() || (values.empty() && depth == 0),
             "torch.tensor: ragged nested table at " << where << ": expected a list of " << shape[depth]
                                                     << " items, got a value");
    bool b = lua_type(L, idx) == LUA_TBOOLEAN;
    (b ? any_bool : any_number) = true;
    values.push_back(b ? (lua_toboolean(L, idx) ? 1.0 : 0.0) : lua_tonumber(L, idx));
    return;
  }
  LT_CHECK(lua_istable(L, idx) && lt_is_list(L, idx),
           "torch.tensor: expected numbers, booleans or lists of them at " << where << ", got "
                                                                           << luaL_typename(L, idx));
  int64_t n = static_cast<int64_t>(lua_objlen(L, idx));
  if (depth == shape.size() && values.empty()) shape.push_back(n);  // first visit at this depth sets its size
  LT_CHECK(depth < shape.size(),
           "torch.tensor: ragged nested table at " << where << ": expected a value, got a list");
  LT_CHECK(shape[depth] == n, "torch.tensor: ragged nested table at " << where << ": expected "
                                                                      << shape[depth] << " items, got " << n);
  for (int64_t i = 1; i <= n; i++) {
    lua_rawgeti(L, idx, static_cast<int>(i));
    collect_values(L, lua_gettop(L), depth + 1, shape, values, any_bool, any_number,
                   where + "[" + std::to_string(i) + "]");
    lua_pop(L, 1);
  }
}

// Nested Lua lists from a contiguous row-major buffer of `shape` (one read per element, no
// per-element tensor ops); a 0-dim shape pushes the single value.
template <class T>
const T* push_values(lua_State* L, const T* p, at::IntArrayRef shape) {
  if (shape.empty()) {
    if constexpr (std::is_same_v<T, bool>)
      lua_pushboolean(L, *p);
    else
      lua_pushnumber(L, *p);
    return p + 1;
  }
  lua_createtable(L, static_cast<int>(shape[0]), 0);
  for (int64_t i = 0; i < shape[0]; i++) {
    p = push_values(L, p, shape.slice(1));
    lua_rawseti(L, -2, static_cast<int>(i + 1));
  }
  return p;
}

// ============================================================================================
// Creation

int l_torch_tensor(lua_State* L) {
  std::vector<int64_t> shape;
  std::vector<double> values;
  bool any_bool = false, any_number = false;
  collect_values(L, 1, 0, shape, values, any_bool, any_number, "value");
  LT_CHECK(!(any_bool && any_number), "torch.tensor: mixes booleans and numbers");
  at::TensorOptions o = creation_options(L, 2, any_bool ? at::kBool : at::kFloat);
  return push_created(L, tensor_from_values(values, shape, o.dtype().toScalarType()).to(o.device()), 2);
}
LT_REGISTER("torch.tensor", l_torch_tensor);

// zeros/ones/rand/randn(sizes..., {opts})
int fill_creation(lua_State* L, at::Tensor (*make)(at::IntArrayRef, at::TensorOptions)) {
  int next = 1;
  std::vector<int64_t> sizes = int_list_args(L, 1, &next);
  return push_created(L, make(sizes, creation_options(L, next, at::kFloat)), next);
}
int l_torch_zeros(lua_State* L) {
  return fill_creation(L, [](at::IntArrayRef s, at::TensorOptions o) { return at::zeros(s, o); });
}
LT_REGISTER("torch.zeros", l_torch_zeros);
int l_torch_ones(lua_State* L) {
  return fill_creation(L, [](at::IntArrayRef s, at::TensorOptions o) { return at::ones(s, o); });
}
LT_REGISTER("torch.ones", l_torch_ones);
int l_torch_rand(lua_State* L) {
  return fill_creation(L, [](at::IntArrayRef s, at::TensorOptions o) { return at::rand(s, o); });
}
LT_REGISTER("torch.rand", l_torch_rand);
int l_torch_randn(lua_State* L) {
  return fill_creation(L, [](at::IntArrayRef s, at::TensorOptions o) { return at::randn(s, o); });
}
LT_REGISTER("torch.randn", l_torch_randn);

// full(sizes, value, {opts})
int l_torch_full(lua_State* L) {
  int next = 1;
  std::vector<int64_t> sizes = int_list_args(L, 1, &next);
  at::Scalar v = check_scalar(L, next);
  c10::ScalarType def = lua_type(L, next) == LUA_TBOOLEAN ? at::kBool : at::kFloat;
  return push_created(L, at::full(sizes, v, creation_options(L, next + 1, def)), next + 1);
}
LT_REGISTER("torch.full", l_torch_full);

// randint(low, high, sizes, {opts}): integers in [low, high)
int l_torch_randint(lua_State* L) {
  int64_t low = lt_check_int(L, 1), high = lt_check_int(L, 2);
  int next = 3;
  std::vector<int64_t> sizes = int_list_args(L, 3, &next);
  return push_created(L, at::randint(low, high, sizes, creation_options(L, next, at::kLong)), next);
}
LT_REGISTER("torch.randint", l_torch_randint);

// arange(stop) / arange(start, stop [, step]) [, {opts}]: int64 when every bound is whole.
int l_torch_arange(lua_State* L) {
  double a[3] = {0, 0, 1};
  int n = 0;
  while (n < 3 && lua_type(L, n + 1) == LUA_TNUMBER) n++;
  luaL_argcheck(L, n >= 1, 1, "number expected (arange(stop) or arange(start, stop [, step]))");
  for (int i = 0; i < n; i++) a[i] = lua_tonumber(L, i + 1);
  double start = n == 1 ? 0 : a[0], stop = n == 1 ? a[0] : a[1], step = n == 3 ? a[2] : 1;
  bool whole = number_is_whole(start) && number_is_whole(stop) && number_is_whole(step);
  at::TensorOptions o = creation_options(L, n + 1, whole ? at::kLong : at::kFloat);
  return push_created(L, at::arange(at::Scalar(start), at::Scalar(stop), at::Scalar(step), o), n + 1);
}
LT_REGISTER("torch.arange", l_torch_arange);

// linspace(start, stop, steps, {opts})
int l_torch_linspace(lua_State* L) {
  double start = luaL_checknumber(L, 1), stop = luaL_checknumber(L, 2);
  int64_t steps = lt_check_int(L, 3);
  return push_created(L, at::linspace(start, stop, steps, creation_options(L, 4, at::kFloat)), 4);
}
LT_REGISTER("torch.linspace", l_torch_linspace);

// eye(n [, m], {opts})
int l_torch_eye(lua_State* L) {
  int64_t n = lt_check_int(L, 1);
  bool has_m = lua_type(L, 2) == LUA_TNUMBER;
  at::TensorOptions o = creation_options(L, has_m ? 3 : 2, at::kFloat);
  return push_created(L, has_m ? at::eye(n, lt_check_int(L, 2), o) : at::eye(n, o), has_m ? 3 : 2);
}
LT_REGISTER("torch.eye", l_torch_eye);

// zeros_like/ones_like(t, {opts}) and full_like(t, value, {opts}): dtype/device default to t's.
at::TensorOptions like_options(lua_State* L, int idx, const at::Tensor& t) {
  at::TensorOptions o = creation_options(L, idx, t.scalar_type());
  if (!lt_has_field(L, idx, "device")) o = o.device(t.device());
  return o;
}
int l_torch_zeros_like(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  return push_created(L, at::zeros(t.sizes(), like_options(L, 2, t)), 2);
}
LT_REGISTER("torch.zeros_like", l_torch_zeros_like);
int l_torch_ones_like(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  return push_created(L, at::ones(t.sizes(), like_options(L, 2, t)), 2);
}
LT_REGISTER("torch.ones_like", l_torch_ones_like);
int l_torch_full_like(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  return push_created(L, at::full(t.sizes(), check_scalar(L, 2), like_options(L, 3, t)), 3);
}
LT_REGISTER("torch.full_like", l_torch_full_like);

// ============================================================================================
// Elementwise: one table of unary ops, one of binary ops; each entry is one line.

// Each entry is torch.name(t) and t:name() -> Tensor (declared in bindings/api/torch.yaml).
struct UnaryOp {
  const char* name;
  at::Tensor (*fn)(const at::Tensor&);
};
const UnaryOp unary_ops[] = {
    {"neg", [](const at::Tensor& t) { return t.neg(); }},
    {"abs", [](const at::Tensor& t) { return t.abs(); }},
    {"exp", [](const at::Tensor& t) { return t.exp(); }},
    {"log", [](const at::Tensor& t) { return t.log(); }},
    {"log1p", [](const at::Tensor& t) { return t.log1p(); }},
    {"sqrt", [](const at::Tensor& t) { return t.sqrt(); }},
    {"rsqrt", [](const at::Tensor& t) { return t.rsqrt(); }},
    {"sin", [](const at::Tensor& t) { return t.sin(); }},
    {"cos", [](const at::Tensor& t) { return t.cos(); }},
    {"tanh", [](const at::Tensor& t) { return t.tanh(); }},
    {"sigmoid", [](const at::Tensor& t) { return t.sigmoid(); }},
    {"relu", [](const at::Tensor& t) { return t.relu(); }},
    {"gelu", [](const at::Tensor& t) { return at::gelu(t); }},
    {"silu", [](const at::Tensor& t) { return at::silu(t); }},
    {"floor", [](const at::Tensor& t) { return t.floor(); }},
    {"ceil", [](const at::Tensor& t) { return t.ceil(); }},
    {"round", [](const at::Tensor& t) { return t.round(); }},
    {"sign", [](const at::Tensor& t) { return t.sign(); }},
    {"reciprocal", [](const at::Tensor& t) { return t.reciprocal(); }},
    {"square", [](const at::Tensor& t) { return t.square(); }},
    {"isnan", [](const at::Tensor& t) { return t.isnan(); }},
    {"isinf", [](const at::Tensor& t) { return t.isinf(); }},
    {"isfinite", [](const at::Tensor& t) { return t.isfinite(); }},
    {"logical_not", [](const at::Tensor& t) { return t.logical_not(); }},
    {"contiguous", [](const at::Tensor& t) { return t.contiguous(); }},
    {"clone", [](const at::Tensor& t) { return t.clone(); }},
    {"detach", [](const at::Tensor& t) { return t.detach(); }},
};

// torch.name(a, b) and a:name(b) -> Tensor; a number on either side.
struct BinaryOp {
  const char* name;
  at::Tensor (*fn)(const at::Tensor&, const at::Tensor&);
};
const BinaryOp binary_ops[] = {
    {"add", [](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); }},
    {"sub", [](const at::Tensor& a, const at::Tensor& b) { return at::sub(a, b); }},
    {"mul", [](const at::Tensor& a, const at::Tensor& b) { return at::mul(a, b); }},
    {"div", [](const at::Tensor& a, const at::Tensor& b) { return at::div(a, b); }},
    {"pow", [](const at::Tensor& a, const at::Tensor& b) { return at::pow(a, b); }},
    {"remainder", [](const at::Tensor& a, const at::Tensor& b) { return at::remainder(a, b); }},
    {"maximum", [](const at::Tensor& a, const at::Tensor& b) { return at::maximum(a, b); }},
    {"minimum", [](const at::Tensor& a, const at::Tensor& b) { return at::minimum(a, b); }},
    {"eq", [](const at::Tensor& a, const at::Tensor& b) { return at::eq(a, b); }},
    {"ne", [](const at::Tensor& a, const at::Tensor& b) { return at::ne(a, b); }},
    {"lt", [](const at::Tensor& a, const at::Tensor& b) { return at::lt(a, b); }},
    {"le", [](const at::Tensor& a, const at::Tensor& b) { return at::le(a, b); }},
    {"gt", [](const at::Tensor& a, const at::Tensor& b) { return at::gt(a, b); }},
    {"ge", [](const at::Tensor& a, const at::Tensor& b) { return at::ge(a, b); }},
    {"logical_and", [](const at::Tensor& a, const at::Tensor& b) { return at::logical_and(a, b); }},
    {"logical_or", [](const at::Tensor& a, const at::Tensor& b) { return at::logical_or(a, b); }},
    {"matmul", [](const at::Tensor& a, const at::Tensor& b) { return at::matmul(a, b); }},
};

// The op is the closure's upvalue (index into the tables above), behind the exception bridge.
int l_unary(lua_State* L) {
  const UnaryOp& op = unary_ops[lua_tointeger(L, lua_upvalueindex(1))];
  return push_tensor(L, op.fn(check_tensor(L, 1)));
}
int binary_apply(lua_State* L, const BinaryOp& op) {
  if (!lt_test<at::Tensor>(L, 1) && !lt_test<at::Tensor>(L, 2)) check_tensor(L, 1);  // no tensor: type error
  at::Tensor x = operand(L, 1), y = operand(L, 2);
  return push_tensor(L, op.fn(x, y));
}
int l_binary(lua_State* L) {
  return binary_apply(L, binary_ops[lua_tointeger(L, lua_upvalueindex(1))]);
}
int l_binary_protected(lua_State* L) {
  return lt_call_protected(L, l_binary);
}
int l_unary_protected(lua_State* L) {
  return lt_call_protected(L, l_unary);
}

// ============================================================================================
// Reductions: (t [, dim [, keepdim]]); dim may be a list for sum/mean.

bool opt_keepdim(lua_State* L, int idx) {
  return lua_isnoneornil(L, idx) ? false : (luaL_checktype(L, idx, LUA_TBOOLEAN), lua_toboolean(L, idx));
}

std::vector<int64_t> dims_arg(lua_State* L, int idx) {
  int next;
  return int_list_args(L, idx, &next);
}

int l_torch_sum(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  return push_tensor(L, lua_isnoneornil(L, 2) ? t.sum() : t.sum(dims_arg(L, 2), opt_keepdim(L, 3)));
}
LT_REGISTER("Tensor:sum", l_torch_sum);
int l_torch_mean(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  return push_tensor(L, lua_isnoneornil(L, 2) ? t.mean() : t.mean(dims_arg(L, 2), opt_keepdim(L, 3)));
}
LT_REGISTER("Tensor:mean", l_torch_mean);
int l_torch_prod(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  return push_tensor(L, lua_isnoneornil(L, 2) ? t.prod() : t.prod(lt_check_int(L, 2), opt_keepdim(L, 3)));
}
LT_REGISTER("Tensor:prod", l_torch_prod);
// std/var are unbiased (divide by n - 1), as in PyTorch.
int l_torch_std(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  return push_tensor(L, lua_isnoneornil(L, 2)
                            ? t.std()
                            : at::std(t, at::IntArrayRef(dims_arg(L, 2)), true, opt_keepdim(L, 3)));
}
LT_REGISTER("Tensor:std", l_torch_std);
int l_torch_var(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  return push_tensor(L, lua_isnoneornil(L, 2)
                            ? t.var()
                            : at::var(t, at::IntArrayRef(dims_arg(L, 2)), true, opt_keepdim(L, 3)));
}
LT_REGISTER("Tensor:var", l_torch_var);
int l_torch_logsumexp(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  std::vector<int64_t> dims = lua_isnoneornil(L, 2) ? std::vector<int64_t>{} : dims_arg(L, 2);
  if (dims.empty()) return push_tensor(L, t.flatten().logsumexp(0));  // over every element, like sum()
  return push_tensor(L, t.logsumexp(dims, opt_keepdim(L, 3)));
}
LT_REGISTER("Tensor:logsumexp", l_torch_logsumexp);
// norm(t [, p [, dim [, keepdim]]]): p defaults to 2 over all elements.
int l_torch_norm(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  double p = luaL_optnumber(L, 2, 2.0);
  if (lua_isnoneornil(L, 3)) return push_tensor(L, at::norm(t, p));
  return push_tensor(
      L, at::norm(t, c10::optional<at::Scalar>(p), at::IntArrayRef(dims_arg(L, 3)), opt_keepdim(L, 4)));
}
LT_REGISTER("Tensor:norm", l_torch_norm);
// max/min(t) -> 0-dim tensor; max/min(t, dim [, keepdim]) -> values, indices
int max_min(lua_State* L, bool is_max) {
  at::Tensor& t = check_tensor(L, 1);
  if (lua_isnoneornil(L, 2)) return push_tensor(L, is_max ? t.max() : t.min());
  auto r = is_max ? at::max(t, lt_check_int(L, 2), opt_keepdim(L, 3))
                  : at::min(t, lt_check_int(L, 2), opt_keepdim(L, 3));
  push_tensor(L, std::get<0>(r));
  push_tensor(L, std::get<1>(r));
  return 2;
}
int l_torch_max(lua_State* L) {
  return max_min(L, true);
}
LT_REGISTER("Tensor:max", l_torch_max);
int l_torch_min(lua_State* L) {
  return max_min(L, false);
}
LT_REGISTER("Tensor:min", l_torch_min);
// argmax/argmin(t [, dim [, keepdim]]): the index in the flattened tensor when no dim is given.
int arg_max_min(lua_State* L, bool is_max) {
  at::Tensor& t = check_tensor(L, 1);
  c10::optional<int64_t> dim;
  if (!lua_isnoneornil(L, 2)) dim = lt_check_int(L, 2);
  return push_tensor(L, is_max ? t.argmax(dim, opt_keepdim(L, 3)) : t.argmin(dim, opt_keepdim(L, 3)));
}
int l_torch_argmax(lua_State* L) {
  return arg_max_min(L, true);
}
LT_REGISTER("Tensor:argmax", l_torch_argmax);
int l_torch_argmin(lua_State* L) {
  return arg_max_min(L, false);
}
LT_REGISTER("Tensor:argmin", l_torch_argmin);
int l_torch_all(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  return push_tensor(L, lua_isnoneornil(L, 2) ? t.all() : t.all(lt_check_int(L, 2), opt_keepdim(L, 3)));
}
LT_REGISTER("Tensor:all", l_torch_all);
int l_torch_any(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  return push_tensor(L, lua_isnoneornil(L, 2) ? t.any() : t.any(lt_check_int(L, 2), opt_keepdim(L, 3)));
}
LT_REGISTER("Tensor:any", l_torch_any);
int l_torch_cumsum(lua_State* L) {
  return push_tensor(L, check_tensor(L, 1).cumsum(lt_check_int(L, 2)));
}
LT_REGISTER("Tensor:cumsum", l_torch_cumsum);
int l_torch_softmax(lua_State* L) {
  return push_tensor(L, check_tensor(L, 1).softmax(lt_check_int(L, 2)));
}
LT_REGISTER("Tensor:softmax", l_torch_softmax);
int l_torch_log_softmax(lua_State* L) {
  return push_tensor(L, check_tensor(L, 1).log_softmax(lt_check_int(L, 2)));
}
LT_REGISTER("Tensor:log_softmax", l_torch_log_softmax);

// clamp(t, min, max): either bound may be nil.
int l_torch_clamp(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  c10::optional<at::Scalar> lo, hi;
  if (!lua_isnoneornil(L, 2)) lo = check_scalar(L, 2);
  if (!lua_isnoneornil(L, 3)) hi = check_scalar(L, 3);
  luaL_argcheck(L, lo || hi, 2, "clamp needs a min, a max or both");
  return push_tensor(L, t.clamp(lo, hi));
}
LT_REGISTER("Tensor:clamp", l_torch_clamp);
int l_torch_where(lua_State* L) {
  at::Tensor& cond = check_tensor(L, 1);
  return push_tensor(L, at::where(cond, operand(L, 2), operand(L, 3)));
}
LT_REGISTER("torch.where", l_torch_where);
int l_torch_masked_fill(lua_State* L) {
  return push_tensor(L, check_tensor(L, 1).masked_fill(check_tensor(L, 2), check_scalar(L, 3)));
}
LT_REGISTER("Tensor:masked_fill", l_torch_masked_fill);
int l_torch_tril(lua_State* L) {
  return push_tensor(L, check_tensor(L, 1).tril(luaL_optinteger(L, 2, 0)));
}
LT_REGISTER("Tensor:tril", l_torch_tril);
int l_torch_triu(lua_State* L) {
  return push_tensor(L, check_tensor(L, 1).triu(luaL_optinteger(L, 2, 0)));
}
LT_REGISTER("Tensor:triu", l_torch_triu);
int l_torch_gather(lua_State* L) {
  return push_tensor(L, check_tensor(L, 1).gather(lt_check_int(L, 2), check_tensor(L, 3)));
}
LT_REGISTER("Tensor:gather", l_torch_gather);

// ============================================================================================
// Shapes

// reshape/view/permute/expand(t, sizes...): sizes as numbers or one list, -1 where LibTorch allows.
// torch.name(t, sizes...) and t:name(sizes...) -> Tensor.
struct SizesOp {
  const char* name;
  at::Tensor (*fn)(const at::Tensor&, at::IntArrayRef);
};
const SizesOp sizes_ops[] = {
    {"reshape", [](const at::Tensor& t, at::IntArrayRef s) { return t.reshape(s); }},
    {"view", [](const at::Tensor& t, at::IntArrayRef s) { return t.view(s); }},
    {"permute", [](const at::Tensor& t, at::IntArrayRef s) { return t.permute(s); }},
    {"expand", [](const at::Tensor& t, at::IntArrayRef s) { return t.expand(s); }},
};
int l_sizes(lua_State* L) {
  const SizesOp& op = sizes_ops[lua_tointeger(L, lua_upvalueindex(1))];
  int next;
  at::Tensor& t = check_tensor(L, 1);
  return push_tensor(L, op.fn(t, int_list_args(L, 2, &next)));
}
int l_sizes_protected(lua_State* L) {
  return lt_call_protected(L, l_sizes);
}
int l_torch_transpose(lua_State* L) {
  return push_tensor(L, check_tensor(L, 1).transpose(lt_check_int(L, 2), lt_check_int(L, 3)));
}
LT_REGISTER("Tensor:transpose", l_torch_transpose);
int l_torch_flatten(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  return push_tensor(L, t.flatten(luaL_optinteger(L, 2, 0), luaL_optinteger(L, 3, -1)));
}
LT_REGISTER("Tensor:flatten", l_torch_flatten);
int l_torch_squeeze(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  return push_tensor(L, lua_isnoneornil(L, 2) ? t.squeeze() : t.squeeze(lt_check_int(L, 2)));
}
LT_REGISTER("Tensor:squeeze", l_torch_squeeze);
int l_torch_unsqueeze(lua_State* L) {
  return push_tensor(L, check_tensor(L, 1).unsqueeze(lt_check_int(L, 2)));
}
LT_REGISTER("Tensor:unsqueeze", l_torch_unsqueeze);
int l_torch_narrow(lua_State* L) {
  return push_tensor(L,
                     check_tensor(L, 1).narrow(lt_check_int(L, 2), lt_check_int(L, 3), lt_check_int(L, 4)));
}
LT_REGISTER("Tensor:narrow", l_torch_narrow);
int l_torch_select(lua_State* L) {
  return push_tensor(L, check_tensor(L, 1).select(lt_check_int(L, 2), lt_check_int(L, 3)));
}
LT_REGISTER("Tensor:select", l_torch_select);
int l_torch_chunk(lua_State* L) {
  return push_tensor_list(L, check_tensor(L, 1).chunk(lt_check_int(L, 2), luaL_optinteger(L, 3, 0)));
}
LT_REGISTER("Tensor:chunk", l_torch_chunk);
int l_torch_split(lua_State* L) {
  return push_tensor_list(L, check_tensor(L, 1).split(lt_check_int(L, 2), luaL_optinteger(L, 3, 0)));
}
LT_REGISTER("Tensor:split", l_torch_split);
std::vector<at::Tensor> tensor_list_arg(lua_State* L, int idx) {
  luaL_argcheck(L, lt_is_list(L, idx) && lua_objlen(L, idx) > 0, idx, "non-empty list of tensors expected");
  std::vector<at::Tensor> out;
  for (size_t i = 1; i <= lua_objlen(L, idx); i++) {
    lua_rawgeti(L, idx, static_cast<int>(i));
    at::Tensor* t = lt_test<at::Tensor>(L, -1);
    if (!t)
      luaL_argerror(
          L, idx, ("list of tensors expected; item " + std::to_string(i) + " is not a live Tensor").c_str());
    out.push_back(*t);
    lua_pop(L, 1);
  }
  return out;
}
int l_torch_cat(lua_State* L) {
  return push_tensor(L, at::cat(tensor_list_arg(L, 1), luaL_optinteger(L, 2, 0)));
}
LT_REGISTER("torch.cat", l_torch_cat);
int l_torch_stack(lua_State* L) {
  return push_tensor(L, at::stack(tensor_list_arg(L, 1), luaL_optinteger(L, 2, 0)));
}
LT_REGISTER("torch.stack", l_torch_stack);

// t:index(spec) and t:index_set(spec, value): see the index rule at the top of the file.
int l_torch_index(lua_State* L) {
  return push_tensor(L, tensor_index(check_tensor(L, 1), index_spec(L, 2)));
}
LT_REGISTER("Tensor:index", l_torch_index);
int l_torch_index_set(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  auto items = index_spec(L, 2);
  at::Tensor v =
      lt_test<at::Tensor>(L, 3) ? check_tensor(L, 3) : at::scalar_tensor(check_scalar(L, 3), t.options());
  tensor_index_put(t, items, v);
  lua_settop(L, 1);
  return 1;
}
LT_REGISTER("Tensor:index_set", l_torch_index_set);

// ============================================================================================
// Information and conversion

int l_torch_shape(lua_State* L) {
  lt_push_list(L, check_tensor(L, 1).sizes().vec());
  return 1;
}
LT_REGISTER("Tensor:shape", l_torch_shape);
int l_torch_size(lua_State* L) {
  return lua_pushnumber(L, static_cast<double>(check_tensor(L, 1).size(lt_check_int(L, 2)))), 1;
}
LT_REGISTER("Tensor:size", l_torch_size);
int l_torch_dim(lua_State* L) {
  return lua_pushnumber(L, static_cast<double>(check_tensor(L, 1).dim())), 1;
}
LT_REGISTER("Tensor:dim", l_torch_dim);
int l_torch_numel(lua_State* L) {
  return lua_pushnumber(L, static_cast<double>(check_tensor(L, 1).numel())), 1;
}
LT_REGISTER("Tensor:numel", l_torch_numel);
int l_torch_dtype(lua_State* L) {
  return lua_pushstring(L, dtype_name(check_tensor(L, 1).scalar_type()).c_str()), 1;
}
LT_REGISTER("Tensor:dtype", l_torch_dtype);
int l_torch_device(lua_State* L) {
  // torch.device("auto") resolves a device name; t:device() names a tensor's device.
  if (lua_type(L, 1) == LUA_TSTRING)
    return lua_pushstring(L, device_name(device_parse(lua_tostring(L, 1))).c_str()), 1;
  return lua_pushstring(L, device_name(check_tensor(L, 1).device()).c_str()), 1;
}
LT_REGISTER("Tensor:device", l_torch_device);
int l_torch_item(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  LT_CHECK(t.numel() == 1, "item: expected a tensor with one element, got shape " << shape_str(t.sizes()));
  if (t.scalar_type() == at::kBool) return lua_pushboolean(L, t.item<bool>()), 1;
  return lua_pushnumber(L, t.item<double>()), 1;
}
LT_REGISTER("Tensor:item", l_torch_item);
int l_torch_tolist(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  bool as_bool = t.scalar_type() == at::kBool;
  at::Tensor host = t.detach().to(at::kCPU, as_bool ? at::kBool : at::kDouble).contiguous();
  if (as_bool)
    push_values(L, host.data_ptr<bool>(), host.sizes());
  else
    push_values(L, host.data_ptr<double>(), host.sizes());
  return 1;
}
LT_REGISTER("Tensor:tolist", l_torch_tolist);
int l_torch_str(lua_State* L) {
  std::ostringstream os;
  os << check_tensor(L, 1);
  return lua_pushstring(L, os.str().c_str()), 1;
}
LT_REGISTER("Tensor:str", l_torch_str);
int l_torch_is_tensor(lua_State* L) {
  return lua_pushboolean(L, lt_test<at::Tensor>(L, 1) != nullptr), 1;
}
LT_REGISTER("torch.is_tensor", l_torch_is_tensor);

// t:to("bf16" | "cuda" | "auto" | other_tensor | {dtype=, device=})
int l_torch_to(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  if (at::Tensor* other = lt_test<at::Tensor>(L, 2))
    return push_tensor(L, t.to(other->device(), other->scalar_type()));
  if (lua_type(L, 2) == LUA_TSTRING) {
    c10::ScalarType st;
    std::string s = lua_tostring(L, 2);
    if (dtype_try_parse(s, &st)) return push_tensor(L, t.to(st));
    return push_tensor(L, t.to(device_parse(s)));
  }
  luaL_argcheck(L, lua_istable(L, 2), 2, "dtype name, device name, Tensor or {dtype=, device=} expected");
  lt_check_options(L, 2, lt_api("torch.to"));
  c10::ScalarType st =
      lt_has_field(L, 2, "dtype") ? dtype_parse(lt_opt_string(L, 2, "dtype", "")) : t.scalar_type();
  c10::Device dev =
      lt_has_field(L, 2, "device") ? device_parse(lt_opt_string(L, 2, "device", "")) : t.device();
  return push_tensor(L, t.to(dev, st));
}
LT_REGISTER("Tensor:to", l_torch_to);
int l_torch_cuda_available(lua_State* L) {
  return lua_pushboolean(L, cuda_available()), 1;
}
LT_REGISTER("torch.cuda_available", l_torch_cuda_available);

int l_torch_equal(lua_State* L) {
  at::Tensor& a = check_tensor(L, 1);
  at::Tensor& b = check_tensor(L, 2);
  return lua_pushboolean(L, a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() && at::equal(a, b)),
         1;
}
LT_REGISTER("Tensor:equal", l_torch_equal);
// allclose(a, b, {rtol=1e-5, atol=1e-8})
int l_torch_allclose(lua_State* L) {
  at::Tensor& a = check_tensor(L, 1);
  at::Tensor& b = check_tensor(L, 2);
  lt_check_options(L, 3, lt_api("torch.allclose"));
  return lua_pushboolean(L,
                         a.allclose(b, lt_opt_number(L, 3, "rtol", 1e-5), lt_opt_number(L, 3, "atol", 1e-8))),
         1;
}
LT_REGISTER("Tensor:allclose", l_torch_allclose);

// ============================================================================================
// Autograd, randomness, files, losses

int l_torch_requires_grad(lua_State* L) {
  return lua_pushboolean(L, check_tensor(L, 1).requires_grad()), 1;
}
LT_REGISTER("Tensor:requires_grad", l_torch_requires_grad);
int l_torch_requires_grad_(lua_State* L) {
  check_tensor(L, 1).requires_grad_(lua_isnoneornil(L, 2) ? true : lua_toboolean(L, 2));
  lua_settop(L, 1);
  return 1;
}
LT_REGISTER("Tensor:requires_grad_", l_torch_requires_grad_);
int l_torch_backward(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  LT_CHECK(t.requires_grad(),
           "backward: this tensor does not require grad (nothing it depends on has requires_grad)");
  if (lua_isnoneornil(L, 2))
    t.backward();
  else
    t.backward(check_tensor(L, 2));
  return 0;
}
LT_REGISTER("Tensor:backward", l_torch_backward);
int l_torch_grad(lua_State* L) {
  const at::Tensor& g = check_tensor(L, 1).grad();
  if (!g.defined()) return lua_pushnil(L), 1;
  return push_tensor(L, g);
}
LT_REGISTER("Tensor:grad", l_torch_grad);
int l_torch_zero_grad(lua_State* L) {
  check_tensor(L, 1).mutable_grad() = at::Tensor();
  return 0;
}
LT_REGISTER("Tensor:zero_grad", l_torch_zero_grad);
// no_grad(fn, ...) -> fn(...) run with gradient tracking off; returns fn's results.
int l_torch_no_grad(lua_State* L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  at::NoGradGuard guard;
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}
LT_REGISTER("torch.no_grad", l_torch_no_grad);
int l_torch_manual_seed(lua_State* L) {
  at::manual_seed(static_cast<uint64_t>(lt_check_int(L, 1)));
  return 0;
}
LT_REGISTER("torch.manual_seed", l_torch_manual_seed);

// save(tensor | {name = tensor, ...}, path): PyTorch's format (torch.load reads it).
int l_torch_save(lua_State* L) {
  std::string path = luaL_checkstring(L, 2);
  if (at::Tensor* t = lt_test<at::Tensor>(L, 1)) {
    tensor_file_save(path, *t);
    return 0;
  }
  luaL_argcheck(L, lua_istable(L, 1), 1, "Tensor or table of name = Tensor expected");
  NamedTensors dict;
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    at::Tensor* t = lt_test<at::Tensor>(L, -1);
    if (lua_type(L, -2) != LUA_TSTRING || !t) luaL_argerror(L, 1, "table of name = Tensor expected");
    dict.emplace_back(lua_tostring(L, -2), *t);
    lua_pop(L, 1);
  }
  std::sort(dict.begin(), dict.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  tensor_file_save(path, dict);
  return 0;
}
LT_REGISTER("torch.save", l_torch_save);
int l_torch_load(lua_State* L) {
  TensorFile f = tensor_file_load(luaL_checkstring(L, 1));
  if (!f.is_dict) return push_tensor(L, f.tensor);
  lua_createtable(L, 0, static_cast<int>(f.dict.size()));
  for (auto& [name, t] : f.dict) {
    push_tensor(L, t);
    lua_setfield(L, -2, name.c_str());
  }
  return 1;
}
LT_REGISTER("torch.load", l_torch_load);

int64_t reduction_arg(lua_State* L, int idx) {
  std::string r = lt_opt_string(L, idx, "reduction", "mean");
  if (r == "mean") return at::Reduction::Mean;
  if (r == "sum") return at::Reduction::Sum;
  if (r == "none") return at::Reduction::None;
  fail("reduction '" + r + "' unknown: expected \"mean\", \"sum\" or \"none\"");
}
// cross_entropy(logits (N, C), targets (N) int64 [, {ignore_index=-100, reduction="mean"}])
int l_torch_cross_entropy(lua_State* L) {
  at::Tensor& logits = check_tensor(L, 1);
  at::Tensor& target = check_tensor(L, 2);
  lt_check_options(L, 3, lt_api("torch.cross_entropy"));
  return push_tensor(L, at::cross_entropy_loss(logits, target, {}, reduction_arg(L, 3),
                                               lt_opt_int(L, 3, "ignore_index", -100),
                                               lt_opt_number(L, 3, "label_smoothing", 0.0)));
}
LT_REGISTER("torch.cross_entropy", l_torch_cross_entropy);
int l_torch_mse_loss(lua_State* L) {
  lt_check_options(L, 3, lt_api("torch.mse_loss"));
  return push_tensor(L, at::mse_loss(check_tensor(L, 1), check_tensor(L, 2), reduction_arg(L, 3)));
}
LT_REGISTER("torch.mse_loss", l_torch_mse_loss);

// ============================================================================================
// Metamethods

// A string key is a method name when it looks like an identifier ("sum"), else a text index ("1:3").
bool is_identifier(lua_State* L, int idx) {
  if (lua_type(L, idx) != LUA_TSTRING) return false;
  const char* s = lua_tostring(L, idx);
  if (!(std::isalpha(static_cast<unsigned char>(*s)) || *s == '_')) return false;
  for (; *s; s++)
    if (!(std::isalnum(static_cast<unsigned char>(*s)) || *s == '_')) return false;
  return true;
}

int l_tensor_meta_index(lua_State* L) {
  if (is_identifier(L, 2)) {  // method lookup
    luaL_getmetatable(L, lt_metatable_name("Tensor").c_str());
    lua_getfield(L, -1, "methods");
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
  }
  return push_tensor(L, tensor_index(check_tensor(L, 1), index_spec(L, 2)));  // t[0], t[{0, "1:3"}]
}
LT_REGISTER("Tensor:__index", l_tensor_meta_index);
int l_tensor_meta_newindex(lua_State* L) {
  LT_CHECK(!is_identifier(L, 2),
           "cannot set field '"
               << lua_tostring(L, 2)
               << "' on a Tensor; assign elements with t[spec] = value or t:index_set(spec, value)");
  l_torch_index_set(L);
  return 0;
}
LT_REGISTER("Tensor:__newindex", l_tensor_meta_newindex);
int l_tensor_meta_eq(lua_State* L) {
  return l_torch_equal(L);
}
LT_REGISTER("Tensor:__eq", l_tensor_meta_eq);
int compare_one(lua_State* L, bool strict) {
  at::Tensor a = operand(L, 1), b = operand(L, 2);
  LT_CHECK(a.numel() == 1 && b.numel() == 1,
           "< and <= compare one-element tensors; use a:lt(b), a:le(b) ... for "
           "elementwise comparison (shapes "
               << shape_str(a.sizes()) << " and " << shape_str(b.sizes()) << ")");
  double x = a.item<double>(), y = b.item<double>();
  return lua_pushboolean(L, strict ? x < y : x <= y), 1;
}
int l_tensor_meta_lt(lua_State* L) {
  return compare_one(L, true);
}
LT_REGISTER("Tensor:__lt", l_tensor_meta_lt);
int l_tensor_meta_le(lua_State* L) {
  return compare_one(L, false);
}
LT_REGISTER("Tensor:__le", l_tensor_meta_le);
int l_tensor_meta_len(lua_State* L) {
  at::Tensor& t = check_tensor(L, 1);
  LT_CHECK(t.dim() > 0, "# of a 0-dim tensor: it has no first dimension");
  return lua_pushnumber(L, static_cast<double>(t.size(0))), 1;
}
LT_REGISTER("Tensor:__len", l_tensor_meta_len);
int l_tensor_meta_unm(lua_State* L) {
  return push_tensor(L, check_tensor(L, 1).neg());
}
LT_REGISTER("Tensor:__unm", l_tensor_meta_unm);

// Operators bound to binary ops by name: __add -> add, ...
const std::pair<const char*, const char*> operator_ops[] = {
    {"__add", "add"}, {"__sub", "sub"}, {"__mul", "mul"},
    {"__div", "div"}, {"__pow", "pow"}, {"__mod", "remainder"},
};

// Sets each op of a table-driven family into the table at the top of the stack: a closure of
// `fn` whose upvalue is the op's position in `ops`.
template <class Op, size_t N>
void set_ops(lua_State* L, const Op (&ops)[N], lua_CFunction fn) {
  for (size_t i = 0; i < N; i++) {
    lua_pushinteger(L, static_cast<lua_Integer>(i));
    lua_pushcclosure(L, fn, 1);
    lua_setfield(L, -2, ops[i].name);
  }
}

LT_REGISTER_CLASS("torch", at::Tensor, tensor_describe);

// Opening torch, after the Tensor class: the op families and operators, then every Tensor method
// copied into the module (torch.exp(t) is t:exp(); torch.release(t) too).
void open_tensor_ops(lua_State* L) {
  luaL_getmetatable(L, lt_metatable_name("Tensor").c_str());
  lua_getfield(L, -1, "methods");
  set_ops(L, unary_ops, l_unary_protected);
  set_ops(L, binary_ops, l_binary_protected);
  set_ops(L, sizes_ops, l_sizes_protected);
  // Operators share the closures of the binary ops.
  for (const auto& [meta, op] : operator_ops) {
    lua_getfield(L, -1, op);
    lua_setfield(L, -3, meta);
  }
  lua_pushnil(L);
  while (lua_next(L, -2)) {  // stack: module, metatable, methods, name, method
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_settable(L, -6);
  }
  lua_pop(L, 2);  // methods, metatable
}
LT_ON_OPEN("torch", open_tensor_ops);

}  // namespace

}  // namespace luatune
