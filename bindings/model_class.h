// The Lua name of the Model userdata, shared by binding files that take a model (lora, train, ...).
#pragma once

#include <memory>

#include "bindings/lua_util.h"
#include "host/model/transformer.h"

namespace luatune {

template <>
struct LuaClass<std::shared_ptr<Model>> {
  static constexpr const char* name = "Model";
};

}  // namespace luatune
