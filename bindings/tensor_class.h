// The Lua name of at::Tensor, shared by every binding file that takes or returns tensors
// (bindings/torch.cpp registers the class; others push and check it through lua_util.h), and the
// table of named tensors several of them return.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "bindings/lua_util.h"

namespace luatune {

LT_CLASS(at::Tensor, "Tensor");

// Pushes a table of tensors by name: the parameters Model:parameters and lora.parameters return
// ({["model.layers.0.self_attn.q_proj.weight"] = Tensor, ...}).
inline void lt_push_named_tensors(lua_State* L,
                                  const std::vector<std::pair<std::string, at::Tensor*>>& named) {
  lua_createtable(L, 0, static_cast<int>(named.size()));
  for (const auto& [name, t] : named) {
    lt_push<at::Tensor>(L, *t);
    lua_setfield(L, -2, name.c_str());
  }
}

}  // namespace luatune
