#!/usr/bin/env bash
# Installs every system package luatune needs to build and test, by Debian 12 package name.
# Idempotent and non-interactive: packages already present are skipped, so a second run is a no-op.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev libgloo-dev          # LibTorch 1.13 (CPU) and its c10d Gloo backend
  libluajit-5.1-dev luajit          # the embedded Lua
  nlohmann-json3-dev                # JSON (configs, safetensors headers, W&B)
  libcurl4-openssl-dev              # W&B over HTTP
  libpcre2-dev                      # tokenizer pre-tokenizer regexes
  libgtest-dev libgmock-dev         # C++ unit tests
  libcpp-httplib-dev                # loopback HTTP server in tests
  libbenchmark-dev                  # bench/
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
