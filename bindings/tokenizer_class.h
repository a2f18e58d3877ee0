// The Lua name of a loaded tokenizer, shared by every binding file that takes or returns one
// (bindings/tokenizer.cpp registers the class; others push and check it through lua_util.h).
#pragma once

#include <memory>

#include "bindings/lua_util.h"
#include "host/text/tokenizer.h"

namespace luatune {

LT_CLASS(std::shared_ptr<Tokenizer>, "Tokenizer");

}  // namespace luatune
