#!/usr/bin/env bash
# End-to-end runs of the training recipes on a tiny model (written by tiny_model, fixture
# recipe_tiny_llama) with the small fixture datasets, checking what each writes: metrics lines,
# checkpoints, the PEFT adapter / HF model, and that resume=true continues where a run stopped.
# Usage, from the repository root: tests/recipes/test_training_recipes.sh RUNNER TINY_MODEL_DIR WORKDIR
set -uo pipefail
runner=$1 base=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
common=(dtype=fp32 device=cpu batch_size=2 gradient_accumulation_steps=2 max_length=96 eval_steps=2 eval_fraction=0.1)

# resumes_to_the_same TAG LAST RECIPE ARGS...: after a straight run into $out, keeps its adapter's bytes,
# removes its step-LAST checkpoint and the adapter (as if it had died after the checkpoint before),
# runs RECIPE ARGS... resume=true (log $work/TAG_b.log) and checks that it exits 0 with the same bytes.
resumes_to_the_same() {
  local tag=$1 last=$2 recipe=$3
  shift 3
  cp "$out/adapter/adapter_model.safetensors" "$work/straight_$tag.safetensors"
  rm -rf "$out/checkpoints/step-$(printf %07d "$last")" "$out/adapter"
  "$runner" "$recipe" "$@" resume=true "${common[@]}" >"$work/${tag}_b.log" 2>&1
  check "$tag: resumed run exits 0" test $? -eq 0
  check "$tag: resumed run equals the straight run (adapter bytes)" \
    cmp "$out/adapter/adapter_model.safetensors" "$work/straight_$tag.safetensors"
}

# LoRA: a straight run of 4 steps (checkpoints at 2 and 4); then, as if it had died after step 2,
# the step-4 checkpoint is removed and resume=true must redo steps 3-4 to the same adapter bytes.
out=$work/lora
# Not a terminal: with lines at most every 100000 s, only the first and the last step print one.
LUATUNE_PROGRESS_SECONDS=100000 "$runner" lora_finetune base_model="$base" data=tests/fixtures/data/chat_small.jsonl \
  output_dir="$out" max_steps=4 save_steps=2 "${common[@]}" >"$work/lora_a.log" 2>&1
check "lora: run exits 0" test $? -eq 0
check "lora: progress lines at the first and last step only, with elapsed time" \
  test "$(grep -oE '^step [0-9]+/4 .*\| elapsed [0-9]+s' "$work/lora_a.log" | cut -d' ' -f2 | tr '\n' ' ')" = "1/4 4/4 "
check "lora: eval lines with elapsed time" grep -qE '^eval step 2/4 \| eval_loss .*\| elapsed [0-9]+s' "$work/lora_a.log"
check "lora: report.html beside metrics.jsonl, with curves" grep -q '<svg class="chart line"' "$out/report.html"
check "lora: report.html draws the loss of every step" \
  test "$(grep -o 'data-name="loss" points="[^"]*"' "$out/report.html" | grep -o '[0-9.]*,[0-9.]*' | wc -l)" -eq 4
check "lora: report.md has the final numbers" grep -q '^## Final numbers' "$out/report.md"
check "lora: says where the report is" grep -qx "report: $out/report.html" "$work/lora_a.log"
check "lora: checkpoints at steps 2 and 4" test -f "$out/checkpoints/step-0000002/trainer.json" \
  -a -f "$out/checkpoints/step-0000004/trainer.json"
check "lora: PEFT adapter written" test -f "$out/adapter/adapter_config.json" -a -f "$out/adapter/adapter_model.safetensors"
check "lora: eval lines logged" grep -q eval_loss "$out/metrics.jsonl"
check "lora: step lines in trainer:step's key order, counts as JSON integers" grep -qE \
  '^\{"step":1,"time":[0-9.]+,"elapsed":[0-9.]+,"loss":[0-9.e+-]+,"lr":[0-9.e+-]+,"grad_norm":[0-9.e+-]+,"tokens_per_s":[0-9.e+-]+,"tokens":[0-9]+,"target_tokens":[0-9]+,"step_time":' \
  "$out/metrics.jsonl"
check "lora: no count written as a float (\"tokens\":480.0)" \
  test "$(grep -cE '"(step|tokens|target_tokens)":[0-9]+\.' "$out/metrics.jsonl")" = 0
LUATUNE_PROGRESS_SECONDS=0 resumes_to_the_same lora 4 lora_finetune base_model="$base" \
  data=tests/fixtures/data/chat_small.jsonl output_dir="$out" max_steps=4 save_steps=2
check "lora: LUATUNE_PROGRESS_SECONDS=0 prints every step, with elapsed time" \
  test "$(grep -cE '^step [34]/4 \| loss .*\| elapsed [0-9]+s' "$work/lora_b.log")" -eq 2
check "lora: metrics go on from step 3, each step once" test "$(steps_logged "$out/metrics.jsonl")" = "1 2 3 4"

# QLoRA: a 4-bit base, the same resume guarantee as LoRA, and merge=true writing a dense HF model
# whose logits match the 4-bit base with the adapter on (within the bf16/4-bit rounding).
out=$work/qlora
qargs=(base_model="$base" data=tests/fixtures/data/chat_small.jsonl output_dir="$out" max_steps=4 save_steps=2 merge=true)
"$runner" qlora_finetune "${qargs[@]}" "${common[@]}" >"$work/qlora_a.log" 2>&1
check "qlora: run exits 0" test $? -eq 0
check "qlora: reports the 4-bit base" grep -q "4-bit base: 14 Linears nf4" "$work/qlora_a.log"
check "qlora: PEFT adapter written" test -f "$out/adapter/adapter_config.json"
check "qlora: merged model written without quantization_config" \
  bash -c "test -f '$out/merged/model.safetensors' && ! grep -q quantization_config '$out/merged/config.json'"
resumes_to_the_same qlora 4 qlora_finetune "${qargs[@]}"
cat >"$work/qlora_check.lua" <<LUA
local ids = { { 1, 5, 9, 13, 17, 21, 25, 29 } }
local q = models.load("$base", { dtype = "float32", quantize = "nf4" })
lora.load(q, "$out/adapter")
local a = q:forward(ids)
local b = models.load("$out/merged"):forward(ids)
local rel = ((a - b):norm() / a:norm()):item()
print("relative difference " .. rel)
if not (rel < 1e-3) then os.exit(1) end
LUA
"$runner" "$work/qlora_check.lua" >"$work/qlora_check.log" 2>&1
check "qlora: merged model equals 4-bit base + adapter" test $? -eq 0
"$runner" lora_finetune base_model="$base" data=tests/fixtures/data/chat_small.jsonl output_dir="$work/lora_nf4" \
  max_steps=2 save_steps=0 quantize=nf4 "${common[@]}" >"$work/lora_nf4.log" 2>&1
check "lora quantize=nf4: exits 0 with a 4-bit base" grep -q "14 Linears nf4" "$work/lora_nf4.log"

# LLaMA-Adapter (adaption prompts in both layers): the eval loss falls over 6 steps (warmup off, so the
# prompts and gates move from step 1), the PEFT adapter loads back with its config and changes the base's
# logits, and resume=true from the step-3 checkpoint ends at the same adapter bytes.
out=$work/adapter
aargs=(base_model="$base" data=tests/fixtures/data/chat_small.jsonl output_dir="$out" max_steps=6 save_steps=3 warmup_steps=0
  adapter.adapter_layers=2)
"$runner" adapter_finetune "${aargs[@]}" "${common[@]}" >"$work/adapter_a.log" 2>&1
check "adapter: run exits 0" test $? -eq 0
check "adapter: PEFT adapter written" test -f "$out/adapter/adapter_config.json" -a -f "$out/adapter/adapter_model.safetensors"
check "adapter: config says ADAPTION_PROMPT" test "$(json "$out/adapter/adapter_config.json" \
  '(j["peft_type"], j["adapter_len"], j["adapter_layers"], j["target_modules"])')" = "('ADAPTION_PROMPT', 10, 2, 'self_attn')"
check "adapter: eval loss falls from step 2 to step 6" python3 -c 'import json,sys
e = [j["eval_loss"] for j in map(json.loads, open(sys.argv[1])) if "eval_loss" in j]
sys.exit(not (len(e) == 3 and e[2] < e[1] < e[0]))' "$out/metrics.jsonl"
resumes_to_the_same adapter 6 adapter_finetune "${aargs[@]}"
cat >"$work/adapter_check.lua" <<LUA
local ids = { { 1, 5, 9, 13, 17, 21, 25, 29 } }
local m = models.load("$base", { dtype = "float32" })
local base = m:forward(ids)
local c = lora.load(m, "$out/adapter")
assert(c.adapter_len == 10 and c.adapter_layers == 2, "config read back")
local gate = lora.parameters(m)["model.layers.1.self_attn.adaption_gate"]:item()
print("gate " .. gate)
assert(gate ~= 0, "the gate moved off zero")
assert(not torch.equal(m:forward(ids), base), "the adapter changes the logits")
LUA
"$runner" "$work/adapter_check.lua" >"$work/adapter_check.log" 2>&1
check "adapter: loads back and changes the logits" test $? -eq 0

# Full fine-tuning writes a model that loads back.
"$runner" full_finetune base_model="$base" data=tests/fixtures/data/chat_small.jsonl output_dir="$work/full" \
  max_steps=2 save_steps=0 "${common[@]}" >"$work/full.log" 2>&1
check "full: exits 0" test $? -eq 0
check "full: HF model written" test -f "$work/full/model/config.json" -a -f "$work/full/model/model.safetensors"
check "full: tokenizer copied" test -f "$work/full/model/tokenizer.json"

# Continued pretraining on plain text.
"$runner" continued_pretraining base_model="$base" data=tests/fixtures/data/text_small.jsonl \
  output_dir="$work/cpt" max_steps=2 save_steps=0 "${common[@]}" >"$work/cpt.log" 2>&1
check "cpt: exits 0" test $? -eq 0
check "cpt: model written" test -f "$work/cpt/model/config.json"

finish
