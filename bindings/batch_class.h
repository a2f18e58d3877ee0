// The Lua name of a training Batch (host/data/batch.h), shared by the data and train modules.
#pragma once

#include "bindings/lua_util.h"
#include "host/data/batch.h"

namespace luatune {

template <>
struct LuaClass<Batch> {
  static constexpr const char* name = "Batch";
};

}  // namespace luatune
