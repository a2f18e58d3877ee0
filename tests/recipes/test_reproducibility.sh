#!/usr/bin/env bash
# Reproducibility: each training recipe family, run twice with the same arguments on the tiny model
# (fixture recipe_tiny_llama), writes the same metrics.jsonl, every loss, grad_norm, eval and pruning
# number bit for bit, wall-clock fields aside (tests/recipes/same_rows.py). LoRA, QLoRA and DPO draw
# LoRA dropout masks, llama31_sheared its hard-concrete mask samples, from LibTorch's global generator,
# which only the runner's seeding makes repeat (host/core/seed.h, docs/reproducibility.md); full
# fine-tuning draws nothing from it today and guards the rest of the path.
# Usage, from the repository root: tests/recipes/test_reproducibility.sh RUNNER TINY_MODEL_DIR WORKDIR
set -uo pipefail
runner=$1 base=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
python3 tests/recipes/make_preference_data.py "$work/prefs.jsonl" "$work/held.jsonl" 40 10 0
python3 tests/recipes/make_text_data.py "$work/text.jsonl" 200
chat=tests/fixtures/data/chat_small.jsonl
small=(base_model="$base" dtype=fp32 device=cpu max_length=64)

# twice NAME RECIPE ARGS...: RECIPE twice, into NAME-a and NAME-b, then their metrics compared.
twice() {
  local name=$1 recipe=$2 run
  shift 2
  for run in a b; do
    "$runner" "$recipe" output_dir="$work/$name-$run" "${small[@]}" "$@" >"$work/$name-$run.log" 2>&1
    check "$name: run $run exits 0" test $? -eq 0
  done
  check "$name: the same metrics twice" bash -c 'python3 tests/recipes/same_rows.py "$1" "$2" >"$3" 2>&1' _ \
    "$work/$name-a/metrics.jsonl" "$work/$name-b/metrics.jsonl" "$work/$name-compare.log"
}

train=(data="$chat" max_steps=3 batch_size=2 gradient_accumulation_steps=1 eval_steps=3 save_steps=0)
twice full full_finetune "${train[@]}"
twice lora lora_finetune "${train[@]}" lora.dropout=0.1
twice qlora qlora_finetune "${train[@]}" lora.dropout=0.1
twice dpo dpo data="$work/prefs.jsonl" eval_data="$work/held.jsonl" max_steps=3 batch_size=2 gradient_accumulation_steps=1 \
  eval_steps=3 save_steps=0 lora.dropout=0.1
# Sheared-LLaMA: one mask-learning step (a hard-concrete sample) and one recovery step with distillation.
twice sheared llama31_sheared data="$work/text.jsonl" format=text max_steps=2 batch_size=2 \
  gradient_accumulation_steps=1 eval_steps=100 eval_batches=1 wandb_project=

# same_rows.py tells runs apart: another seed gives other numbers.
"$runner" lora_finetune output_dir="$work/lora-seed1" "${small[@]}" "${train[@]}" lora.dropout=0.1 seed=1 \
  >"$work/lora-seed1.log" 2>&1
check "lora: seed=1 gives other numbers" bash -c '! python3 tests/recipes/same_rows.py "$1" "$2" >/dev/null 2>&1' _ \
  "$work/lora-a/metrics.jsonl" "$work/lora-seed1/metrics.jsonl"
finish
