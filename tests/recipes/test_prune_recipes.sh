#!/usr/bin/env bash
# End-to-end runs of the importance-based pruning recipes on the tiny model (fixture tiny_llama):
# depth_prune with a short recovery run, minitron_prune_distill width + depth; each must exit 0,
# write a loadable HF model of the pruned shape and a summary.json that parses.
# Usage, from the repository root: tests/recipes/test_prune_recipes.sh RUNNER TINY_MODEL_DIR WORKDIR [DISTILL_STEPS]
# DISTILL_STEPS (default 2) = 0 runs the Minitron recipe without its distillation stage.
set -uo pipefail
runner=$1 base=$2 work=$3 distill_steps=${4:-2}
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
common=(dtype=fp32 device=cpu batch_size=2 max_length=64 eval_fraction=0.2 calibration_rows=4)
layers=$(json "$base/config.json" 'j["num_hidden_layers"]')

out=$work/depth
"$runner" depth_prune base_model="$base" data=tests/fixtures/data/text_small.jsonl output_dir="$out" \
  layers=1 depth_metric=layer_removal recovery_steps=2 gradient_accumulation_steps=1 warmup_steps=0 "${common[@]}" \
  >"$work/depth.log" 2>&1
check "depth: exits 0" test $? -eq 0
check "depth: HF model written" test -f "$out/model/config.json" -a -f "$out/model/tokenizer.json"
check "depth: one layer fewer" test "$(json "$out/model/config.json" 'j["num_hidden_layers"]')" = $((layers - 1))
check_json "depth: summary" "$out/summary.json" 'len(j["removed"]) == 1 and j["perplexity_recovered"] > 0'

out=$work/minitron
"$runner" minitron_prune_distill base_model="$base" data=tests/fixtures/data/text_small.jsonl output_dir="$out" \
  shape.hidden=32 shape.intermediate=64 shape.layers=$((layers - 1)) distill.max_steps="$distill_steps" \
  distill.gradient_accumulation_steps=1 distill.warmup_steps=0 "${common[@]}" >"$work/minitron.log" 2>&1
check "minitron: exits 0" test $? -eq 0
check "minitron: pruned config" test "$(json "$out/model/config.json" \
  '(j["hidden_size"], j["intermediate_size"], j["num_hidden_layers"])')" = "(32, 64, $((layers - 1)))"
check_json "minitron: summary" "$out/summary.json" 'j["after"]["hidden"] == 32 and j["perplexity_pruned"] > 0'
if [ "$distill_steps" -gt 0 ]; then
  check "minitron: distillation logged kd_loss" grep -q kd_loss "$out/metrics.jsonl"
fi

finish
