// The Lua name of a training Batch (host/data/batch.h), shared by the data and train modules.
#pragma once

#include "bindings/lua_util.h"
#include "host/data/batch.h"

namespace luatune {

LT_CLASS(Batch, "Batch");

}  // namespace luatune
