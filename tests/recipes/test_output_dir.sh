#!/usr/bin/env bash
# The output_dir contract covers every output a run writes (docs/checkpoints.md), end to end on the
# tiny model: a fresh full_finetune or lora_finetune into a finished run's directory, with or without
# checkpoints, exits 2 with one line (the directory, what it holds, resume=true and overwrite=true)
# and touches nothing; overwrite=true moves that run whole to previous-<time>/; resume=true runs as
# before; an empty directory, or one holding only the user's own files, is used as it is.
# (The refusal of a run with checkpoints by lora_finetune, and resume itself: test_run_safety.sh.)
# Usage, from the repository root: tests/recipes/test_output_dir.sh RUNNER TINY_MODEL_DIR WORKDIR
set -uo pipefail
runner=$1 base=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
common=(base_model="$base" data=tests/fixtures/data/chat_small.jsonl dtype=fp32 device=cpu batch_size=2
  gradient_accumulation_steps=1 max_length=64 eval_steps=1000 eval_fraction=0.1 gradient_checkpointing=false
  max_steps=2)
ways_out="start afresh with overwrite=true (moves everything in it to DIR/previous-<time>/, deletes nothing)"
# refused TAG DIR WHAT: the log TAG.log ends with the one line for DIR holding WHAT and no checkpoint.
refused_without_checkpoint() {
  tail -1 "$work/$1.log" | grep -qF "output_dir: $2 holds another run's outputs ($3) and no checkpoint; \
${ways_out//DIR/$2}, or write over them with resume=true"
}

# ---------------------------------------------------------------------------------------------
# full_finetune, max_steps < save_steps: a finished run with model/ and no checkpoint (one saved at
# the last evaluation, if any, deleted as a user freeing the disk would).
out=$work/full
"$runner" full_finetune "${common[@]}" output_dir="$out" save_steps=100 >"$work/full_a.log" 2>&1
check "full: the first run exits 0" test $? -eq 0
rm -rf "$out/checkpoints"
cp "$out/model/model.safetensors" "$work/full_a.safetensors"
cp "$out/run.json" "$work/full_a.run.json"
"$runner" full_finetune "${common[@]}" output_dir="$out" save_steps=100 learning_rate=1e-3 >"$work/full_b.log" 2>&1
check "full: a second run into it exits 2" test $? -eq 2
check "full: one line naming the directory, what it holds and both ways out" \
  refused_without_checkpoint full_b "$out" "metrics.jsonl, model/, report.html, report.md, run.json"
check "full: the refused run touched nothing" \
  bash -c "cmp '$out/model/model.safetensors' '$work/full_a.safetensors' && cmp '$out/run.json' '$work/full_a.run.json' \
           && ! ls -d '$out'/previous-* 2>/dev/null"
"$runner" full_finetune "${common[@]}" output_dir="$out" save_steps=100 learning_rate=1e-3 overwrite=true \
  >"$work/full_c.log" 2>&1
check "full: overwrite=true runs" test $? -eq 0
prev=$(ls -d "$out"/previous-* 2>/dev/null | head -1)
check "full: ... after moving the finished run whole to previous-<time>/" \
  bash -c "test -n '$prev' && cmp '$prev/model/model.safetensors' '$work/full_a.safetensors' \
           && cmp '$prev/run.json' '$work/full_a.run.json' && test -f '$prev/metrics.jsonl'"
check "full: ... and says so" grep -qF "config: moved the earlier run in $out to $prev" "$work/full_c.log"
check "full: ... writing a model of its own" bash -c "! cmp -s '$out/model/model.safetensors' '$work/full_a.safetensors'"
rm -rf "$out/checkpoints"
"$runner" full_finetune "${common[@]}" output_dir="$out" save_steps=100 resume=true >"$work/full_d.log" 2>&1
check "full: resume=true with no checkpoint still runs (writing over the run, as asked)" test $? -eq 0

# full_finetune with checkpoints: the line says resume=true continues that run.
out=$work/full_ckpt
"$runner" full_finetune "${common[@]}" output_dir="$out" save_steps=1 >"$work/full_ckpt_a.log" 2>&1
check "full with checkpoints: the first run exits 0" test $? -eq 0
"$runner" full_finetune "${common[@]}" output_dir="$out" save_steps=1 >"$work/full_ckpt_b.log" 2>&1
check "full with checkpoints: a second run into it exits 2" test $? -eq 2
check "full with checkpoints: one line naming the directory, what it holds and both ways out" \
  bash -c "tail -1 '$work/full_ckpt_b.log' | grep -qF \"output_dir: $out holds another run's outputs (checkpoints/, \
metrics.jsonl, model/, report.html, report.md, run.json); continue that run with resume=true, or \
${ways_out//DIR/$out}\""
"$runner" full_finetune "${common[@]}" output_dir="$out" save_steps=1 resume=true >"$work/full_ckpt_c.log" 2>&1
check "full with checkpoints: resume=true continues it" grep -q "resumed from step 2 of 2" "$work/full_ckpt_c.log"

# ---------------------------------------------------------------------------------------------
# lora_finetune (which saves a final checkpoint) after the user deleted checkpoints/ to free the disk:
# adapter/ instead of model/.
out=$work/lora
"$runner" lora_finetune "${common[@]}" output_dir="$out" save_steps=100 >"$work/lora_a.log" 2>&1
check "lora: the first run exits 0" test $? -eq 0
rm -rf "$out/checkpoints"
cp "$out/adapter/adapter_model.safetensors" "$work/lora_a.safetensors"
"$runner" lora_finetune "${common[@]}" output_dir="$out" save_steps=100 learning_rate=1e-2 >"$work/lora_b.log" 2>&1
check "lora: a second run into it exits 2" test $? -eq 2
check "lora: one line naming the directory, what it holds and both ways out" \
  refused_without_checkpoint lora_b "$out" "adapter/, metrics.jsonl, report.html, report.md, run.json"
check "lora: the adapter is untouched" cmp "$out/adapter/adapter_model.safetensors" "$work/lora_a.safetensors"
"$runner" lora_finetune "${common[@]}" output_dir="$out" save_steps=100 learning_rate=1e-2 overwrite=true \
  >"$work/lora_c.log" 2>&1
check "lora: overwrite=true runs" test $? -eq 0
check "lora: ... after moving the adapter aside" \
  bash -c "cmp \$(ls -d '$out'/previous-* | head -1)/adapter/adapter_model.safetensors '$work/lora_a.safetensors'"

# ---------------------------------------------------------------------------------------------
# Not another run: an empty directory, and one with only the user's own files, are used as they are.
mkdir -p "$work/empty"
"$runner" lora_finetune "${common[@]}" output_dir="$work/empty" save_steps=100 >"$work/empty.log" 2>&1
check "empty directory: the run exits 0" test $? -eq 0
mkdir -p "$work/mine"
echo "my notes" >"$work/mine/notes.txt"
cp tests/fixtures/data/chat_small.jsonl "$work/mine/train.jsonl"
"$runner" lora_finetune "${common[@]}" output_dir="$work/mine" save_steps=100 >"$work/mine.log" 2>&1
check "the user's own files: the run exits 0" test $? -eq 0
check "the user's own files: left where they were, unchanged" \
  bash -c "test \"\$(cat '$work/mine/notes.txt')\" = 'my notes' && cmp '$work/mine/train.jsonl' tests/fixtures/data/chat_small.jsonl"
check "the user's own files: nothing moved aside" bash -c "! ls -d '$work/mine'/previous-* 2>/dev/null"
finish
