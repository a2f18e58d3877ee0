#!/usr/bin/env bash
# scripts/offline-deps.sh DIR: downloads (apt-get download) the Debian 12 packages of every
# non-Torch dependency into DIR, for a GPU host without network. On that host:
#   for d in DIR/*.deb; do dpkg -x "$d" /opt/deps; done
#   scripts/build.sh -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')" \
#                    -DLUATUNE_DEPS_PREFIX=/opt/deps
#   export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
set -euo pipefail
dir=${1:?usage: scripts/offline-deps.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
packages=(
  libluajit-5.1-dev libluajit-5.1-2 libluajit-5.1-common
  nlohmann-json3-dev
  libcurl4-openssl-dev libcurl4
  libpcre2-dev libpcre2-8-0
  libutf8proc-dev libutf8proc2
  libgtest-dev libgmock-dev
  libcpp-httplib-dev
  libbenchmark-dev libbenchmark1debian
)
cd "$dir"
apt-get download "${packages[@]}"
ls -1 "$dir"/*.deb | wc -l | xargs echo "offline-deps: packages in $dir:"
