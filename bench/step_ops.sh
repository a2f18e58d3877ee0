#!/usr/bin/env bash
# The ops of one training step, on the CPU: the GPU benchmark's luatune side (bench/gpu/train_bench.lua)
# at Llama 3.2 1B's structure (shape llama-3.2-1b-ops: its 16 layers, heads and vocabulary at a small
# width; the count depends on the structure, not the width), bf16 with fp32 master weights as on the
# GPU, full fine-tuning and LoRA r 16, layers recomputed, two steps traced with profile=DIR after one
# warm-up step. Prints aten ops per step (each at least one kernel launch on a GPU) per phase, and
# the ops that make a GPU's host wait. A regression in launches shows here without a GPU.
#   bench/step_ops.sh [RUNNER] [WORKDIR]      (docs/profiling.md, "Counting a step's ops")
# SHAPE (llama-3.2-1b-ops), SEQ (128), BATCH (4) (environment): another shapes.json shape and batch;
# the smallest run (the smoke test's): SHAPE=tiny SEQ=16 BATCH=1 bench/step_ops.sh build/runner DIR
set -euo pipefail
cd "$(dirname "$0")/.."
runner=${1:-build/runner}
work=${2:-${TMPDIR:-/tmp}/luatune-step-ops}
python=${LUATUNE_PYTHON:-python3}
rm -rf "$work" && mkdir -p "$work"
for method in full lora; do
  "$runner" bench/gpu/train_bench.lua shape="${SHAPE:-llama-3.2-1b-ops}" method="$method" seq="${SEQ:-128}" \
    batch="${BATCH:-4}" steps=2 warmup=1 \
    device=cpu dtype=bf16 out="$work/$method.json" profile="$work/$method" >"$work/$method.log" 2>&1 ||
    { cat "$work/$method.log" >&2; exit 1; }
done
"$python" scripts/gpu/trace_summary.py "$work/full" "$work/lora"
