#!/usr/bin/env bash
# The fine-tuning recipes run with no data=: their default, data/example_chat.jsonl, is the example
# chat set the build writes beside the runner (scripts/lua/example_data.lua, docs/data.md), found from
# any working directory. lora_finetune on the tiny model, run from outside the checkout without
# LUATUNE_HOME, trains and evaluates on it exactly as with data= naming the built file.
# Usage, from the repository root: tests/recipes/test_example_data.sh RUNNER TINY_MODEL_DIR WORKDIR
set -uo pipefail
runner=$1 base=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
built=$(dirname "$runner")/data/example_chat.jsonl
small=(dtype=fp32 device=cpu batch_size=2 gradient_accumulation_steps=1 max_length=256 max_steps=2 warmup_steps=1)
# metrics.jsonl's training and eval numbers at each step, without the wall-clock fields.
numbers() {
  python3 -c 'import json,sys
for j in map(json.loads, open(sys.argv[1])):
    print({k: v for k, v in j.items() if k in ("step", "loss", "grad_norm", "tokens", "target_tokens", "eval_loss")})' "$1"
}

check "the build wrote the example set beside the runner" test -s "$built"
# From $work (not the checkout) and without LUATUNE_HOME, as a user runs it.
(cd "$work" && env -u LUATUNE_HOME "$runner" validate lora_finetune base_model="$base") >"$work/validate.log" 2>&1
check "validate: the default data resolves from another directory" test $? -eq 0
(cd "$work" && env -u LUATUNE_HOME "$runner" lora_finetune base_model="$base" output_dir="$work/default" "${small[@]}") \
  >"$work/default.log" 2>&1
check "lora_finetune with no data= exits 0" test $? -eq 0
check "its data is the recipe default" grep -qE '^  data += "data/example_chat.jsonl"$' "$work/default.log"
check "it trained 2 steps and evaluated on the held-out conversations" \
  test "$(grep -c '"eval_loss"' "$work/default/metrics.jsonl")-$(steps_logged "$work/default/metrics.jsonl")" = "1-1 2"
check "it wrote the adapter" test -f "$work/default/adapter/adapter_model.safetensors"
"$runner" lora_finetune base_model="$base" data="$built" output_dir="$work/named" "${small[@]}" >"$work/named.log" 2>&1
check "lora_finetune data=<the built file> exits 0" test $? -eq 0
default_numbers=$(numbers "$work/default/metrics.jsonl") named_numbers=$(numbers "$work/named/metrics.jsonl")
check "the default trains on exactly the built example set" \
  test -n "$default_numbers" -a "$default_numbers" = "$named_numbers"
finish
