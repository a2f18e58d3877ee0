#!/usr/bin/env bash
# bench/qlora_vs_lora.sh: QLoRA (NF4 + double quantization) against LoRA on a bf16 base, same
# random Llama-shaped model, same LoRA (r 16, all linears), layer checkpointing, same batch: weight
# memory, peak memory and tokens/s, each method in its own process, with the QLoRA/LoRA ratios.
# Where Python (PYTHON, default the environment scripts/setup.sh makes, .venv) has transformers + peft,
# HF's LoRA on the same shape and settings joins the table (bench/hf_qlora_peer.py), and on a GPU HF's
# QLoRA too where bitsandbytes is installed; the output says which rows were skipped.
#   bench/qlora_vs_lora.sh [RUNNER] [SHAPE tiny|small|1b|8b] [DEVICE cpu|cuda] [LENGTH] [WORKDIR]
# STEPS (environment): both sides' timed steps (luatune 10, HF 6 unless given); WARMUP: luatune's
# warm-up steps (2; HF's are 2). The smallest run (the smoke test's):
#   STEPS=1 WARMUP=1 bench/qlora_vs_lora.sh build/runner tiny cpu 16 DIR
set -euo pipefail
runner=${1:-build/runner} shape=${2:-small} device=${3:-cpu} length=${4:-256} work=${5:-/tmp/luatune_bench_qlora}
py=${PYTHON:-${LUATUNE_VENV:-.venv}/bin/python3}
[ -x "$py" ] || py=python3
mkdir -p "$work"
model=$work/model-$shape
[ -f "$model/config.json" ] || "$runner" bench/qlora_step.lua make="$model" shape="$shape" >/dev/null
steps=()
[ -z "${STEPS:-}" ] || steps+=(steps="$STEPS")
[ -z "${WARMUP:-}" ] || steps+=(warmup="$WARMUP")
rows=()
for method in lora qlora; do
  out=$("$runner" bench/qlora_step.lua model="$model" shape="$shape" method=$method device="$device" \
          length="$length" "${steps[@]}" 2>&1) || { echo "qlora_vs_lora: luatune $method failed:" >&2; tail -20 <<<"$out" >&2; exit 1; }
  rows+=("$(grep '^{' <<<"$out")")
done
note=""
if "$py" -c 'import torch, transformers, peft' 2>/dev/null; then
  methods=(lora)
  if [ "$device" = cpu ]; then
    note="HF QLoRA needs CUDA (bitsandbytes): no HF QLoRA row on the CPU"
  elif "$py" -c 'import bitsandbytes' 2>/dev/null; then
    methods+=(qlora)
  else
    note="bitsandbytes is not installed: no HF QLoRA row"
  fi
  for method in "${methods[@]}"; do
    rows+=("$("$py" bench/hf_qlora_peer.py "$model" $method "$length" "$device" ${STEPS:-6} 2>"$work/hf-$method.log" |
              grep '^{' || echo '{"method": "hf-'$method'", "error": true}')")
  done
else
  note="$py has no transformers + peft: HF rows skipped"
fi
printf '%s\n' "${rows[@]}" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
print("| method | device | base weights GB | peak GB | tokens/s |")
print("|---|---|---|---|---|")
for r in rows:
    if r.get("error"): print("| %s | failed | | | |" % r["method"]); continue
    print("| %s | %s | %.3f | %.3f | %.1f |" % (r["method"], r["device"], r["weights_gb"], r["peak_gb"], r["tokens_per_s"]))
by = {r["method"]: r for r in rows if not r.get("error")}
for a, b in (("qlora", "lora"), ("hf-qlora", "hf-lora"), ("lora", "hf-lora"), ("qlora", "hf-qlora")):
    if a in by and b in by:
        print("%s / %s: weights %.2fx, peak %.2fx, tokens/s %.2fx" % (a, b, by[a]["weights_gb"] / by[b]["weights_gb"],
              by[a]["peak_gb"] / by[b]["peak_gb"], by[a]["tokens_per_s"] / by[b]["tokens_per_s"]))
'
[ -z "$note" ] || echo "$note"
