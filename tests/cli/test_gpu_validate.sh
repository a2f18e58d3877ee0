#!/usr/bin/env bash
# tests/cli/test_gpu_validate.sh RUNNER WORKDIR: scripts/gpu-validate.sh --dry-run on this CPU machine
# (issue 19; docs/gpu.md): the report lists every step of every part with a status and a reason, no
# step failed or ran out of time (a missing benchmark script is a failure: the harness is only
# ready when every script it calls exists), the GPU-only steps say why they were skipped, and the
# CPU-side code paths really ran: the tiny-shape benchmark through bench/gpu/train_bench.lua, the
# recipes' torchrun arguments, `runner plan` for every benchmarked shape.
set -u
runner=${1:?usage: test_gpu_validate.sh path/to/runner WORKDIR}
work=${2:?usage: test_gpu_validate.sh path/to/runner WORKDIR}
rm -rf "$work"
mkdir -p "$work"
start=$(date +%s)
if ! scripts/gpu-validate.sh --dry-run --build-dir "$(dirname "$runner")" --work "$work/work" "$work/out" \
     >"$work/driver.log" 2>&1; then
  echo "FAIL gpu-validate.sh exited non-zero"; cat "$work/driver.log"; exit 1
fi
cat "$work/driver.log"
echo "dry run: $(( $(date +%s) - start )) s"
plan_fails=0
grep -q "^plan for --budget 570 s in device calls of at most 570 s" "$work/driver.log" ||
  { echo "FAIL the dry run does not print its plan first"; plan_fails=1; }
# The plan at the budget a 15-minute lease leaves (docs/gpu.md): two calls, the smoke step before any
# benchmark, the time of each call and of the whole.
scripts/gpu-validate.sh --plan --budget 780 >"$work/plan780.txt" 2>&1 ||
  { echo "FAIL --plan --budget 780 exited non-zero"; plan_fails=1; }
cat "$work/plan780.txt"
grep -q "^  call 2 ([0-9]* s; scripts/gpu-validate.sh --budget 780 --continue" "$work/plan780.txt" ||
  { echo "FAIL --budget 780: no second call"; plan_fails=1; }
grep -qE "^planned: [0-9]+ steps in 2 call\(s\), about [0-9]+ s of 780" "$work/plan780.txt" ||
  { echo "FAIL --budget 780: no total"; plan_fails=1; }
[ "$(grep -nE '^    (smoke|bench:)' "$work/plan780.txt" | head -1 | grep -c smoke)" = 1 ] ||
  { echo "FAIL --budget 780: a benchmark before the smoke step"; plan_fails=1; }
[ "$plan_fails" = 0 ] || exit 1
python3 - "$work/out" <<'EOF'
import json, os, sys, tarfile
out = sys.argv[1]
failures = []
def check(ok, what):
    if not ok:
        failures.append(what)
with open(os.path.join(out, "gpu-report.json")) as f:
    report = json.load(f)
steps = {s["name"]: s for s in report["steps"]}
expected = ["build", "smoke", "gpu_tests", "nf4_kernels", "torchrun_lora_ws1", "shard_full_1gpu", "hf_fixtures",
            "hf_parity", "hf_roundtrip", "whole_suite", "planner", "planner:8b", "planner:long"]
for shape, methods in (("tiny", "full lora qlora"), ("llama-3.2-1b", "full lora qlora"),
                       ("llama-3.1-8b", "full lora qlora")):
    expected += ["bench:%s:%s:%s" % (shape, m, side) for m in methods.split() for side in ("luatune", "hf")]
for name in expected:
    check(name in steps, "step %s missing from the report" % name)
for s in report["steps"]:
    check(s["status"] in ("ok", "skipped"), "%s: %s: %s" % (s["name"], s["status"], s.get("reason")))
    check(s["status"] == "ok" or s.get("reason"), "%s: skipped without a reason" % s["name"])
    check(isinstance(s.get("seconds"), (int, float)) and isinstance(s.get("result"), dict) and s.get("log"),
          "%s: lacks seconds, result or log" % s["name"])
for name in ("smoke", "gpu_tests", "nf4_kernels"):
    check(steps.get(name, {}).get("reason") in ("no CUDA", "dry run (CPU only)"), "%s: not skipped for CUDA" % name)
check(steps.get("whole_suite", {}).get("reason") == "dry run (CI runs the suite)", "whole_suite's reason")
for name in ("torchrun_lora_ws1", "shard_full_1gpu"):  # the recipe's arguments ran on the CPU
    check("ran on the CPU without torchrun (exit 0)" in steps.get(name, {}).get("reason", ""), name + " did not run")
    check(steps.get(name, {}).get("result", {}).get("loss", 0) > 0, name + ": no loss")
for m in ("full", "lora", "qlora"):
    s = steps.get("bench:tiny:%s:luatune" % m, {})
    check(s.get("status") == "ok" and s.get("result", {}).get("tokens_per_s", 0) > 0,
          "bench:tiny:%s:luatune measured nothing" % m)
    hf = steps.get("bench:tiny:%s:hf" % m, {})
    check(hf.get("status") == "ok" or "not importable" in hf.get("reason", "") or "needs CUDA" in hf.get("reason", ""),
          "bench:tiny:%s:hf: %s" % (m, hf))
    check(steps.get("bench:llama-3.2-1b:%s:luatune" % m, {}).get("reason") in ("no CUDA", "dry run (CPU only)"),
          "llama-3.2-1b %s not skipped for CUDA" % m)
# The generation pair (issue 42): luatune's decoding measured on the tiny shape, the 1B pair skipped for CUDA.
d = steps.get("decode:tiny:luatune", {})
check(d.get("status") == "ok" and d.get("result", {}).get("tokens_per_s", 0) > 0 and
      d.get("result", {}).get("new_tokens", 0) > 1, "decode:tiny:luatune measured nothing: %s" % d)
hd = steps.get("decode:tiny:hf", {})
check(hd.get("status") == "ok" or "hf_decode" in hd.get("reason", ""), "decode:tiny:hf: %s" % hd.get("reason"))
for side in ("luatune", "hf"):
    check(steps.get("decode:llama-3.2-1b:%s" % side, {}).get("reason") in ("no CUDA", "dry run (CPU only)"),
          "decode:llama-3.2-1b:%s not skipped for CUDA" % side)
# Two traced steps of each side, counted by the same scripts/gpu/trace_summary.py (docs/profiling.md).
for side in ("luatune", "hf"):
    t = steps.get("trace:tiny:full:%s" % side, {})
    per = t.get("result", {}).get("per_step", {})
    check(t.get("status") == "ok" or (side == "hf" and "not importable" in t.get("reason", "")),
          "trace:tiny:full:%s: %s" % (side, t.get("reason")))
    if t.get("status") == "ok":
        check(per.get("aten_ops", 0) > 0 and per.get("forward", 0) > 0 and per.get("backward", 0) > 0
              and per.get("optimizer", 0) > 0, "trace:tiny:full:%s: no ops counted per phase: %s" % (side, per))
        check(len(t["result"].get("top", [])) > 0, "trace:tiny:full:%s: no top ops" % side)
# llama31_sheared's phases (tiny on the CPU) against `runner plan`'s plan of each.
sp = steps.get("sheared_phases", {})
check(sp.get("status") == "ok", "sheared_phases: %s: %s" % (sp.get("status"), sp.get("reason")))
prow = {r.get("phase"): r for r in sp.get("result", {}).get("rows", [])}
check(set(prow) == {"pruning", "recovery"} and all(r.get("predicted_total_gib", 0) > 0 for r in prow.values()),
      "sheared_phases rows: %s" % prow)
check(prow.get("recovery", {}).get("teacher_gib", 0) >= 0 and "teacher" in str(sp), "sheared_phases: no teacher term")
rows = steps.get("planner", {}).get("result", {}).get("rows", [])  # tiny and 1B: full, LoRA, QLoRA
check(len(rows) == 6 and all(r.get("predicted_total_gib", 0) > 0 for r in rows), "planner rows: %s" % rows)
rows = steps.get("planner:8b", {}).get("result", {}).get("rows", [])  # 8B QLoRA and LoRA
check(len(rows) == 2 and all(r.get("predicted_total_gib", 0) > 0 for r in rows), "planner:8b rows: %s" % rows)
rt = steps.get("hf_roundtrip", {})
check(rt.get("status") == "ok" or any(c.get("status") == "ok" for c in rt.get("result", {}).get("checks", [])),
      "hf_roundtrip: the luatune side did not run")
with open(os.path.join(out, "gpu-report.md")) as f:
    md = f.read()
check("**Dry run on the CPU: nothing here ran on a GPU.**" in md, "the report's dry-run banner")
check("## Where a step's time goes" in md, "the report lacks the traced steps' section")
for name in steps:
    check("| %s | " % name in md, "%s has no row in gpu-report.md" % name)
with tarfile.open(os.path.join(out, "logs.tar.gz")) as t:
    logs = set(t.getnames())
check(all(s["log"] in logs for s in report["steps"]), "logs.tar.gz lacks step logs")
for f in failures:
    print("FAIL " + f)
print("%d steps, %d failures" % (len(steps), len(failures)))
sys.exit(1 if failures else 0)
EOF
