#!/usr/bin/env bash
# CTest driver for gguf_spm_reference: a SentencePiece-style vocabulary (tokenizer.ggml.model "llama",
# as Llama 2 and Mistral GGUFs carry it) through `runner convert`. For the real Llama 2 and Gemma 3
# tokenizers (npm's @lenml/tokenizer-*: tokenizer.json with byte_fallback, no ByteLevel), a tiny
# Mistral-shaped model is exported with `runner export_gguf` (scores, token types, add_space_prefix),
# converted back, and on every non-empty line of tests/fixtures/tokenizer_corpus.jsonl and the first
# 300 of the example text set:
#  - the converted tokenizer's ids equal llama.cpp's on the GGUF itself (node-llama-cpp, special
#    tokens parsed): the rebuilt merges follow llama.cpp's score order;
#  - they equal the original tokenizer.json's ids (the round trip loses nothing);
#  - Hugging Face's tokenizers library reads the converted tokenizer.json to the same ids and decodes
#    them back to the text (skipped without the Python environment).
# Usage, from the repository root: tests/reference/gguf_spm_ref.sh RUNNER WORKDIR
set -uo pipefail
runner=$1 work=$2
python=${LUATUNE_PYTHON:-.venv/bin/python3}
command -v node >/dev/null || { echo "skip: node is not installed"; exit 77; }
[ -d tests/reference/llama/node_modules/node-llama-cpp ] || { echo "skip: scripts/setup.sh has not installed tests/reference/llama"; exit 77; }
npm=tests/reference/node/node_modules/@lenml
[ -d "$npm/tokenizer-llama2" ] || { echo "skip: scripts/setup.sh has not installed the tokenizers under $npm"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh

corpus=$work/corpus.jsonl
cat tests/fixtures/tokenizer_corpus.jsonl >"$corpus"
text=$(dirname "$runner")/data/example_text.jsonl
[ -f "$text" ] && python3 -c '
import json, sys
for i, line in enumerate(open(sys.argv[1])):
    if i == 300: break
    print(json.dumps(json.loads(line)["text"], ensure_ascii=False))' "$text" >>"$corpus"
grep -v '^""$' "$corpus" >"$corpus.nonempty"
lines=$(wc -l <"$corpus.nonempty")

# same NAME A B: the id files A and B equal line by line; prints the count and the first differences.
same() {
  local n
  n=$(paste -d '\t' "$2" "$3" | awk -F '\t' '$1 == $2' | wc -l)
  echo "     $1: ids equal on $n of $lines lines"
  [ "$n" -eq "$lines" ] || paste -d '\n' "$corpus.nonempty" "$2" "$3" |
    awk 'NR % 3 == 1 {t = $0} NR % 3 == 2 {a = $0} NR % 3 == 0 && a != $0 {print "  " t "\n  A " a "\n  B " $0; n++} n == 3 {exit}'
  check "$1: ids equal on every line" test "$n" -eq "$lines"
}

for tok in llama2 gemma3; do
  src=$npm/tokenizer-$tok/models
  "$runner" tests/recipes/gguf_tiny.lua arch=mistral tokenizer="$src" output_dir="$work/tiny-$tok" seed=1 \
    >"$work/$tok.tiny.log" 2>&1
  check "$tok: tiny model written" test -f "$work/tiny-$tok/config.json"
  "$runner" export_gguf model="$work/tiny-$tok" output="$work/$tok.gguf" outtype=f32 >"$work/$tok.export.log" 2>&1
  check "$tok: export_gguf exits 0" test $? -eq 0
  start=$(date +%s.%N)
  "$runner" convert "$work/$tok.gguf" "$work/$tok-hf" >"$work/$tok.convert.log" 2>&1
  check "$tok: convert exits 0" test $? -eq 0
  echo "     $tok: convert took $(echo "$(date +%s.%N) - $start" | bc) s"
  check "$tok: a SentencePiece-style BPE (byte_fallback, merges rebuilt from the scores)" python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))["model"]
assert m["type"] == "BPE" and m["byte_fallback"] and len(m["merges"]) > 1000, m.keys()' "$work/$tok-hf/tokenizer.json"

  "$runner" tokenize --tokenizer "$work/$tok-hf" <"$corpus.nonempty" >"$work/$tok.converted" 2>"$work/$tok.tokenize.log"
  "$runner" tokenize --tokenizer "$src" <"$corpus.nonempty" >"$work/$tok.original" 2>>"$work/$tok.tokenize.log"
  gguf=$(realpath "$work/$tok.gguf")
  (cd tests/reference/llama && node generate.mjs "$gguf" --tokenize-lines --special) \
    <"$corpus.nonempty" >"$work/$tok.llama" 2>"$work/$tok.llama.log"
  same "$tok: converted vs llama.cpp" "$work/$tok.converted" "$work/$tok.llama"
  same "$tok: converted vs the original tokenizer.json" "$work/$tok.converted" "$work/$tok.original"

  if "$python" -c 'import tokenizers' 2>/dev/null; then
    "$python" - "$work/$tok-hf/tokenizer.json" "$corpus.nonempty" "$work/$tok.converted" >"$work/$tok.hf.log" 2>&1 <<'PY'
import json, sys
from tokenizers import Tokenizer
t = Tokenizer.from_file(sys.argv[1])
texts = [json.loads(l) for l in open(sys.argv[2], encoding="utf-8")]
ours = [json.loads(l) for l in open(sys.argv[3])]
bad_ids = [x for x, want in zip(texts, ours) if t.encode(x, add_special_tokens=False).ids != want]
bad_text = [x for x, want in zip(texts, ours) if t.decode(want, skip_special_tokens=False) != x]
print(f"tokenizers: {len(texts) - len(bad_ids)} of {len(texts)} ids equal, "
      f"{len(texts) - len(bad_text)} decode back to the text")
for x in bad_ids[:3] + bad_text[:3]:
    print("  ", repr(x)[:200])
sys.exit(1 if bad_ids or len(ours) != len(texts) else 0)
PY
    check "$tok: Hugging Face tokenizers reads the converted file to the same ids" test $? -eq 0
    cat "$work/$tok.hf.log" | head -4
  fi
done
finish
