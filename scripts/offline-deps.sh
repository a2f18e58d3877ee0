#!/usr/bin/env bash
# scripts/offline-deps.sh DIR: downloads (apt-get download) the Debian 12 packages of every
# non-Torch dependency, with the libraries they load in turn, into DIR, for a GPU host without
# network. The C library, the compiler's runtime and other base packages every Linux host has are
# left out (their host versions must be the ones used). On that host, scripts/gpu-build.sh DIR
# unpacks them into DIR/prefix, builds against the Python environment's CUDA LibTorch and runs the
# tests; by hand:
#   for d in DIR/*.deb; do dpkg -x "$d" DIR/prefix; done
#   scripts/build.sh -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')" \
#                    -DLUATUNE_DEPS_PREFIX=DIR/prefix
#   export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:DIR/prefix/usr/lib/x86_64-linux-gnu   # after the host's own
set -euo pipefail
dir=${1:?usage: scripts/offline-deps.sh DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)  # before the cd into $dir below
packages=(
  libluajit-5.1-dev libluajit-5.1-2 libluajit-5.1-common
  libtcmalloc-minimal4  # the runner's malloc (LUATUNE_ALLOCATOR=tcmalloc), linked by its .so.4 name:
                        # libgoogle-perftools-dev would bring libunwind-dev and, through its
                        # alternatives, four LLVM libunwind packages
  nlohmann-json3-dev
  libcurl4-openssl-dev libcurl4
  libpcre2-dev libpcre2-8-0
  libutf8proc-dev libutf8proc2
  libyaml-cpp-dev libyaml-cpp0.7
  libgtest-dev libgmock-dev
  libcpp-httplib-dev
  libbenchmark-dev libbenchmark1debian
  libgloo-dev           # headers only: ProcessGroupGloo.hpp includes them (the wheel has Gloo built in)
)
# Base packages the host provides itself (and must: mixing C libraries breaks programs).
base='^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libgcc-s1|libstdc\+\+6|gcc-12-base|libcrypt1|libcrypt-dev|libnsl2|libnsl-dev|libtirpc3|libtirpc-dev|libtirpc-common|rpcsvc-proto|zlib1g|libzstd1|libffi8|libgmp10|libdb5.3)$'
closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
            --no-enhances "${packages[@]}" | grep '^[a-z0-9]' | sort -u | grep -Ev "$base")
cd "$dir"
# shellcheck disable=SC2086
apt-get download $closure
ls -1 "$dir"/*.deb | wc -l | xargs echo "offline-deps: packages in $dir:"
# The chat-template engine (host/text/jinja, Rust): the GPU host has no cargo and no crates.io, so it is
# built here, stripped of debug info (about 6 MB), and gpu-build.sh links it (-DLUATUNE_JINJA_LIBRARY).
cargo=""
for c in "$HOME/.cargo/bin/cargo" cargo /usr/bin/cargo; do
  if v=$("$c" --version 2>/dev/null) && [[ $v =~ ^cargo\ 1\.([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -ge 70 ]; then cargo=$c; break; fi
done
[ -n "$cargo" ] || { echo "offline-deps: no cargo of Rust 1.70+ (scripts/setup.sh installs one)"; exit 1; }
CARGO_TARGET_DIR="$dir/.jinja-target" "$cargo" build --release --locked --quiet --manifest-path "$root/host/text/jinja/Cargo.toml"
strip --strip-debug -o "$dir/libluatune_jinja.a" "$dir/.jinja-target/release/libluatune_jinja.a"
rm -rf "$dir/.jinja-target"
echo "offline-deps: $dir/libluatune_jinja.a ($(du -h "$dir/libluatune_jinja.a" | cut -f1))"
