#!/usr/bin/env bash
# scripts/gpu-build.sh [DEPS_DIR] [BUILD_DIR]: builds luatune on a CUDA machine without network and
# runs the whole test suite there, `gpu` tests included. Uses the CUDA LibTorch of the Python
# environment (python3 -c 'import torch'), nvcc from the CUDA toolkit (the .cu kernels), and the
# Debian packages scripts/offline-deps.sh gathered into DEPS_DIR (default .deps), unpacked into
# DEPS_DIR/prefix. The host's own libraries come first at run time; the unpacked ones only fill in
# what the host lacks (LuaJIT, utf8proc, cpp-httplib, ...).
#   scripts/offline-deps.sh .deps        # on a networked Debian 12 machine
#   scripts/gpu-build.sh .deps build-gpu # on the GPU host
# Extra environment: LUATUNE_CTEST_ARGS (e.g. "-L gpu"), CUDAARCHS (default 90 on Hopper),
# LUATUNE_SKIP_TESTS=1 (build only: scripts/gpu-validate.sh runs the tests itself, each with a time cap),
# LUATUNE_BUILD_TARGETS (e.g. "runner": only those targets; default all).
set -euo pipefail
cd "$(dirname "$0")/.."
deps=$(cd "${1:-.deps}" && pwd) build=${2:-build-gpu}
prefix=$deps/prefix
if [ ! -d "$prefix/usr" ]; then
  mkdir -p "$prefix"
  for d in "$deps"/*.deb; do dpkg -x "$d" "$prefix"; done
fi
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
arch_lib=$prefix/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$torch_lib:$arch_lib
export PATH=$PATH:/usr/local/cuda/bin
echo "gpu-build: LibTorch $(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)')"
generator=()
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
# LUATUNE_VENV: the host's Python environment, whose nvidia/* wheels (cuDNN, NCCL, cudart) CMake puts
# on the executables' RPATH, and whose nvcc it uses when the environment has one (else the toolkit's).
venv=$(python3 -c 'import sys; print(sys.prefix)')
# The chat-template engine, built by scripts/offline-deps.sh (no cargo or crates.io here).
jinja=()
if [ -f "$deps/libluatune_jinja.a" ]; then jinja=(-DLUATUNE_JINJA_LIBRARY="$deps/libluatune_jinja.a"); fi
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix" \
  -DLUATUNE_VENV="$venv" -DLUATUNE_DEPS_PREFIX="$prefix" -DCMAKE_CUDA_ARCHITECTURES="${CUDAARCHS:-90}" "${jinja[@]}"
# Keep going past a failed file: device time is short, so one build shows every error at once.
keep_going=(-- -k)
if grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja' "$build/CMakeCache.txt"; then keep_going=(-- -k 0); fi
# shellcheck disable=SC2086
cmake --build "$build" -j "$(nproc)" ${LUATUNE_BUILD_TARGETS:+--target $LUATUNE_BUILD_TARGETS} "${keep_going[@]}"
"$build/runner" --version
if [ "${LUATUNE_SKIP_TESTS:-0}" = 1 ]; then exit 0; fi
# shellcheck disable=SC2086
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure ${LUATUNE_CTEST_ARGS:-}
