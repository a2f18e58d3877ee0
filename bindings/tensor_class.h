// The Lua name of at::Tensor, shared by every binding file that takes or returns tensors
// (bindings/torch.cpp registers the class; others push and check it through lua_util.h).
#pragma once

#include <ATen/ATen.h>

#include "bindings/lua_util.h"

namespace luatune {

template <>
struct LuaClass<at::Tensor> {
  static constexpr const char* name = "Tensor";
};

}  // namespace luatune
