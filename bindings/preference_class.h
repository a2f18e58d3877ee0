// The Lua name of a preference set (host/data/preference.h), shared by the data module (which
// registers it) and the train module (trainer:evaluate and train.reference_logprobs take one).
#pragma once

#include <memory>

#include "bindings/lua_util.h"
#include "host/data/preference.h"

namespace luatune {

LT_CLASS(std::shared_ptr<PreferenceDataset>, "PreferenceSet");

}  // namespace luatune
