// The Lua form of 4-bit quantization settings, shared by models.load{quantize = ...} and the qlora
// module (bindings/qlora.cpp defines it).
#pragma once

#include <lua.hpp>

#include <string>
#include <vector>

#include "host/quant/quant.h"

namespace luatune {

// Reads the value at `idx`: "nf4" / "fp4" / true (nf4) / false or "" (returns false: no
// quantization) / {quant_type = "nf4", blocksize = 64, double_quant = true, skip = {...}}.
// Errors name `where`.
bool lt_quant_options(lua_State* L, int idx, const std::string& where, QuantConfig* config,
                      std::vector<std::string>* skip);

}  // namespace luatune
