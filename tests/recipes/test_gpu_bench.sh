#!/usr/bin/env bash
# The training benchmark pair of docs/gpu_bench.md on the CPU at shape=tiny: bench/gpu/train_bench.lua
# for full, LoRA and QLoRA writes every field, with params and trainable params equal to the analytic
# counts and FLOPs per token equal to hf_train_bench.py's copy of luatune's convention; MFU appears only
# with a peak; out of memory is a result ({"status": "oom"}, exit 0). The HF side runs where torch,
# transformers and peft import (the same checks), and otherwise must skip with exit 3 and one line.
# Usage, from the repository root: tests/recipes/test_gpu_bench.sh RUNNER WORKDIR
set -uo pipefail
export PYTHONDONTWRITEBYTECODE=1  # importing bench/gpu/hf_train_bench.py leaves no __pycache__ in the tree
runner=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh

# Fields and values of one result file: python3 exits 1 naming the first wrong one.
sane() {
  python3 - "$@" <<'EOF'
import json, math, sys
sys.path.insert(0, "bench/gpu")
import hf_train_bench as h
path, method, library = sys.argv[1:4]
peak = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
j = json.load(open(path))
c = h.load_shape("tiny")["config"]
lora = h.lora_param_count(c, 16)
want = {"library": library, "shape": "tiny", "method": method, "seq": 64, "batch": 2, "steps": 3, "dtype": "bf16",
        "status": "ok", "params": h.param_count(c), "trainable_params": h.param_count(c) if method == "full" else lora,
        "flops_per_token": h.flops_per_token(c, method, 0 if method == "full" else lora, 64)}
for k, v in want.items():
    if j.get(k) != v:
        sys.exit(f"{path}: {k} = {j.get(k)!r}, expected {v!r}")
for k in ("tokens_per_s", "step_time_s", "peak_memory_gb", "setup_s", "loss"):
    if not (isinstance(j.get(k), (int, float)) and j[k] > 0 and math.isfinite(j[k])):
        sys.exit(f"{path}: {k} = {j.get(k)!r}, expected a positive number")
if abs(j["tokens_per_s"] * j["step_time_s"] - 128) > 1e-6:
    sys.exit(f"{path}: tokens_per_s x step_time_s != batch x seq")
mfu = j["tokens_per_s"] * j["flops_per_token"] / (peak * 1e12) if peak else None
if (j["mfu"] is None) != (mfu is None) or (mfu is not None and abs(j["mfu"] - mfu) > 1e-9 * mfu):
    sys.exit(f"{path}: mfu = {j['mfu']!r}, expected {mfu!r}")
if j["device"] != "cpu" or j["peak_memory_kind"] != "process_max_rss":
    sys.exit(f"{path}: device {j['device']!r} / peak_memory_kind {j['peak_memory_kind']!r}")
EOF
}

args="shape=tiny seq=64 batch=2 steps=3 warmup=1 device=cpu dtype=bf16"
for m in full lora qlora; do
  "$runner" bench/gpu/train_bench.lua $args method=$m out="$work/lt-$m.json" >"$work/lt-$m.log" 2>&1
  check "train_bench $m: exits 0" test $? -eq 0
  check "train_bench $m: fields and counts" sane "$work/lt-$m.json" $m luatune
done
"$runner" bench/gpu/train_bench.lua $args method=lora peak_tflops=0.5 out="$work/lt-mfu.json" >"$work/lt-mfu.log" 2>&1
check "train_bench peak_tflops=0.5: MFU from the convention" sane "$work/lt-mfu.json" lora luatune 0.5

# Out of memory is a result: a shape no machine holds (~0.4 P parameters; models.init refuses it before allocating).
python3 -c 'import json; s = json.load(open("bench/gpu/shapes.json")); c = dict(s["shapes"]["tiny"]);
c["config"] = dict(c["config"], num_hidden_layers=1024, hidden_size=131072, intermediate_size=1048576)
s["shapes"]["huge"] = c
json.dump(s, open("'"$work"'/shapes.json", "w"))'
"$runner" bench/gpu/train_bench.lua shape=huge shapes="$work/shapes.json" device=cpu out="$work/lt-oom.json" \
  >"$work/lt-oom.log" 2>&1
check "train_bench oom: exits 0" test $? -eq 0
check_json "train_bench oom: status oom with the error" "$work/lt-oom.json" \
  'j["status"] == "oom" and "models.init" in j["error"] and j["shape"] == "huge"'
"$runner" bench/gpu/train_bench.lua shape=nope out="$work/lt-bad.json" >"$work/lt-bad.log" 2>&1
check "train_bench unknown shape: fails naming the shapes" \
  grep -q "unknown shape 'nope' (shapes.json has" "$work/lt-bad.log"

# The HF side, with the environment's PyTorch and transformers (LUATUNE_PYTHON): a full run where the
# packages import, else exit 3 with one line on stderr.
for m in full lora; do
  "${LUATUNE_PYTHON:-python3}" bench/gpu/hf_train_bench.py --shape tiny --method $m --seq 64 --batch 2 --steps 3 --warmup 1 \
    --device cpu --dtype bf16 --out "$work/hf-$m.json" >"$work/hf-$m.log" 2>"$work/hf-$m.err"
  rc=$?
  if [ $rc -eq 3 ]; then
    check "hf_train_bench $m: skipped in one line ($(cat "$work/hf-$m.err"))" \
      test "$(wc -l <"$work/hf-$m.err")" -eq 1 -a "$(grep -c '^hf_train_bench: skipped: ' "$work/hf-$m.err")" -eq 1
  else
    check "hf_train_bench $m: exits 0" test $rc -eq 0
    check "hf_train_bench $m: fields and counts" sane "$work/hf-$m.json" $m hf
  fi
done
finish
