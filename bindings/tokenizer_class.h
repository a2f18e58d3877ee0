// The Lua name of the Tokenizer userdata, shared by binding files that take a tokenizer.
#pragma once

#include <memory>

#include "bindings/lua_util.h"
#include "host/text/tokenizer.h"

namespace luatune {

template <>
struct LuaClass<std::shared_ptr<Tokenizer>> {
  static constexpr const char* name = "Tokenizer";
};

}  // namespace luatune
