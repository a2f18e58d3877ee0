// Lua module `qlora`: 4-bit (NF4 / FP4) base weights for QLoRA (host/adapt/qlora.h, host/quant/quant.h), as
// bitsandbytes stores them. Training is LoRA's: models.load(dir, {quantize = "nf4"}) then
// lora.apply; see recipes/qlora_finetune.lua.
#include "bindings/qlora_options.h"

#include "bindings/lua_util.h"
#include "bindings/model_class.h"
#include "bindings/tensor_class.h"
#include "host/adapt/qlora.h"
#include "host/core/device.h"
#include "host/core/error.h"

namespace luatune {

bool lt_quant_options(lua_State* L, int idx, const std::string& where, QuantConfig* c,
                      std::vector<std::string>* skip) {
  idx = idx < 0 ? lua_gettop(L) + idx + 1 : idx;
  switch (lua_type(L, idx)) {
    case LUA_TNONE:
    case LUA_TNIL:
      return false;
    case LUA_TBOOLEAN:
      return lua_toboolean(L, idx) != 0;
    case LUA_TSTRING: {
      std::string s = lua_tostring(L, idx);
      if (s.empty()) return false;
      c->type = quant_type_parse(s, where);
      return true;
    }
    case LUA_TTABLE:
      break;
    default:
      fail(where +
           ": expected \"nf4\", \"fp4\", true or a table {quant_type=, blocksize=, double_quant=, skip=}");
  }
  lt_check_options(L, idx, lt_api_table("QuantOpts"));
  c->type = quant_type_parse(lt_opt_string(L, idx, "quant_type", "nf4"), where);
  c->blocksize = lt_opt_int(L, idx, "blocksize", c->blocksize);
  c->double_quant = lt_opt_bool(L, idx, "double_quant", c->double_quant);
  c->nested_blocksize = lt_opt_int(L, idx, "nested_blocksize", c->nested_blocksize);
  lua_getfield(L, idx, "skip");
  if (lua_type(L, -1) == LUA_TSTRING) {
    skip->push_back(lua_tostring(L, -1));
  } else if (lua_istable(L, -1)) {
    LT_CHECK(lt_is_list(L, -1), where << ": skip must be a module name or a list of them");
    for (size_t i = 1; i <= lua_objlen(L, -1); i++) {
      lua_rawgeti(L, -1, static_cast<int>(i));
      LT_CHECK(lua_type(L, -1) == LUA_TSTRING, where << ": skip must be a module name or a list of them");
      skip->push_back(lua_tostring(L, -1));
      lua_pop(L, 1);
    }
  } else {
    LT_CHECK(lua_isnil(L, -1), where << ": skip must be a module name or a list of them");
  }
  lua_pop(L, 1);
  quant_config_check(*c, where);
  return true;
}

namespace {

int l_qlora_quantize(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  QuantConfig c;
  std::vector<std::string> skip;
  if (!lua_isnoneornil(L, 2) && !lt_quant_options(L, 2, "qlora.quantize", &c, &skip)) {
    lua_pushnumber(L, 0);
    return 1;
  }
  lua_pushnumber(L, static_cast<double>(qlora_quantize(m, c, skip)));
  return 1;
}
LT_REGISTER("qlora.quantize", l_qlora_quantize);

int l_qlora_dequantize(lua_State* L) {
  lua_pushnumber(L, static_cast<double>(qlora_dequantize(lt_check_model(L, 1))));
  return 1;
}
LT_REGISTER("qlora.dequantize", l_qlora_dequantize);

int l_qlora_info(lua_State* L) {
  Model& m = lt_check_model(L, 1);
  QuantConfig c;
  if (!qlora_config_of(m, &c)) {
    lua_pushnil(L);
    return 1;
  }
  int64_t bytes = 0, dense = 0;
  const int64_t elem = static_cast<int64_t>(c10::elementSize(m.dtype()));
  for (auto& [name, lin] : qlora_linears(m))
    if (lin->quant) {
      bytes += lin->quant->bytes();
      dense += lin->quant->numel() * elem;
    }
  lua_newtable(L);
  lt_set_number(L, "linears", static_cast<double>(qlora_count(m)));
  lt_set_string(L, "quant_type", quant_type_name(c.type));
  lt_set_number(L, "blocksize", static_cast<double>(c.blocksize));
  lt_set_bool(L, "double_quant", c.double_quant);
  lt_set_number(L, "bytes", static_cast<double>(bytes));
  lt_set_number(L, "dense_bytes", static_cast<double>(dense));
  return 1;
}
LT_REGISTER("qlora.info", l_qlora_info);

int l_qlora_quantize_tensor(lua_State* L) {
  at::Tensor t = lt_check<at::Tensor>(L, 1);
  QuantConfig c;
  std::vector<std::string> skip;
  if (!lua_isnoneornil(L, 2)) {
    bool on = lt_quant_options(L, 2, "qlora.quantize_tensor", &c, &skip);
    LT_CHECK(on, "qlora.quantize_tensor: options turn quantization off");
    LT_CHECK(skip.empty(), "qlora.quantize_tensor: skip applies to models only");
  }
  auto [packed, s] = quantize_4bit(t, c);
  lua_newtable(L);
  auto set = [&](const char* k, const at::Tensor& v) {
    lt_push<at::Tensor>(L, v);
    lua_setfield(L, -2, k);
  };
  set("packed", packed);
  set("absmax", s.absmax);
  set("quant_map", s.code);
  if (s.nested) {
    set("nested_absmax", s.nested_absmax);
    set("nested_quant_map", s.nested_code);
    lt_set_number(L, "offset", s.offset);
    lt_set_number(L, "nested_blocksize", static_cast<double>(s.nested_blocksize));
  }
  lt_set_list(L, "shape", s.shape);
  lt_set_string(L, "quant_type", quant_type_name(s.type));
  lt_set_number(L, "blocksize", static_cast<double>(s.blocksize));
  lt_set_string(L, "dtype", dtype_name(s.dtype));
  return 1;
}
LT_REGISTER("qlora.quantize_tensor", l_qlora_quantize_tensor);

int l_qlora_dequantize_tensor(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  auto get = [&](const char* k, bool required) {
    lua_getfield(L, 1, k);
    at::Tensor t;
    if (!lua_isnil(L, -1)) t = lt_check<at::Tensor>(L, -1);
    lua_pop(L, 1);
    LT_CHECK(!required || t.defined(), "qlora.dequantize_tensor: field " << k << " (a Tensor) is missing");
    return t;
  };
  QuantState s;
  at::Tensor packed = get("packed", true);
  s.absmax = get("absmax", true);
  s.code = get("quant_map", true);
  s.nested_absmax = get("nested_absmax", false);
  s.nested_code = get("nested_quant_map", false);
  s.nested = s.nested_absmax.defined();
  LT_CHECK(!s.nested || s.nested_code.defined(),
           "qlora.dequantize_tensor: nested_absmax without nested_quant_map");
  s.offset = static_cast<float>(lt_opt_number(L, 1, "offset", 0));
  s.nested_blocksize = lt_opt_int(L, 1, "nested_blocksize", 256);
  s.type = quant_type_parse(lt_opt_string(L, 1, "quant_type", "nf4"), "qlora.dequantize_tensor");
  s.blocksize = lt_opt_int(L, 1, "blocksize", 64);
  s.dtype = dtype_parse(lt_opt_string(L, 1, "dtype", "float32"));
  lua_getfield(L, 1, "shape");
  LT_CHECK(lua_istable(L, -1) && lt_is_list(L, -1),
           "qlora.dequantize_tensor: field shape (a list) is missing");
  for (size_t i = 1; i <= lua_objlen(L, -1); i++) {
    lua_rawgeti(L, -1, static_cast<int>(i));
    s.shape.push_back(lt_check_int(L, -1));
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  QuantConfig check;
  check.blocksize = s.blocksize;
  check.nested_blocksize = s.nested_blocksize;
  quant_config_check(check, "qlora.dequantize_tensor");
  const int64_t blocks = nf4::num_blocks(s.numel(), s.blocksize);
  LT_CHECK(s.absmax.numel() == blocks,
           "qlora.dequantize_tensor: absmax has " << s.absmax.numel() << " values, expected " << blocks);
  at::ScalarType dtype = lua_isnoneornil(L, 2) ? s.dtype : dtype_parse(luaL_checkstring(L, 2));
  lt_push<at::Tensor>(L, dequantize_4bit(packed, s, dtype));
  return 1;
}
LT_REGISTER("qlora.dequantize_tensor", l_qlora_dequantize_tensor);

}  // namespace

}  // namespace luatune
