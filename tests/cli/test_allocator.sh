#!/usr/bin/env bash
# tests/cli/test_allocator.sh RUNNER ALLOCATOR: the runner calls the malloc the build chose
# (LUATUNE_ALLOCATOR after its fallback, CMakeLists.txt). `runner --version` names the library that
# defines the malloc the dynamic linker resolved, so a linker that dropped tcmalloc, or a glibc
# build that skipped its tuning, fails here.
set -u
runner=${1:?usage: test_allocator.sh path/to/runner ALLOCATOR}
allocator=${2:?usage: test_allocator.sh path/to/runner tcmalloc|jemalloc|glibc|system}
failed=0 checks=0

source tests/cli/lib.sh

check version 0 "$runner" --version
case $allocator in
  tcmalloc | jemalloc) expect_out "malloc $allocator" ;;
  glibc) expect_out "malloc glibc (tuned: M_MMAP_MAX 0" ;;
  system) expect_out "malloc glibc"; refute_out "tuned" ;;
  *) echo "FAIL: unknown allocator '$allocator'"; failed=$((failed + 1)) ;;
esac
cli_finish
