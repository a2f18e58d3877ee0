#!/usr/bin/env bash
# bench/ddp_scaling.sh [RUNNER] [MODEL_DIR] [ROWS] [STEPS]: data-parallel overhead on this machine.
# The same global batch (ROWS rows of 48 tokens) trained by 1 process with every CPU thread, and by
# 2 ranks (runner --nproc 2, Gloo) with half the rows and half the threads each: median tokens/s
# (global) over the steps after the first, and the ratio. On one CPU the ranks share the cores, so
# this measures what the gradient all-reduce and the extra process cost, not a speed-up.
# The smallest run (the smoke test's): bench/ddp_scaling.sh build/runner build/tmp/tiny-llama 2 2
set -euo pipefail
runner=${1:-build/runner} model=${2:-build/tmp/tiny-llama} rows=${3:-8} steps=${4:-12}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
median() { grep -o 'tokens/s [0-9.]*' | awk 'NR > 1 {print $2}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
logged() {  # logged LOG COMMAND...: COMMAND's output in LOG; on failure, the log's end
  local log=$1
  shift
  "$@" >"$log" 2>&1 || { echo "ddp_scaling: failed ($*):" >&2; tail -20 "$log" >&2; exit 1; }
}
logged "$work/one.log" "$runner" tests/dist/ddp_train.lua base="$model" size="$rows" steps="$steps"
logged "$work/two.log" "$runner" --nproc 2 tests/dist/ddp_train.lua base="$model" size=$((rows / 2)) steps="$steps"
one=$(median <"$work/one.log")
two=$(grep -v '^\[rank' "$work/two.log" | median)
echo "1 process, $rows rows a step: $one tokens/s"
echo "2 ranks, $((rows / 2)) rows each: $two tokens/s"
python3 -c "print('2 ranks / 1 process: %.2fx' % ($two / $one))"
