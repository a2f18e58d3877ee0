#!/usr/bin/env bash
# recipes/generate.lua on the tiny Llama fixture (docs/generation.md): completions for 40 example
# prompts are the same file whether they decode one at a time or 16 together, greedy and sampled (the
# batched step gives each sequence its own bits; prompt i samples with seed + i); one row per prompt,
# in order, with its finish reason and token count; a bad prompts line fails naming FILE:LINE and
# writes nothing.
# Usage, from the repository root: tests/recipes/test_generate.sh RUNNER TINY_LLAMA_DIR WORKDIR
set -uo pipefail
runner=$1 model=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
prompts=$(dirname "$runner")/data/example_prompts.jsonl
[ -f "$prompts" ] || { echo "skip: no $prompts (the build writes it)"; exit 77; }
common=(model="$model" max_prompts=40 max_new_tokens=8)
for mode in greedy sampled; do
  extra=()
  [ "$mode" = sampled ] && extra=(temperature=0.9 top_k=20 seed=3)
  for b in 1 16; do
    "$runner" generate "${common[@]}" "${extra[@]}" batch_size=$b output="$work/$mode-$b.jsonl" \
      >"$work/$mode-$b.log" 2>&1
    check "$mode batch_size=$b: exits 0" test $? -eq 0
  done
  check "$mode: batch_size 16 writes the file batch_size 1 writes" cmp "$work/$mode-1.jsonl" "$work/$mode-16.jsonl"
  check "$mode: one row per prompt" test "$(wc -l <"$work/$mode-16.jsonl")" -eq 40
  check "$mode: the progress line and the speed" grep -q "40 prompts in .* s: .* new tokens, .* tokens/s" "$work/$mode-16.log"
done
check "rows: the prompt in order, a completion, its finish reason and length" python3 - "$prompts" "$work/greedy-16.jsonl" <<'PY'
import json, sys
src = [json.loads(l)["prompt"] for l in open(sys.argv[1])][:40]
rows = [json.loads(l) for l in open(sys.argv[2])]
assert [r["prompt"] for r in rows] == src
assert all(isinstance(r["completion"], str) and r["finish_reason"] in ("eos", "length", "stop") and
           0 <= r["new_tokens"] <= 8 for r in rows), rows[:2]
assert any(r["new_tokens"] > 0 for r in rows)
PY
check "greedy and sampled differ" bash -c "! cmp -s '$work/greedy-16.jsonl' '$work/sampled-16.jsonl'"
head -2 "$prompts" >"$work/bad.jsonl"
echo '{"prompt": ' >>"$work/bad.jsonl"
out=$("$runner" generate model="$model" prompts="$work/bad.jsonl" output="$work/bad-out.jsonl" 2>&1)
check "a bad line: exit 1" test $? -eq 1
check "a bad line: named by file and line" grep -q "$work/bad.jsonl:3" <<<"$out"
check "a bad line: no output file" test ! -e "$work/bad-out.jsonl"
finish
