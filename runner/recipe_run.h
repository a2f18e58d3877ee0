// The Lua state a recipe runs in: LuaJIT with the standard libraries, every luatune module as a
// global, package.path reaching scripts/lua/ and the recipe's own directory, a traceback message
// handler around the recipe, and Ctrl-C / SIGTERM turned into a stop that saves (host/train/stop.h).
#pragma once

#include <string>

#include "host/cli/cli.h"
#include "host/core/error.h"  // the exit statuses kExitOk, kExitFailed, kExitUsage, kExitInterrupted

namespace luatune {

struct ConfigValue;

// Runs (or, for Verb::validate and Verb::plan, resolves the config of) the recipe at `path`; returns
// the exit status. `resolved`, when given, receives the resolved config.
int recipe_run(const std::string& path, const Command& cmd, ConfigValue* resolved = nullptr);

}  // namespace luatune
