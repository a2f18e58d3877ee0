#!/usr/bin/env bash
# Generation on the CPU, side by side on one real model (docs/generation.md):
#   luatune, one sequence: model:generate with the fast decode step and with every step through the
#     forward pass (bench/gguf_generate.lua fast_decode=true|false);
#   llama.cpp (node-llama-cpp 3.21.1, tests/reference/llama/generate.mjs --bench) on the same weights
#     exported by export_gguf to f32;
#   transformers' generate (bench/hf_generate.py, float32, its dynamic cache), when the Python
#     environment has it;
# each with THREADS threads (each value in turn), 64 new tokens after a 64-token prompt, greedy, decode
# tok/s with the prefill not counted and the prefill (+ the first token) in its own column, median of
# REPS; then luatune's batched generation (recipes/generate.lua: 64 example prompts, 32 new tokens each,
# at batch sizes 1, 8 and 64, one thread) in tokens/s.
# Usage, from the repository root: bench/decode.sh RUNNER [WORKDIR] [THREADS="1 2"] [REPS=3]
# MODEL (environment): a Hugging Face directory; default the embedded SmolLM2-135M-Instruct converted
# from its GGUF (runner convert, once into WORKDIR). BATCHES (environment): the batch sizes.
set -euo pipefail
R=$1 W=${2:-/tmp/luatune_decode} THREADS=${3:-"1 2"} REPS=${4:-3}
py=${LUATUNE_PYTHON:-.venv/bin/python3}
[ -d tests/reference/llama/node_modules/node-llama-cpp ] || { echo "skip: tests/reference/llama not installed"; exit 77; }
mkdir -p "$W"
logged() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 || { echo "decode: failed ($*):" >&2; tail -20 "$log" >&2; exit 1; }
}
model=${MODEL:-$W/model}
if [ -z "${MODEL:-}" ] && [ ! -f "$model/config.json" ]; then
  gguf=models/SmolLM2-135M-Instruct.Q4_1.gguf
  [ -e "$gguf" ] || { echo "skip: no $gguf (scripts/setup.sh)"; exit 77; }
  logged "$W/convert.log" "$R" convert "$gguf" "$model"
fi
[ -f "$W/model-f32.gguf" ] || logged "$W/export.log" "$R" export_gguf model="$model" output="$W/model-f32.gguf" outtype=f32
rows=()
for t in $THREADS; do
  for fast in true false; do
    OMP_NUM_THREADS=$t logged "$W/luatune-$t-$fast.log" "$R" bench/gguf_generate.lua model="$model" \
      fast_decode=$fast reps="$REPS"
    grep '^{' "$W/luatune-$t-$fast.log" >"$W/luatune-$t-$fast.json"
  done
  LLAMA_THREADS=$t logged "$W/llama-$t.log" node tests/reference/llama/generate.mjs "$W/model-f32.gguf" --bench 64 \
    --prompt-tokens 64 --reps "$REPS"
  grep '^{' "$W/llama-$t.log" >"$W/llama-$t.json"
  if "$py" -c 'import transformers' 2>/dev/null; then
    logged "$W/hf-$t.log" "$py" bench/hf_generate.py "$model" --threads "$t" --reps "$REPS"
    grep '^{' "$W/hf-$t.log" >"$W/hf-$t.json"
  fi
done
prompts=$(dirname "$R")/data/example_prompts.jsonl
for b in ${BATCHES:-1 8 64}; do
  OMP_NUM_THREADS=1 logged "$W/batch-$b.log" "$R" generate model="$model" prompts="$prompts" max_prompts=64 \
    max_new_tokens=32 batch_size="$b" output="$W/batch-$b.jsonl"
done
python3 - "$W" "$THREADS" "${BATCHES:-1 8 64}" <<'PY'
import json, os, re, sys
w, threads, batches = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
load = lambda p: json.load(open(p)) if os.path.exists(p) else None
print("| threads | engine | decode tok/s | prefill + 1 token (s) | runs |")
print("|---|---|---|---|---|")
for t in threads:
    fast, slow = load(f"{w}/luatune-{t}-true.json"), load(f"{w}/luatune-{t}-false.json")
    ll, hf = load(f"{w}/llama-{t}.json"), load(f"{w}/hf-{t}.json")
    print(f"| {t} | luatune, fast decode step | {fast['gen_tok_s']:.1f} | {fast['prefill_plus_one_s']:.3f} | {fast['runs']} |")
    print(f"| {t} | luatune, forward pass each step | {slow['gen_tok_s']:.1f} | {slow['prefill_plus_one_s']:.3f} | {slow['runs']} |")
    print(f"| {t} | llama.cpp {ll['llama_cpp_release']} f32 ({ll['cpu_backend']}) | {ll['gen_tok_s']:.1f} | - | {[round(r['gen_tok_s'], 1) for r in ll['runs']]} |")
    if hf:
        print(f"| {t} | {hf['engine']} generate | {hf['gen_tok_s']:.1f} | {hf['prefill_plus_one_s']:.3f} | {hf['runs']} |")
    print(f"threads {t}: luatune fast / llama.cpp f32 = {fast['gen_tok_s'] / ll['gen_tok_s']:.2f}x"
          + (f", / transformers = {fast['gen_tok_s'] / hf['gen_tok_s']:.2f}x" if hf else ""))
print()
print("| batch_size (64 prompts, 32 new tokens, 1 thread) | tokens/s | seconds |")
print("|---|---|---|")
for b in batches:
    m = re.search(r"(\d+) prompts in ([\d.]+) s: (\d+) new tokens, ([\d.]+) tokens/s", open(f"{w}/batch-{b}.log").read())
    print(f"| {b} | {float(m.group(4)):.1f} | {float(m.group(2)):.1f} |")
PY
