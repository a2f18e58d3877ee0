#!/usr/bin/env bash
# Evaluation never costs a finished training (docs/data.md, "The held-out split"), end to end on the tiny
# model: lora_finetune on 16 records with the default eval_fraction = 0.02 (16 x 0.02 rounds to none held
# out) trains every step, saves its adapter and says the evaluation split was too small; `runner validate`
# prints the same line first, before anything is loaded. With evaluation on, the last step is evaluated
# and checkpointed with save_steps=0 (that the checkpoint comes first is pinned in
# tests/lua/test_recipe_helpers.lua). warmup_steps past max_steps warns in both.
# Usage, from the repository root: tests/recipes/test_eval_split.sh RUNNER TINY_MODEL_DIR WORKDIR
set -uo pipefail
runner=$1 base=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
head -16 tests/fixtures/data/chat_small.jsonl >"$work/d16.jsonl"
args=(base_model="$base" data="$work/d16.jsonl" max_steps=5 dtype=fp32 device=cpu batch_size=2
  gradient_accumulation_steps=1 max_length=96)
split_line="warning: data: eval_fraction = 0.02 holds out none of the 16 records (16 x 0.02 = 0.32 rounds to 0)"
warmup_line="warning: config: warmup_steps = 20 (recipe default) is more than max_steps = 5 (command line)"

"$runner" validate lora_finetune "${args[@]}" output_dir="$work/out" >"$work/validate.log" 2>&1
check "validate: exits 0" test $? -eq 0
check "validate: says the evaluation split is too small" grep -qF "$split_line" "$work/validate.log"
check "validate: warns for warmup_steps past max_steps" grep -qF "$warmup_line" "$work/validate.log"
check "validate: loads nothing" bash -c "! grep -q '^Model(' '$work/validate.log'"

"$runner" lora_finetune "${args[@]}" output_dir="$work/out" >"$work/run.log" 2>&1
check "run: exits 0" test $? -eq 0
check "run: saves its adapter" test -f "$work/out/adapter/adapter_model.safetensors"
check "run: trains every step" test "$(steps_logged "$work/out/metrics.jsonl")" = "1 2 3 4 5"
check "run: says the evaluation split is too small, as validate did" \
  test "$(grep '^warning: data:' "$work/run.log")" = "$(grep '^warning: data:' "$work/validate.log")"
check "run: the split line is there" grep -qF "$split_line" "$work/run.log"
check "run: warns for warmup_steps past max_steps at its start" grep -qF "$warmup_line" "$work/run.log"
check "run: no error, no traceback" bash -c "! grep -qe traceback -e '^error:' '$work/run.log'"
check "run: no eval lines" bash -c "! grep -q eval_loss '$work/out/metrics.jsonl'"

# Evaluation on (3 of 16 held out), no periodic checkpoints: the last step evaluated and checkpointed.
"$runner" lora_finetune "${args[@]}" output_dir="$work/eval" eval_fraction=0.2 eval_steps=100 save_steps=0 \
  warmup_steps=1 >"$work/eval.log" 2>&1
check "eval: exits 0" test $? -eq 0
check "eval: the final step evaluated" grep -q '"step":5,.*"eval_loss"' "$work/eval/metrics.jsonl"
check "eval: the final checkpoint" test -f "$work/eval/checkpoints/step-0000005/trainer.json"
check "eval: no warning" bash -c "! grep -q '^warning:' '$work/eval.log'"
finish
