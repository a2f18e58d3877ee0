#!/usr/bin/env bash
# bench/allocator_step.sh [VAR=VALUE,...:]RUNNER...: luatune's CPU training step under each malloc,
# one runner per build (-DLUATUNE_ALLOCATOR=system|glibc|tcmalloc|jemalloc,
# docs/building.md#the-allocator), or under other process settings: a runner written
# VAR=VALUE,...:RUNNER runs with those variables set (GOMP_SPINCOUNT=300000:build/runner is
# libgomp's default wait instead of luatune's PASSIVE, docs/cpu_threads.md). On the model of
# bench/step_vs_pytorch.sh (bench/llama_step.lua). For each (method, vocab) every runner
# starts and warms up, then they step in turn, ROUNDS rounds, so each round saw the same load on
# this shared machine. Prints every step, then a Markdown table: median step time, the median of
# the rounds' speed-ups over the first runner, minor page faults a step and peak RSS.
# Environment: ROUNDS (5), WARMUP (1), CONFIGS ("full:32000 lora:32000 full:128256 lora:128256"),
# ROWS (4) and LENGTH (256): the batch, LOG. The smallest run (the smoke test's, seconds):
#   ROUNDS=1 WARMUP=0 CONFIGS=lora:512 ROWS=1 LENGTH=16 bench/allocator_step.sh build/runner
# The builds, then the run (about 4 minutes on 2 otherwise idle cores; 4 x 3 GB of memory at the
# 128k vocabulary):
#   for a in system glibc tcmalloc jemalloc; do
#     cmake -B /tmp/b-$a -DLUATUNE_ALLOCATOR=$a -DLUATUNE_BUILD_TESTS=OFF -DLUATUNE_BUILD_BENCH=OFF &&
#       cmake --build /tmp/b-$a --target runner; done
#   bench/allocator_step.sh /tmp/b-{system,glibc,tcmalloc,jemalloc}/runner
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: bench/allocator_step.sh [VAR=VALUE,...:]RUNNER..." >&2; exit 2; }
rounds=${ROUNDS:-5} warmup=${WARMUP:-1} rows=${ROWS:-4} length=${LENGTH:-256}
configs=${CONFIGS:-"full:32000 lora:32000 full:128256 lora:128256"}
log=${LOG:-$(mktemp /tmp/allocator_step.XXXXXX)}
: >"$log"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source bench/paced.sh

runners=() envs=() labels=()
for a in "$@"; do
  e=""
  if [[ $a == *=*:* ]]; then e=${a%:*} a=${a##*:}; fi
  runners+=("$a") envs+=("${e//,/ }")
  # shellcheck disable=SC2086
  v=$(env $e "$a" --version)
  m=$(sed -n 's/^malloc //p' <<<"$v")
  case $m in "glibc (tuned"*) m=glibc-tuned ;; esac
  labels+=("$m${e:++$e}")
  echo "allocator_step: $e $a: malloc $(sed -n 's/^malloc //p' <<<"$v"), OpenMP wait $(sed -n 's/^OpenMP wait //p' <<<"$v")"
done
t0=$(date +%s)
for c in $configs; do
  method=${c%%:*} vocab=${c##*:}
  for i in "${!runners[@]}"; do
    # shellcheck disable=SC2086
    paced_start "s$i" env ${envs[$i]} "${runners[$i]}" bench/llama_step.lua method="$method" vocab_size="$vocab" warmup="$warmup" \
      rows="$rows" length="$length" paced=true
  done
  for round in $(seq 1 "$rounds"); do
    for i in "${!runners[@]}"; do paced_step "s$i" "malloc=${labels[$i]}" "round=$round"; done
  done
  for i in "${!runners[@]}"; do paced_stop "s$i" "side=luatune method=$method vocab=$vocab malloc=${labels[$i]}"; done
  wait
done
echo "allocator_step: $(($(date +%s) - t0)) s; steps in $log; load average now $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$log" <<'PY'
import statistics
import sys

med = statistics.median
steps, peaks = {}, {}
for line in open(sys.argv[1]):
    kind, *words = line.split()
    kv = dict(w.split("=", 1) for w in words)
    key = (kv["method"], int(kv["vocab"]))
    if kind == "PEAK":
        peaks[key + (kv["malloc"],)] = float(kv["rss_gb"])
    else:
        rounds = steps.setdefault(key, {})
        rounds.setdefault(kv["round"], {})[kv["malloc"]] = (float(kv["step_s"]), int(kv["minflt"]))
print("\n| method | vocab | malloc | step s | speed-up over the first | page faults a step | peak RSS GB | rounds |")
print("|---|---|---|---|---|---|---|---|")
for key, rounds in steps.items():
    names = list(next(iter(rounds.values())))
    for name in names:
        s = [r[name][0] for r in rounds.values()]
        up = [r[names[0]][0] / r[name][0] for r in rounds.values()]
        faults = med(r[name][1] for r in rounds.values())
        print(f"| {key[0]} | {key[1]} | {name} | {med(s):.2f} | {med(up):.2f} ({min(up):.2f}-{max(up):.2f}) | "
              f"{faults:,.0f} | {peaks.get(key + (name,), 0):.2f} | {len(s)} |")
PY
