// Lua objects that extend a Trainer (pruners, distillers) are passed to train.new{hooks = {...}}.
// Each such class registers a getter when its module opens; train.new asks each getter in turn.
#pragma once

#include <lua.hpp>

#include <memory>

namespace luatune {

class TrainerHook;

// Returns the hook held by the userdata at idx, or nullptr when it is not of the getter's class.
using HookGetter = std::shared_ptr<TrainerHook> (*)(lua_State* L, int idx);
void lt_register_hook_getter(HookGetter getter);
// The hook at idx, or nullptr when no registered class holds one.
std::shared_ptr<TrainerHook> lt_test_hook(lua_State* L, int idx);

}  // namespace luatune
