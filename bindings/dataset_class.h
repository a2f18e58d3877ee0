// The Lua name of a Dataset (host/data/dataset.h), shared by the data module (which registers it)
// and the train module (trainer:evaluate takes one).
#pragma once

#include <memory>

#include "bindings/lua_util.h"
#include "host/data/dataset.h"

namespace luatune {

LT_CLASS(std::shared_ptr<Dataset>, "Dataset");

}  // namespace luatune
