#!/usr/bin/env bash
# A sharded distillation teacher on CPU with Gloo (distill.new's shard_teacher; docs/distill.md,
# "Sharded teacher"): 2 ranks with B rows each, every rank holding half of the teacher's decoder
# layers, give the per-step losses, kd_losses, evaluation and final student weights of 1 process with
# 2B rows and the whole teacher (fp32), also with micro-batches, a hidden-state pair and the student
# under ZeRO-3; ranks with different numbers of micro-batches and of evaluation batches neither
# deadlock nor change a number (against the same ranks with a whole teacher); in 1 process
# shard_teacher changes nothing.
# Usage, from the repository root: tests/dist/test_teacher_shard.sh RUNNER TINY_MODEL_DIR WORKDIR
set -uo pipefail
runner=$1 base=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
driver=tests/dist/distill_train.lua
source tests/dist/ranks.sh  # two_ranks, and `one`: the 1-process reference
export LUATUNE_DIST_TIMEOUT=120  # a deadlock fails the test in 2 minutes, not in 5
same() { "$runner" tests/dist/compare.lua a="$1" b="$2" rtol=1e-5 atol=3e-6; }  # why 3e-6: compare.lua
# layers NAME: "<held> <full>" decoder-layer elements of the teacher, from a rank-0 log.
layers() { sed -n "s/^teacher sharded .* layer_elements \([0-9]*\) \([0-9]*\) .*/\1 \2/p" "$work/$1"; }
half() {  # held is 1/2 of full, give or take the padding and a released weight's NaN per group
  read -r a b <<<"$1"
  python3 -c "import sys; a,b=$a,$b; sys.exit(0 if b > 0 and abs(2*a - b) <= 0.01 * b else 1)"
}

one size=4 out="$work/one" >"$work/one.log" 2>&1
check "1 process, whole teacher: runs" test $? -eq 0
one size=4 shard_teacher=true out="$work/one-shard" >"$work/one-shard.log" 2>&1
check "1 process, shard_teacher=true: runs" test $? -eq 0
check "1 process: shard_teacher changes no number" cmp "$work/one/losses.txt" "$work/one-shard/losses.txt"
check "1 process: shard_teacher changes no weight" "$runner" tests/dist/compare.lua a="$work/one" b="$work/one-shard" \
  rtol=0 atol=0
check "1 process: the teacher stays whole" grep -q "^teacher sharded false layer_elements 73984 73984" \
  "$work/one-shard.log"

two_ranks "$work/two" size=2 shard_teacher=true out="$work/two"
check "2 ranks, shard_teacher=true: run" test $? -eq 0
check "2 ranks: losses, kd_losses, evaluation and weights of 1 process" same "$work/one" "$work/two"
check "2 ranks: each holds half of the teacher's decoder layers" half "$(layers two.rank0.log)"
check "2 ranks: rank 1 too" half "$(layers two.rank1.log)"
check "2 ranks: still half after the steps and evaluations" \
  grep -q "^teacher after sharded true layer_elements $(layers two.rank0.log | cut -d' ' -f1) " "$work/two.rank0.log"

one size=4 micro=1 hidden=true out="$work/one-micro" >"$work/one-micro.log" 2>&1
check "1 process, micro-batches and a hidden pair: runs" test $? -eq 0
two_ranks "$work/two-micro" size=2 micro=1 hidden=true shard_teacher=true out="$work/two-micro"
check "2 ranks, micro-batches and a hidden pair: run" test $? -eq 0
check "2 ranks, micro-batches and a hidden pair: the numbers of 1 process" same "$work/one-micro" "$work/two-micro"
two_ranks "$work/two-zero" size=2 micro=1 shard=full shard_teacher=true out="$work/two-zero"
check "2 ranks, student ZeRO-3 + sharded teacher: run" test $? -eq 0
one size=4 micro=1 out="$work/one-micro-plain" >"$work/one-micro-plain.log" 2>&1
check "2 ranks, student ZeRO-3 + sharded teacher: the numbers of 1 process" same "$work/one-micro-plain" "$work/two-zero"

# Uneven ranks: rank 0 runs 3 micro-batches a step, rank 1 one. Compared with the same ranks and a
# whole teacher (their rows overlap, so 1 process is no reference here).
for student in none full; do
  two_ranks "$work/uneven-$student" size0=3 size=1 micro=1 shard=$student out="$work/uneven-$student"
  check "uneven ranks, student shard=$student, whole teacher: run" test $? -eq 0
  two_ranks "$work/uneven-$student-shard" size0=3 size=1 micro=1 shard=$student shard_teacher=true \
    out="$work/uneven-$student-shard"
  check "uneven ranks, student shard=$student, sharded teacher: run (no deadlock)" test $? -eq 0
  check "uneven ranks, student shard=$student: the whole teacher's numbers" \
    same "$work/uneven-$student" "$work/uneven-$student-shard"
done

finish
