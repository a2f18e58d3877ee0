#!/usr/bin/env bash
# Runs the safetensors load benchmark with a 1.5 GB bf16 checkpoint in a temporary directory
# (deleted afterwards). Builds nothing: build first with scripts/build.sh. Extra arguments go to
# the program, e.g. --path /some/checkpoint to time an existing one, --gb 2, --reps 5.
set -euo pipefail
cd "$(dirname "$0")/.."
exe=${LUATUNE_BUILD_DIR:-build}/bench/bench_safetensors
if [ ! -x "$exe" ]; then
  echo "run_safetensors.sh: $exe not found; build first (scripts/build.sh)" >&2
  exit 1
fi
exec "$exe" --gb 1.5 --reps 3 "$@"
