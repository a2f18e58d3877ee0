#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: C++ units, Lua module tests, CLI checks and every
# shipped recipe. Extra arguments go to ctest, e.g. scripts/test.sh -R lua_torch (one test) or
# scripts/test.sh -L unit (one label). Tests labelled gpu skip themselves without CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
ctest --test-dir "${LUATUNE_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
