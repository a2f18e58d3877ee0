#!/usr/bin/env bash
# bench/ddp_scaling.sh [RUNNER] [MODEL_DIR] [ROWS] [STEPS]: data-parallel overhead on this machine.
# The same global batch (ROWS rows of 48 tokens) trained by 1 process with every CPU thread, and by
# 2 ranks (runner --nproc 2, Gloo) with half the rows and half the threads each: median tokens/s
# (global) over the steps after the first, and the ratio. On one CPU the ranks share the cores, so
# this measures what the gradient all-reduce and the extra process cost, not a speed-up.
set -euo pipefail
runner=${1:-build/runner} model=${2:-build/tmp/tiny-llama} rows=${3:-8} steps=${4:-12}
median() { grep -o 'tokens/s [0-9.]*' | awk 'NR > 1 {print $2}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
one=$("$runner" tests/dist/ddp_train.lua base="$model" size="$rows" steps="$steps" 2>&1 | median)
two=$("$runner" --nproc 2 tests/dist/ddp_train.lua base="$model" size=$((rows / 2)) steps="$steps" 2>&1 |
      grep -v '^\[rank' | median)
echo "1 process, $rows rows a step: $one tokens/s"
echo "2 ranks, $((rows / 2)) rows each: $two tokens/s"
python3 -c "print('2 ranks / 1 process: %.2fx' % ($two / $one))"
