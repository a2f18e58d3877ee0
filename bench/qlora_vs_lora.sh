#!/usr/bin/env bash
# bench/qlora_vs_lora.sh: QLoRA (NF4 + double quantization) against LoRA on a bf16 base, same
# random Llama-shaped model, same LoRA (r 16, all linears), layer checkpointing, same batch: weight
# memory, peak memory and tokens/s, each method in its own process, with the QLoRA/LoRA ratios.
# On a GPU where Python has transformers + peft, HF's LoRA on the same shape and settings joins the
# table (bench/hf_qlora_peer.py), and HF's QLoRA too where bitsandbytes is installed; the output
# says which rows were skipped.
#   bench/qlora_vs_lora.sh [RUNNER] [SHAPE small|1b|8b] [DEVICE cpu|cuda] [LENGTH] [WORKDIR]
set -euo pipefail
runner=${1:-build/runner} shape=${2:-small} device=${3:-cpu} length=${4:-256} work=${5:-/tmp/luatune_bench_qlora}
mkdir -p "$work"
model=$work/model-$shape
[ -f "$model/config.json" ] || "$runner" bench/qlora_step.lua make="$model" shape="$shape" >/dev/null
rows=()
for method in lora qlora; do
  rows+=("$("$runner" bench/qlora_step.lua model="$model" shape="$shape" method=$method device="$device" \
            length="$length" 2>&1 | grep '^{')")
done
note=""
if [ "$device" != cpu ] && python3 -c 'import torch, transformers, peft' 2>/dev/null; then
  methods=(lora)
  if python3 -c 'import bitsandbytes' 2>/dev/null; then methods+=(qlora); else note="bitsandbytes is not installed: no HF QLoRA row"; fi
  for method in "${methods[@]}"; do
    rows+=("$(python3 bench/hf_qlora_peer.py "$model" $method "$length" 2>/dev/null | grep '^{' || echo '{"method": "hf-'$method'", "error": true}')")
  done
else
  note="HF transformers + peft on a GPU: not available here, HF rows skipped"
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
