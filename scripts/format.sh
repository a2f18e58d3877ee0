#!/usr/bin/env bash
# scripts/format.sh [--check]: formats every C++/CUDA source in the tree with its .clang-format, or,
# with --check, lists the files that differ from it and exits 1 (CTest's format_check runs this).
# The tree is formatted with clang-format 14 (Debian 12's, installed by scripts/setup.sh); another
# major version formats some constructs differently, so --check then skips (exit 77) rather than fail.
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [ "${1:-}" = --check ]; then check=1; fi
if ! command -v clang-format >/dev/null 2>&1; then
  echo "format: clang-format is not installed (scripts/setup.sh installs it)"
  exit 77
fi
major=$(clang-format --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
if [ "$check" = 1 ] && [ "$major" != 14 ]; then
  echo "format: clang-format $major, not 14: the check is only meaningful with the version the tree uses"
  exit 77
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -co --exclude-standard -- '*.cpp' '*.h' '*.cu' '*.cuh' '*.hpp' | grep -v '^third_party/')
else
  mapfile -t files < <(find host bindings runner tests bench \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' \
                         -o -name '*.cuh' -o -name '*.hpp' \) -not -path '*/node_modules/*' | sort)
fi
if [ "$check" = 0 ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "format: ${#bad[@]} of ${#files[@]} files differ from .clang-format (run scripts/format.sh):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "format: ${#files[@]} files match .clang-format"
