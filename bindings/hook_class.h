// Lua objects that extend a Trainer (pruners, distillers) are passed to train.new{hooks = {...}}.
// Each such class registers a getter when its module opens; train.new asks each getter in turn.
#pragma once

#include <lua.hpp>

#include <memory>
#include <string>

#include "bindings/lua_util.h"

namespace luatune {

class TrainerHook;

// Returns the hook held by the userdata at idx, or nullptr when it is not of the getter's class.
using HookGetter = std::shared_ptr<TrainerHook> (*)(lua_State* L, int idx);
void lt_register_hook_getter(HookGetter getter);
// The hook at idx, or nullptr when no registered class holds one.
std::shared_ptr<TrainerHook> lt_test_hook(lua_State* L, int idx);

// Registers a hook class: lt_register_class, and a getter that finds the hook in a userdata
// holding a Ptr (a std::shared_ptr to a TrainerHook). LT_REGISTER_HOOK_CLASS("distill",
// DistillerPtr, describe_distiller) does it each time the module opens.
template <class Ptr, std::string (*Describe)(const Ptr&)>
void lt_register_hook_class(lua_State* L) {
  lt_register_class<Ptr, Describe>(L);
  lt_register_hook_getter([](lua_State* L, int idx) -> std::shared_ptr<TrainerHook> {
    Ptr* p = lt_test<Ptr>(L, idx);
    return p ? *p : nullptr;
  });
}

}  // namespace luatune

#define LT_REGISTER_HOOK_CLASS(module, Ptr, Describe) \
  LT_ON_OPEN(module, (::luatune::lt_register_hook_class<Ptr, Describe>))
