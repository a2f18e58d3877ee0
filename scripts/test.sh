#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: C++ units, Lua module tests, CLI checks and every
# shipped recipe. Extra arguments go to ctest, e.g. scripts/test.sh -R lua_torch (one test) or
# scripts/test.sh -L unit (one label). Tests labelled gpu skip themselves without CUDA.
# Prints the free disk space before and after the tests and the most the suite took at once (every
# 5 s): a CI machine's disk is not ours to size (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
build=${LUATUNE_BUILD_DIR:-build}
free_mib() { df -Pm "$build" | awk 'NR == 2 {print $4}'; }
before=$(free_mib)
echo "disk: $before MiB free under $build before the tests"
low=$(mktemp)
echo "$before" >"$low"
(while sleep 5; do f=$(free_mib); [ "$f" -lt "$(cat "$low")" ] && echo "$f" >"$low"; done) &
sampler=$!
trap 'kill "$sampler" 2>/dev/null; rm -f "$low"' EXIT
rc=0
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@" || rc=$?
echo "disk: $(free_mib) MiB free after the tests; the most the suite took at once: $((before - $(cat "$low"))) MiB"
exit "$rc"
