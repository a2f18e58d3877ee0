// runner: luatune's executable. Parses the command line (host/runner/cli.cpp) and carries out
// the verb: run or validate a recipe, list or copy shipped recipes, print help or versions.
#include <luajit.h>

#include <cstdio>
#include <string>
#include <vector>

#include "host/core/device.h"
#include "host/core/error.h"
#include "host/core/version.h"
#include "host/runner/cli.h"
#include "host/runner/recipes.h"
#include "runner/lua_host.h"

using namespace luatune;

static int run_command(const Command& cmd) {
  switch (cmd.verb) {
    case Command::Verb::help:
      std::fputs(cli_help().c_str(), stdout);
      return kExitOk;
    case Command::Verb::version:
      std::fputs(version_report(LUAJIT_VERSION).c_str(), stdout);
      return kExitOk;
    case Command::Verb::ls: {
      auto recipes = recipe_list();
      size_t width = 0;
      for (const auto& r : recipes) width = std::max(width, r.name.size());
      for (const auto& r : recipes)
        std::printf("%-*s  %s\n", static_cast<int>(width), r.name.c_str(), r.description.c_str());
      if (recipes.empty())
        std::printf("no recipes found (looked in '%s/recipes'; set LUATUNE_HOME)\n", luatune_home().c_str());
      return kExitOk;
    }
    case Command::Verb::cp:
      std::printf("copied to %s\n", recipe_copy(cmd.recipe, cmd.dest).c_str());
      return kExitOk;
    case Command::Verb::run:
    case Command::Verb::validate:
      return lua_host_run(recipe_resolve(cmd.recipe), cmd);
  }
  return kExitFailed;
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF,
               0);  // progress lines appear as they are printed, in order with stderr
  try {
    cpu_threads_init();
    return run_command(cli_parse(std::vector<std::string>(argv + 1, argv + argc)));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitFailed;
  }
}
