#!/usr/bin/env bash
# bench/step_vs_pytorch.sh [RUNNER]: luatune's CPU training step against plain PyTorch eager on the
# same model, batch and threads. luatune: bench/llama_step.lua; PyTorch: bench/pytorch_llama_step.py
# run by the Python environment scripts/setup.sh makes (.venv, or $LUATUNE_VENV): PyTorch 2.11, the
# very LibTorch (and MKL, and OpenMP runtime) luatune links. Random fp32 Llama, hidden 512, 4 layers, GQA 8/2 heads,
# intermediate 1408, batch 4 x 256 tokens, 2 threads, AdamW, clipping 1.0; full fine-tuning and LoRA
# r16 on all linear layers; vocabularies 32000 and 128256.
# For each (method, vocab) both sides start (one after the other), take their WARMUP steps, then
# step in turn, luatune, PyTorch, luatune, ..., PAIRS pairs: each pair ran under the same load on
# this shared machine. Prints every step, then a Markdown table of the median step times, the
# median (and range) of the pairs' ratios, each side's median minor page faults a step (fresh pages
# the kernel had to map and zero: what a caching malloc saves) and its peak RSS.
# Both sides get the runner's process settings (`runner --version`): PyTorch has the same malloc
# (the library preloaded, or the same glibc tuning through GLIBC_TUNABLES) and the same OpenMP wait
# policy (luatune's default OMP_WAIT_POLICY=PASSIVE, host/core/device.h), so the ratio compares the
# two implementations. RUNNER_OFF=path/to/runner (the same sources built with
# -DLUATUNE_ALLOCATOR=system: `cmake -B /tmp/b-off -DLUATUNE_ALLOCATOR=system && cmake --build
# /tmp/b-off --target runner`) adds the same pairs with the allocator off on both. PEER_AS_IS=1 adds
# pairs of the runner against PyTorch with none of these settings (its defaults: what a user who
# runs plain PyTorch gets). The table's first column names the setting: on, off, as-is.
# MODEL=DIR: a real model's Hugging Face directory on both sides instead of the random Llama (luatune
# loads it; the peer is transformers + peft in eager PyTorch on the same directory, float32, SDPA);
# each config's vocab is then the model's (write 0): CONFIGS="full:0 lora:0".
# Environment: PAIRS (5), WARMUP (1), CONFIGS ("full:32000 lora:32000 full:128256 lora:128256"),
# ROWS (4) and LENGTH (256): the batch, PYTHON (the environment's python3), RUNNER_OFF, PEER_AS_IS,
# LOG (the steps, one line each). The smallest run (the smoke test's, seconds):
#   PAIRS=1 WARMUP=0 CONFIGS=lora:512 ROWS=1 LENGTH=16 bench/step_vs_pytorch.sh build/runner
# Run: bench/step_vs_pytorch.sh build/runner   (about 2 minutes on 2 otherwise idle cores, 4 with
# RUNNER_OFF; 8-12 with RUNNER_OFF at a load average of 4-6, and then the ratios are noise)
set -euo pipefail
cd "$(dirname "$0")/.."
runner=${1:-build/runner}
pairs=${PAIRS:-5} warmup=${WARMUP:-1} rows=${ROWS:-4} length=${LENGTH:-256}
configs=${CONFIGS:-"full:32000 lora:32000 full:128256 lora:128256"}
py=${PYTHON:-${LUATUNE_VENV:-.venv}/bin/python3}
log=${LOG:-$(mktemp /tmp/step_vs_pytorch.XXXXXX)}
: >"$log"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The peer: the environment's PyTorch, checked to be the LibTorch the runner reports.
peer_version=$("$py" -c 'import torch; print(torch.__version__.split("+")[0])') ||
  { echo "step_vs_pytorch: $py has no torch (run scripts/setup.sh, or set PYTHON)" >&2; exit 2; }
runner_version=$("$runner" --version | sed -n 's/^LibTorch //p')
if [ "$peer_version" != "$runner_version" ]; then
  echo "step_vs_pytorch: PyTorch $peer_version ($py) is not the runner's LibTorch $runner_version" >&2
  exit 2
fi

malloc_of() { "$1" --version | sed -n 's/^malloc //p'; }
# The environment that gives PyTorch RUNNER's process settings, as VAR=value words for env(1): the
# malloc it was built with (the same library preloaded, or the same glibc tuning) and its OpenMP
# wait policy (luatune's default PASSIVE, host/core/device.h).
peer_env() {
  local malloc
  malloc=$(malloc_of "$1")
  case $malloc in
    tcmalloc | jemalloc) echo "LD_PRELOAD=$(ldd "$1" | awk -v m="$malloc" '$1 ~ m {print $3; exit}')" ;;
    "glibc (tuned"*) echo "GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=2147483647" ;;
  esac
  if "$1" --version | grep -q "^OpenMP wait PASSIVE (luatune's default)"; then echo "OMP_WAIT_POLICY=PASSIVE"; fi
}

source bench/paced.sh

t0=$(date +%s)
labels=on
if [ -n "${RUNNER_OFF:-}" ]; then labels="$labels off"; fi
if [ -n "${PEER_AS_IS:-}" ]; then labels="$labels as-is"; fi
echo "step_vs_pytorch: on: $runner (malloc $(malloc_of "$runner")), PyTorch with" $(peer_env "$runner")
[ -z "${RUNNER_OFF:-}" ] || echo "step_vs_pytorch: off: $RUNNER_OFF (malloc $(malloc_of "$RUNNER_OFF")), PyTorch with" $(peer_env "$RUNNER_OFF")
[ -z "${PEER_AS_IS:-}" ] || echo "step_vs_pytorch: as-is: $runner, PyTorch with no settings (its defaults)"
for c in $configs; do
  method=${c%%:*} vocab=${c##*:}
  if [ -n "${MODEL:-}" ] && [ "$vocab" = 0 ]; then
    vocab=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1] + "/config.json"))["vocab_size"])' "$MODEL")
  fi
  for label in $labels; do
    run=$runner
    if [ "$label" = off ]; then run=$RUNNER_OFF; fi
    peer=$(peer_env "$run")
    if [ "$label" = as-is ]; then peer=""; fi
    paced_start luatune "$run" bench/llama_step.lua method="$method" vocab_size="$vocab" warmup="$warmup" \
      rows="$rows" length="$length" paced=true ${MODEL:+model="$MODEL"}
    # shellcheck disable=SC2086
    paced_start pytorch env $peer "$py" bench/pytorch_llama_step.py "$method" "$vocab" 0 "$warmup" --paced \
      --rows="$rows" --length="$length" ${MODEL:+--model="$MODEL"}
    for pair in $(seq 1 "$pairs"); do
      paced_step luatune "alloc=$label" "pair=$pair"
      paced_step pytorch "alloc=$label" "pair=$pair"
    done
    for side in luatune pytorch; do paced_stop $side "side=$side method=$method vocab=$vocab alloc=$label"; done
    wait
  done
done
echo "step_vs_pytorch: $(($(date +%s) - t0)) s; steps in $log; load average now $(cut -d' ' -f1-3 /proc/loadavg)"

"$py" - "$log" <<'PY'
import statistics
import sys

med = statistics.median
steps, peaks = {}, {}
for line in open(sys.argv[1]):
    kind, *words = line.split()
    kv = dict(w.split("=", 1) for w in words)
    key = (kv["alloc"], kv["method"], int(kv["vocab"]))
    if kind == "PEAK":
        peaks.setdefault(key, {})[kv["side"]] = float(kv["rss_gb"])
    else:
        steps.setdefault(key, {}).setdefault(kv["pair"], {})[kv["side"]] = (float(kv["step_s"]), int(kv["minflt"]))
print("\n| settings | method | vocab | step s luatune / PyTorch | step time luatune/PyTorch (range) | "
      "tokens/s luatune/PyTorch | page faults a step luatune / PyTorch | peak RSS GB luatune / PyTorch | pairs |")
print("|---|---|---|---|---|---|---|---|---|")
for key, pairs in steps.items():
    done = [p for p in pairs.values() if "luatune" in p and "pytorch" in p]
    ratios = [p["luatune"][0] / p["pytorch"][0] for p in done]
    lt, pt = (med(p[side][0] for p in done) for side in ("luatune", "pytorch"))
    lf, pf = (med(p[side][1] for p in done) for side in ("luatune", "pytorch"))
    rss = peaks.get(key, {})
    print(f"| {key[0]} | {key[1]} | {key[2]} | {lt:.2f} / {pt:.2f} | {med(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) "
          f"| {med(1 / r for r in ratios):.2f} | {lf:,.0f} / {pf:,.0f} | {rss.get('luatune', 0):.2f} / "
          f"{rss.get('pytorch', 0):.2f} | {len(done)} |")
PY
