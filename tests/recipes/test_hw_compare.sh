#!/usr/bin/env bash
# hw_compare and `runner plan` on the tiny model (fixture tiny_llama): plan output for LoRA and full
# fine-tuning; a brief measured LoRA run on the CPU -> profile.json (reusable with runs=), report.json
# with one row per catalog GPU (CPU-measured: every row projected or planned, fits column), and the
# Markdown/HTML report naming every GPU with measured/projected markers and inline SVG charts.
# Usage, from the repository root: tests/recipes/test_hw_compare.sh RUNNER TINY_MODEL_DIR WORKDIR
set -uo pipefail
runner=$1 base=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
gpus=$(python3 -c 'import json; print("\n".join(g["name"] for g in json.load(open("data/gpu_catalog.json"))["gpus"]))')
data=tests/fixtures/data/chat_small.jsonl

# runner plan with the tiny model's config.json
"$runner" plan lora_finetune base_model="$base" max_length=64 batch_size=2 >"$work/plan_lora.log" 2>&1
check "plan lora: exits 0" test $? -eq 0
check "plan lora: method and shape" grep -q "method: lora, dtype bf16, LoRA r=16" "$work/plan_lora.log"
check "plan lora: batch_size 2 x max_length 64" grep -q "shape: batch_size 2 x max_length 64, gradient_checkpointing on" "$work/plan_lora.log"
while read -r g; do check "plan lora: row for $g" grep -q "^$g " "$work/plan_lora.log"; done <<<"$gpus"
"$runner" plan full_finetune base_model="$base" dtype=fp32 >"$work/plan_full.log" 2>&1
check "plan full: exits 0" test $? -eq 0
check "plan full: method full fp32" grep -q "method: full, dtype fp32, adamw" "$work/plan_full.log"
check "plan full: fits everywhere" test "$(grep -cE '^[A-Za-z0-9 ]+ +[0-9]+ +yes ' "$work/plan_full.log")" -eq 12

# hw_compare: 3 measured steps on the CPU, priced for 50
out=$work/cmp
args="base_model=$base,data=$data,dtype=fp32,device=cpu,batch_size=2,gradient_accumulation_steps=1,max_length=64"
"$runner" hw_compare recipe_args="$args,eval_steps=100,save_steps=0" \
  max_steps=3 full_steps=50 output_dir="$out" >"$work/cmp.log" 2>&1
rc=$?
check "hw_compare: the child run wrote metrics" test -f "$out/run/metrics.jsonl"
check "hw_compare: profile.json" test -f "$out/profile.json"
check "profile: measured on cpu" test "$(json "$out/profile.json" 'j["device"]')" = cpu
check_json "profile: tokens/s > 0" "$out/profile.json" 'j["tokens_per_s"] > 0'
check_json "profile: LoRA FLOPs convention" "$out/profile.json" 'j["flops_convention"].startswith("4N+6N_lora")'
check "profile: no MFU on a CPU" test "$(json "$out/profile.json" '"mfu" in j')" = False
check_json "profile: eval loss" "$out/profile.json" 'j["eval_loss"] > 0'
check "report.json: a row per GPU" test "$(json "$out/report.json" 'len(j["rows"])')" -eq 12
check_json "report.json: rows projected (fits) or planned" "$out/report.json" \
  'all(r["kind"] == ("projected" if r["fits"] else "planned") for r in j["rows"])'
check_json "report.json: projected rows have time and cost" "$out/report.json" \
  'all(r["hours"] > 0 and r["cost_usd"] > 0 for r in j["rows"] if r["kind"] == "projected")'
check_json "report.json: measured entry on cpu with eval loss" "$out/report.json" \
  'j["measured"][0]["device"] == "cpu" and j["measured"][0]["eval_loss"] > 0'
while read -r g; do check "console table: $g" grep -q "^$g " "$work/cmp.log"; done <<<"$gpus"

# The report itself.
check "hw_compare: exits 0" test "$rc" -eq 0
check "report.md written" test -s "$out/report.md"
check "report.html written" test -s "$out/report.html"
while read -r g; do
  check "report.md: $g" grep -qF "$g" "$out/report.md"
  check "report.html: $g" grep -qF "$g" "$out/report.html"
done <<<"$gpus"
check "report.md: measured (cpu) marker" grep -qi "measured" "$out/report.md"
check "report.md: projected marker" grep -qi "projected" "$out/report.md"
check "report.md: fits column" grep -qi "fits" "$out/report.md"
# 50 steps of the tiny model cost under a cent: "$<0.01" as written, not "$&lt;0.01" (issue 32).
check "report.md: a cost under a cent reads \$<0.01" grep -qF 'fits and costs $<0.01 (' "$out/report.md"
check "report.md: no HTML entity" bash -c "! grep -qE '&(lt|gt|amp);' '$out/report.md'"
check "report.html: inline SVG charts" grep -q "<svg" "$out/report.html"
check "report.html: self-contained" bash -c "! grep -qE '(src|href)=\"https?:' '$out/report.html'"

# A rerun into the same output_dir measures afresh: the earlier child run is moved aside, not refused.
"$runner" hw_compare recipe_args="$args,eval_steps=100,save_steps=0" \
  max_steps=2 full_steps=50 output_dir="$out" >"$work/cmp2.log" 2>&1
check "rerun: exits 0" test $? -eq 0
check "rerun: says the earlier measurement moves aside" grep -q "holds an earlier measurement; overwrite=true moves it aside" "$work/cmp2.log"
check "rerun: the earlier run kept under run/previous-*" bash -c "ls -d '$out'/run/previous-*/metrics.jsonl"

# runs=: the finished profile again, without running anything
"$runner" hw_compare runs="$out/profile.json" output_dir="$work/again" >"$work/again.log" 2>&1
check "runs=: no child run" test ! -d "$work/again/run"
check "runs=: the same rows" test "$(json "$work/again/report.json" 'len(j["rows"])')" -eq 12
finish
