// The Lua name of the Model userdata, shared by binding files that take a model (lora, train, ...),
// and the check they take it with.
#pragma once

#include <memory>

#include "bindings/lua_util.h"
#include "host/model/transformer.h"

namespace luatune {

LT_CLASS(std::shared_ptr<Model>, "Model");

// The Model at idx ("bad argument #1 to 'apply' (Model expected, got nil)" otherwise).
inline Model& lt_check_model(lua_State* L, int idx) {
  return *lt_check<std::shared_ptr<Model>>(L, idx);
}

}  // namespace luatune
