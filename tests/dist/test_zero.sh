#!/usr/bin/env bash
# ZeRO on CPU with Gloo: 2 ranks with B rows each under shard = optimizer / gradients / full give the
# losses and final weights of 1 unsharded process with 2B rows (fp32, rtol 1e-6), for full fine-tuning
# and LoRA, with micro-batches and recomputed layers; 8-bit AdamW sharded equals 8-bit AdamW in one
# process; CPU offload equals no offload; each rank holds 1/N of the sharded state (trainer:memory());
# a sharded run killed with SIGKILL between steps resumes to the losses of an uninterrupted run; a
# checkpoint is refused by a run with another stage.
# Usage, from the repository root: tests/dist/test_zero.sh RUNNER TINY_MODEL_DIR WORKDIR
set -uo pipefail
runner=$1 base=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
source tests/dist/ranks.sh  # two_ranks, and `one`: the 1-process reference
same() { "$runner" tests/dist/compare.lua a="$1" b="$2" rtol=1e-6 atol=3e-6; }  # why 3e-6: compare.lua

for method in full lora; do
  for extra in "" "micro=1 checkpoint_layers=true"; do
    tag=$method${extra:+-micro}
    one method=$method size=4 $extra out="$work/$tag-1" >"$work/$tag-1.log" 2>&1
    check "$tag: 1 process, unsharded" test $? -eq 0
    for stage in optimizer gradients full; do
      two_ranks "$work/$tag-$stage" method=$method size=2 $extra shard=$stage out="$work/$tag-$stage"
      check "$tag shard=$stage: 2 ranks run" test $? -eq 0
      check "$tag shard=$stage: losses and weights of 1 process" same "$work/$tag-1" "$work/$tag-$stage"
    done
  done
done
# Weight decay under ZeRO: transformers' groups (no decay on norm weights, which share a slice with
# decayed ones) by a per-slice mask, for AdamW and SGD; the numbers of 1 process with the same decay.
for opt in adamw sgd; do
  one method=full size=4 optimizer=$opt weight_decay=0.1 lr=1e-2 out="$work/wd-$opt-1" >"$work/wd-$opt-1.log" 2>&1
  check "weight_decay $opt: 1 process" test $? -eq 0
  for stage in optimizer full; do
    two_ranks "$work/wd-$opt-$stage" method=full size=2 optimizer=$opt weight_decay=0.1 lr=1e-2 shard=$stage \
      out="$work/wd-$opt-$stage"
    check "weight_decay $opt shard=$stage: losses and weights of 1 process" same "$work/wd-$opt-1" "$work/wd-$opt-$stage"
  done
done
two_ranks "$work/fsdp-name" method=lora size=2 shard=FULL_SHARD out="$work/fsdp-name"
check "FSDP's FULL_SHARD is shard=full" same "$work/lora-1" "$work/fsdp-name"

# memory NAME FIELD: "<sharded> <unsharded>" bytes from a rank-0 log's memory line.
memory() { sed -n "s/^memory.* $2 \([0-9][0-9]*\) \([0-9][0-9]*\).*/\1 \2/p" "$work/$1.rank0.log"; }
half() {  # sharded is 1/2 of unsharded, give or take 1% (padding)
  read -r a b <<<"$1"
  python3 -c "import sys; a,b=$a,$b; sys.exit(0 if b > 0 and abs(2*a - b) <= 0.01 * b else 1)"
}
check "shard=optimizer: optimizer states are 1/2" half "$(memory full-optimizer optimizer)"
check "shard=gradients: gradients are 1/2" half "$(memory full-gradients gradients)"
check "shard=full: LoRA adapters stay replicated" bash -c "read -r a b <<<'$(memory lora-full optimizer)'; test \$a -eq \$b"
check "shard=full: optimizer states are 1/2" half "$(memory full-full optimizer)"
check "shard=full: the decoder layers' weights are 1/2 (embeddings and head whole)" python3 -c "
import json, sys
c = json.load(open('$base/config.json'))
C, I, L, H, KV, D = (c[k] for k in ('hidden_size', 'intermediate_size', 'num_hidden_layers', 'num_attention_heads',
                                     'num_key_value_heads', 'head_dim'))
layers = L * (2 * H * D * C + 2 * KV * D * C + 3 * I * C + 2 * C) * 4  # fp32 bytes
a, b = map(int, '$(memory full-full weights)'.split())
sys.exit(0 if b - a == layers // 2 else 1)"
two_ranks "$work/bf16" method=full size=2 dtype=bfloat16 shard=gradients steps=1 out="$work/bf16"
check "bf16 shard=gradients: runs" test $? -eq 0
check "bf16 shard=gradients: fp32 masters are 1/2" half "$(memory bf16 masters)"

# 8-bit AdamW: the sharded slices hold the blocks one process holds. The gradients' sums differ in
# the last bits (2 ranks add halves), which can move a moment to the neighbouring 8-bit code: the
# weights agree to 1e-4 (lr 1e-3), not to float precision.
one method=full size=4 optimizer=adamw8bit shard=optimizer out="$work/8bit-1" >"$work/8bit-1.log" 2>&1
check "adamw8bit: 1 process" test $? -eq 0
two_ranks "$work/8bit-2" method=full size=2 optimizer=adamw8bit shard=full out="$work/8bit-2"
check "adamw8bit shard=full: 2 ranks run" test $? -eq 0
check "adamw8bit shard=full: losses and weights of 1 process" \
  "$runner" tests/dist/compare.lua a="$work/8bit-1" b="$work/8bit-2" rtol=1e-4 atol=1e-4
check "adamw8bit: states are about a quarter of AdamW's" python3 -c "import sys
a, b = int('$(memory 8bit-2 optimizer)'.split()[0]), int('$(memory full-full optimizer)'.split()[0])
sys.exit(0 if a < 0.3 * b else 1)"

# CPU offload: the same numbers (on a CPU host the update already runs there; the path is the same).
one method=full size=4 offload=cpu out="$work/offload-1" >"$work/offload-1.log" 2>&1
check "offload, unsharded: same as no offload" same "$work/full-1" "$work/offload-1"
two_ranks "$work/offload-2" method=full size=2 shard=full offload=cpu out="$work/offload-2"
check "offload shard=full: same as no offload" same "$work/full-1" "$work/offload-2"

# kill -9 of both ranks right after step 2 returns (save_every=1), then resume: the losses and
# weights of the uninterrupted 4-step run. Step 2's checkpoint waits for its safe point (after the
# step is logged, docs/checkpoints.md), which the kill comes before: the newest is step 1's.
two_ranks "$work/straight" method=full size=2 shard=full steps=4 out="$work/straight"
check "4 steps uninterrupted" test $? -eq 0
two_ranks "$work/killed" method=full size=2 shard=full steps=4 out="$work/killed" out_dir="$work/killed/run" \
  save_every=1 kill_after=2
check "killed run: exits with SIGKILL" test $? -eq 137
check "killed run: a complete checkpoint of step 1, none of step 2" \
  test -f "$work/killed/run/checkpoints/step-0000001/trainer.json" \
  -a -f "$work/killed/run/checkpoints/step-0000001/rank-00001.safetensors" -a ! -e "$work/killed/run/checkpoints/step-0000002"
two_ranks "$work/resumed" method=full size=2 shard=full steps=4 out="$work/killed" out_dir="$work/killed/run" \
  save_every=1 resume=true
check "resumed run: exits 0" test $? -eq 0
check "resumed run: continues after step 1" grep -q "resumed from step 1 of 4" "$work/resumed.rank0.log"
check "resumed run: the uninterrupted run's losses and weights" same "$work/straight" "$work/killed"
two_ranks "$work/other-stage" method=full size=2 shard=gradients steps=4 out_dir="$work/killed/run" resume=true
check "resume with another stage: refused" test $? -ne 0
check "resume with another stage: says why" grep -q "written by a run with shard=full, this run has shard=gradients" \
  "$work/other-stage.rank0.log"

# llama31_sheared (hard-concrete masks and Lagrange multipliers, replicated; distillation from the
# unpruned teacher after the surgery) under runner --nproc 2: every stage gives the unsharded data-
# parallel run's losses, distillation losses, perplexities and kept parameters.
sheared=(base_model="$base" data=tests/fixtures/data/text_small.jsonl dtype=fp32 device=cpu batch_size=2
         gradient_accumulation_steps=1 max_length=48 max_steps=6 eval_steps=100 eval_batches=1)
for stage in none optimizer gradients full; do
  LUATUNE_DIST_TIMEOUT=120 "$runner" --nproc 2 llama31_sheared "${sheared[@]}" output_dir="$work/sheared-$stage" \
    shard=$stage >"$work/sheared-$stage.log" 2>&1
  check "llama31_sheared shard=$stage under --nproc 2: exits 0" test $? -eq 0
done
for stage in optimizer gradients full; do
  check "llama31_sheared shard=$stage: the numbers of shard=none" \
    python3 tests/dist/same_metrics.py "$work/sheared-none" "$work/sheared-$stage"
done

finish
