#!/usr/bin/env bash
# recipes/wanda_sparsegpt.lua end to end: a tiny Llama (Llama 2 tokenizer, 32k vocabulary) is
# trained briefly on generated text (continued_pretraining), then pruned by magnitude, Wanda and
# SparseGPT at 50% and 2:4 with check=true (Wanda and SparseGPT must beat magnitude at 50%).
# Usage, from the repository root: tests/recipes/test_wanda_sparsegpt.sh RUNNER WORKDIR
# Skips (77) without the tokenizer scripts/setup.sh fetches.
set -euo pipefail
runner=$1 work=$2
source tests/recipes/lib.sh
need_llama2_tokenizer
rm -rf "$work" && mkdir -p "$work"

# Three kinds of short documents a 2-layer model learns quickly.
python3 tests/recipes/make_text_data.py "$work/text.jsonl"

trained_tiny_llama 2 60 5  # 2 layers, 60 steps, 5 of warm-up
"$runner" wanda_sparsegpt base_model="$work/cpt/model" data="$work/text.jsonl" output_dir="$work/prune" \
  device=cpu calibration_rows=16 max_length=128 check=true >"$work/prune.log" 2>&1 || { tail -20 "$work/prune.log"; exit 1; }
cat "$work/prune/results.md"
test -s "$work/prune/results.json"
