#!/usr/bin/env bash
# tests/reference/test_llama_ref.sh [WORKDIR]: the llama.cpp reference harness
# (tests/reference/llama: node-llama-cpp's prebuilt llama.cpp) on a tiny random GGUF Llama written by
# make_tiny_gguf.py: --info, tokenization, deterministic greedy ids. Exit 77 (skip) without node.
set -u
if ! command -v node >/dev/null 2>&1; then
  echo "SKIP: node is not installed (scripts/setup.sh installs nodejs and the reference packages)"
  exit 77
fi
dir=$(cd "$(dirname "$0")" && pwd)/llama
if [ ! -d "$dir/node_modules/node-llama-cpp" ]; then
  echo "FAIL: $dir/node_modules is missing: run scripts/setup.sh"
  exit 1
fi
export NODE_LLAMA_CPP_SKIP_DOWNLOAD=true LLAMA_THREADS=${LLAMA_THREADS:-1}
exec "${LUATUNE_PYTHON:-python3}" "$dir/test_harness.py" "$@"  # the environment's python (CTest sets it)
