#!/usr/bin/env bash
# Data parallel on CPU with Gloo, ranks started as torchrun starts them (RANK, WORLD_SIZE, ...,
# MASTER_ADDR/PORT; no launcher in between): 2 ranks with B rows each compute the same losses and
# final weights (float tolerance) as 1 process with 2B rows, for full fine-tuning and LoRA, with
# micro-batches and recomputed layers; a rank that dies makes the other exit non-zero promptly, a
# rank that hangs makes it fail once LUATUNE_DIST_TIMEOUT passes, naming the cause.
# Usage, from the repository root: tests/dist/test_ddp.sh RUNNER TINY_MODEL_DIR WORKDIR
set -uo pipefail
runner=$1 base=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
source tests/dist/ranks.sh  # two_ranks, and `one`: the 1-process reference

for method in full lora; do
  for extra in "" "micro=1 checkpoint_layers=true"; do
    tag=$method${extra:+-micro}
    one method=$method size=4 $extra out="$work/$tag-1" >"$work/$tag-1.log" 2>&1
    check "$tag: 1 process, 4 rows a step" test $? -eq 0
    two_ranks "$work/$tag-2" method=$method size=2 $extra out="$work/$tag-2"
    check "$tag: 2 ranks, 2 rows each" test $? -eq 0
    check "$tag: same losses and final weights" "$runner" tests/dist/compare.lua a="$work/$tag-1" b="$work/$tag-2"
  done
done
check "ranks see world 2" grep -q "world 2" "$work/full-2.rank1.log"
# The loss and token fields only: each rank measures its own tokens/s.
check "both ranks log the same global losses" \
  bash -c "diff <(grep '^step' '$work/full-2.rank0.log' | sed 's| tokens/s .*||') <(grep '^step' '$work/full-2.rank1.log' | sed 's| tokens/s .*||')"

# A rank that dies: the other must fail (not hang), naming the cause.
start=$(date +%s)
LUATUNE_DIST_TIMEOUT=60 two_ranks "$work/die" method=lora size=2 steps=4 die_rank=1 die_step=2
rc=$?
took=$(( $(date +%s) - start ))
check "dead rank: the job fails" test "$rc" -ne 0
check "dead rank: rank 0 exits non-zero" bash -c "! grep -q '^eval loss' '$work/die.rank0.log'"
check "dead rank: rank 0 names the collective" grep -q "dist: .* failed on rank 0 of 2" "$work/die.rank0.log"
check "dead rank: well within the timeout ($took s < 60 s)" test "$took" -lt 60

# A rank that hangs: the other fails once the timeout passes (then the test stops the hung one).
start=$(date +%s)
# The hung rank defers SIGTERM to a safe point it never reaches (host/train/stop.cpp: ranks stop after
# the same step), so it is ended with SIGKILL: it stands for a wedged process.
( sleep 90; pkill -KILL -f "die_rank=1 die_step=2 hang=true" ) &
killer=$!
LUATUNE_DIST_TIMEOUT=8 two_ranks "$work/hang" method=lora size=2 steps=4 die_rank=1 die_step=2 hang=true &
job=$!
for _ in $(seq 1 80); do grep -q "dist: " "$work/hang.rank0.log" 2>/dev/null && break; sleep 1; done
took=$(( $(date +%s) - start ))
pkill -KILL -f "die_rank=1 die_step=2 hang=true"
wait "$job"
kill "$killer" 2>/dev/null
check "hung rank: rank 0 fails naming the timeout" grep -q "LUATUNE_DIST_TIMEOUT" "$work/hang.rank0.log"
check "hung rank: after the timeout, not long after ($took s)" test "$took" -lt 60

# The shipped training recipes run unedited under `runner --nproc 2`: metrics and files from rank 0,
# and a resume with another number of processes is refused in one line.
common=(base_model="$base" dtype=fp32 device=cpu batch_size=1 gradient_accumulation_steps=2 max_length=96 eval_steps=2
        eval_fraction=0.2 max_steps=2)
for recipe in lora_finetune full_finetune qlora_finetune; do
  LUATUNE_DIST_TIMEOUT=120 "$runner" --nproc 2 $recipe data=tests/fixtures/data/chat_small.jsonl \
    output_dir="$work/$recipe" save_steps=2 "${common[@]}" >"$work/$recipe.log" 2>&1
  check "$recipe under --nproc 2: exits 0" test $? -eq 0
  check "$recipe under --nproc 2: one set of metrics lines (rank 0's)" \
    test "$(grep -c '"loss"' "$work/$recipe/metrics.jsonl")" -eq 2
done
LUATUNE_DIST_TIMEOUT=120 "$runner" --nproc 2 continued_pretraining data=tests/fixtures/data/text_small.jsonl \
  output_dir="$work/cpt" save_steps=0 "${common[@]}" >"$work/cpt.log" 2>&1
check "continued_pretraining under --nproc 2: exits 0" test $? -eq 0
check "lora_finetune under --nproc 2: adapter and checkpoint written" \
  test -f "$work/lora_finetune/adapter/adapter_model.safetensors" -a -f "$work/lora_finetune/checkpoints/step-0000002/trainer.json"
"$runner" lora_finetune data=tests/fixtures/data/chat_small.jsonl output_dir="$work/lora_finetune" resume=true \
  "${common[@]}" max_steps=4 >"$work/resume.log" 2>&1
check "resume on 1 process of a 2-process checkpoint: exits 1" test $? -eq 1
check "resume on another count: says why" grep -q "written by a run of 2 processes, this run has 1" "$work/resume.log"
LUATUNE_DIST_TIMEOUT=120 "$runner" --nproc 2 lora_finetune data=tests/fixtures/data/chat_small.jsonl \
  output_dir="$work/lora_finetune" resume=true "${common[@]}" max_steps=4 save_steps=2 >"$work/resume2.log" 2>&1
check "resume on the same count: exits 0" test $? -eq 0
check "resume on the same count: continues at step 3" \
  test "$(grep '"loss"' "$work/lora_finetune/metrics.jsonl" | python3 -c 'import json,sys; print(" ".join(str(json.loads(l)["step"]) for l in sys.stdin))')" = "1 2 3 4"

finish
