#!/usr/bin/env bash
# Configures and builds luatune into build/ (or $LUATUNE_BUILD_DIR). Extra arguments go to CMake's
# configure step, e.g. scripts/build.sh -DCMAKE_PREFIX_PATH=/path/to/libtorch -DLUATUNE_DEPS_PREFIX=/opt/deps
set -euo pipefail
cd "$(dirname "$0")/.."
build=${LUATUNE_BUILD_DIR:-build}
generator=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
cmake -S . -B "$build" "${generator[@]}" "$@"
cmake --build "$build" -j "${LUATUNE_JOBS:-$(nproc)}"
