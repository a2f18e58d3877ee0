#!/usr/bin/env bash
# The structured pruning recipes end to end on a tiny GQA Llama (4 layers, 4 heads in 2 KV groups,
# Llama 2 tokenizer) first trained briefly on the project's generated text: llama31_sheared with its
# default targets and with another combination (whole KV groups, half the layers, no distillation),
# checking the saved model's shape against the documented rounding, that it reloads and generates
# (check=true), and summary.json. Usage, from the repository root:
#   tests/recipes/test_pruning_recipes.sh RUNNER WORKDIR
# Skips (77) without the tokenizer scripts/setup.sh fetches.
set -uo pipefail
runner=$1 work=$2
source tests/recipes/lib.sh
need_llama2_tokenizer
rm -rf "$work" && mkdir -p "$work"

python3 tests/recipes/make_text_data.py "$work/text.jsonl" 600
trained_tiny_llama 4 30 3  # 4 layers, 30 steps, 3 of warm-up
base=$work/cpt/model
common=(base_model="$base" data="$work/text.jsonl" format=text dtype=fp32 device=cpu batch_size=4
        gradient_accumulation_steps=2 max_length=128 eval_steps=100 eval_batches=4 check=true)

# Default targets (0.2 layers, 0.3 heads, 0.1 hidden, 0.4 intermediate; round_to 128 falls back to
# integers at these widths): 4 -> 3 layers, 2 heads per group -> round(1.4) = 1 (2 heads, 2 KV),
# hidden round(57.6) = 58, intermediate round(115.2) = 115.
out=$work/sheared
"$runner" llama31_sheared "${common[@]}" output_dir="$out" max_steps=6 gguf=q8_0 profile="$work/sheared_prof" \
  profile_steps=1 profile_skip=1 >"$work/sheared.log" 2>&1
check "sheared: exits 0 (check=true: shape, reload, generate)" test $? -eq 0
# profile=DIR in a recipe with two trainers: each phase traced into its own subdirectory.
for phase in pruning recovery; do
  check "sheared: profile of the $phase phase" test -s "$work/sheared_prof/$phase/trace.json" -a \
    -s "$work/sheared_prof/$phase/summary.json"
done
check "sheared: HF model written" test -f "$out/model/config.json" -a -f "$out/model/model.safetensors"
check "sheared: layers 3" test "$(json "$out/summary.json" 'j["shape_after"]["layers"]')" = 3
check "sheared: heads 2 in 2 KV groups" test "$(json "$out/summary.json" 'j["shape_after"]["heads"]')/$(json "$out/summary.json" 'j["shape_after"]["kv_heads"]')" = 2/2
check "sheared: hidden 58" test "$(json "$out/summary.json" 'j["shape_after"]["hidden"]')" = 58
check "sheared: intermediate 115" test "$(json "$out/summary.json" 'j["shape_after"]["intermediate"]')" = 115
check "sheared: config.json has head_dim 16" test "$(json "$out/model/config.json" 'j["head_dim"]')" = 16
check "sheared: distilled, 3 + 3 steps" test "$(json "$out/summary.json" 'j["distilled"]')$(json "$out/summary.json" 'j["steps"]["pruning"]')$(json "$out/summary.json" 'j["steps"]["recovery"]')" = True33
check "sheared: kd_loss logged" grep -q kd_loss "$out/metrics.jsonl"
check "sheared: perplexities recorded" python3 -c 'import json,sys,math
p = json.load(open(sys.argv[1]))["perplexity"]
assert all(math.isfinite(p[k]) and p[k] > 1 for k in ("before", "after_pruning", "after_recovery")), p' "$out/summary.json"

# gguf=q8_0 (scripts/lua/gguf_out.lua): output_dir/model.gguf of the pruned model (hidden 58: rows that
# are not multiples of 32 stay f16, as llama.cpp's converter does), which llama.cpp loads and generates
# from (when scripts/setup.sh installed tests/reference/llama; greedy ids vs luatune's at f32:
# test_gguf_export.sh).
check "sheared gguf=q8_0: model.gguf written" test -s "$out/model.gguf"
if command -v node >/dev/null && [ -d tests/reference/llama/node_modules/node-llama-cpp ]; then
  echo '{"prompt":"The quick brown fox","add_bos":true,"ignore_eos":true,"max_new_tokens":6}' |
    node tests/reference/llama/generate.mjs "$out/model.gguf" >"$work/sheared_gguf.json" 2>"$work/sheared_gguf.log"
  check "sheared gguf=q8_0: llama.cpp loads it and generates 6 tokens" \
    test "$(json "$work/sheared_gguf.json" 'len(j["ids"])')" = 6
else
  echo "skip sheared gguf=q8_0: llama.cpp (tests/reference/llama) not installed"
fi

# teacher_cache: the teacher's top-k logits written once before recovery, then recovery from them (no
# teacher model during recovery; docs/distill.md "Cached teacher").
out=$work/sheared_cache
"$runner" llama31_sheared "${common[@]}" output_dir="$out" max_steps=4 teacher_cache="$work/tcache" \
  teacher_cache_k=16 >"$work/sheared_cache.log" 2>&1
check "sheared teacher_cache: exits 0 (check=true)" test $? -eq 0
check "sheared teacher_cache: the cache written" test -s "$work/tcache/meta.json"
check "sheared teacher_cache: says what it cached" grep -q "^teacher cache: .* top-16 bfloat16" "$work/sheared_cache.log"
check "sheared teacher_cache: distilled, kd_loss logged" test "$(json "$out/summary.json" 'j["distilled"]')" = True -a \
  "$(grep -c kd_loss "$out/metrics.jsonl")" -gt 0

# Another combination: whole KV groups (heads 0.8 -> round(0.4) = 0 per group -> 1 group of 2),
# half the layers, hidden 0.25 -> 48, intermediate 0.2 -> 154; LM loss only for the recovery.
out=$work/sheared2
"$runner" llama31_sheared "${common[@]}" output_dir="$out" max_steps=4 target_layer_sparsity=0.5 \
  target_head_sparsity=0.8 target_hidden_sparsity=0.25 target_intermediate_sparsity=0.2 distill=false \
  >"$work/sheared2.log" 2>&1
check "sheared (groups): exits 0" test $? -eq 0
check "sheared (groups): 2 layers, 2 heads in 1 KV group, hidden 48, intermediate 154" test \
  "$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["shape_after"]; print(s["layers"],s["heads"],s["kv_heads"],s["hidden"],s["intermediate"])' "$out/summary.json")" = "2 2 1 48 154"
check "sheared (groups): not distilled" test "$(json "$out/summary.json" 'j["distilled"]')" = False

# Dynamic batch loading across two domains: proportions move and are logged and summarised.
python3 tests/recipes/make_text_data.py "$work/a.jsonl" 200 1
python3 tests/recipes/make_text_data.py "$work/b.jsonl" 200 2
out=$work/domains
"$runner" llama31_sheared "${common[@]}" output_dir="$out" max_steps=4 domain_update_steps=2 \
  domains=count:"$work/a.jsonl",story:"$work/b.jsonl" >"$work/domains.log" 2>&1
check "sheared (domains): exits 0" test $? -eq 0
check "sheared (domains): proportions logged at steps 2 and 4" test \
  "$(grep -c proportion_count "$out/metrics.jsonl")" = 2
check "sheared (domains): proportions in summary.json sum to 1" python3 -c 'import json,sys
p = json.load(open(sys.argv[1]))["domain_proportions"]
assert set(p) == {"count", "story"} and abs(sum(p.values()) - 1) < 1e-9 and p["count"] != 0.5, p' "$out/summary.json"

# A target that cannot be met fails before any work, naming it.
"$runner" llama31_sheared "${common[@]}" output_dir="$work/bad" target_head_sparsity=1.0 >"$work/bad.log" 2>&1
check "sheared: head sparsity 1.0 refused before loading" grep -qF "target_head_sparsity = 1 (command line): expected in [0, 1)" "$work/bad.log"
check "sheared: nothing written for the refused run" test ! -e "$work/bad/model"

finish
