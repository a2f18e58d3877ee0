#!/usr/bin/env bash
# profile=DIR (docs/profiling.md), end to end on the tiny model on the CPU: lora_finetune traces steps 2
# and 3 (profile_skip=1, profile_steps=2) and writes trace.json (Kineto's Chrome JSON, with the step,
# layer and phase ranges), summary.json (per-step wall time and host syncs, phases, the top ops by self
# time) and summary.md; nothing is left under a temporary name; a bad profile_steps or profile_skip
# fails with one line naming the key.
# Usage, from the repository root: tests/recipes/test_profile.sh RUNNER TINY_MODEL_DIR WORKDIR
set -uo pipefail
runner=$1 base=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
common=(base_model="$base" data=tests/fixtures/data/chat_small.jsonl dtype=fp32 device=cpu batch_size=2
  gradient_accumulation_steps=2 max_length=64 eval_steps=1000 eval_fraction=0.1 save_steps=0)

# ---------------------------------------------------------------------------------------------
# Bad values: one line, before any training.
for bad in profile_steps=0 profile_steps=1.5 profile_skip=-1; do
  key=${bad%%=*}
  "$runner" lora_finetune "${common[@]}" output_dir="$work/bad" max_steps=3 profile="$work/bad_prof" "$bad" \
    >"$work/bad_$key.log" 2>&1
  rc=$?
  check "bad $bad: exits 2 (a usage error)" test $rc -eq 2
  check "bad $bad: one line naming the key" test "$(grep -c "profile: $key must be a" "$work/bad_$key.log")" -eq 1
  check "bad $bad: the message is the last line, without a traceback" bash -c \
    "tail -1 '$work/bad_$key.log' | grep -q '^profile: $key must be a' && ! grep -qi traceback '$work/bad_$key.log'"
  check "bad $bad: no profile written" test ! -e "$work/bad_prof"
done

# ---------------------------------------------------------------------------------------------
# A profiled run: 4 steps, steps 2 and 3 traced.
prof=$work/prof
"$runner" lora_finetune "${common[@]}" output_dir="$work/run" max_steps=4 profile="$prof" profile_steps=2 \
  profile_skip=1 gradient_checkpointing=true >"$work/run.log" 2>&1
check "run: exits 0" test $? -eq 0
check "run: says where the trace is" grep -q "profile: 2 steps traced to $prof/trace.json" "$work/run.log"
check "run: trace.json, summary.json, summary.md" test -s "$prof/trace.json" -a -s "$prof/summary.json" -a -s "$prof/summary.md"
check "run: nothing left under a temporary name" test "$(ls "$prof" | sort | tr '\n' ' ')" = "summary.json summary.md trace.json "

# The trace: Chrome JSON whose traceEvents hold the ranges (user annotations) and the ops.
names() {  # the names of the trace's events of category $1, sorted, unique, space separated
  python3 -c 'import json,sys
j = json.load(open(sys.argv[1]))
print(" ".join(sorted({e.get("name", "") for e in j["traceEvents"] if e.get("cat") == sys.argv[2]})))' "$prof/trace.json" "$1"
}
ranges=" $(names user_annotation) "
check_json "trace: valid JSON with traceEvents" "$prof/trace.json" 'len(j["traceEvents"]) > 100'
for r in "step 2" "step 3" forward backward optimizer "layer 0" "layer 1"; do
  check "trace: a \"$r\" range" bash -c "[[ '$ranges' == *' $r '* ]]"
done
check "trace: only the profiled steps" bash -c "[[ '$ranges' != *'step 1 '* && '$ranges' != *'step 4 '* ]]"
check "trace: aten ops" bash -c "[[ ' $(names cpu_op) ' == *' aten::mm '* ]]"
# gradient_checkpointing recomputes each layer in backward: its range is inside a backward range too.
check "trace: layer ranges in forward and in backward (recompute)" test "$(python3 -c 'import json,sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("cat") == "user_annotation"]
inside = lambda a, b: b["ts"] <= a["ts"] and a["ts"] + a["dur"] <= b["ts"] + b["dur"]
layers = [e for e in ev if e["name"] == "layer 0"]
print(any(inside(l, f) for l in layers for f in ev if f["name"] == "forward") and
      any(inside(l, b) for l in layers for b in ev if b["name"] == "backward"))' "$prof/trace.json")" = True

# The summary.
s=$prof/summary.json
check "summary: device, steps and what was skipped" test "$(json "$s" \
  '(j["device"], j["profiled_steps"], j["skipped_steps"], [r["step"] for r in j["steps"]], j["trace"])')" \
  = "('cpu', 2, 1, [2, 3], 'trace.json')"
check_json "summary: wall time per step" "$s" 'all(r["wall_ms"] > 0 for r in j["steps"]) and j["per_step"]["wall_ms"] > 0'
# A training step reads nothing mid-step: its loss and norm come back in one copy after the update
# is queued, not through item() or nonzero() (the CPU proxy for a GPU wait; docs/profiling.md).
check_json "summary: no host syncs in a step (the item()/nonzero() proxy on CPU)" "$s" \
  'all(r["host_syncs"] == 0 and r["scalar_reads"] == 0 for r in j["steps"])'
check "summary: no GPU figures on CPU" test "$(json "$s" \
  '(j["per_step"]["gpu_busy_pct"], j["per_step"]["kernel_launches"], j["steps"][0]["gpu_busy_pct"], j["steps"][0]["kernel_launches"])')" \
  = "(None, None, None, None)"
check_json "summary: phases" "$s" 'all(j["phases_ms"][p] > 0 for p in ("forward", "backward", "optimizer"))'
check_json "summary: top CPU ops by self time, at most 20, sorted" "$s" \
  'j["top_kind"] == "cpu_ops" and 5 <= len(j["top"]) <= 20 and all(a["self_ms"] >= b["self_ms"] for a, b in zip(j["top"], j["top"][1:])) and all(t["calls"] > 0 and t["name"] for t in j["top"])'
check_json "summary: the shares are of all self time" "$s" '0 < sum(t["share_pct"] for t in j["top"]) <= 100.001'
check "summary.md: the step table, n/a on CPU, the top ops" bash -c \
  "grep -q '^| 2 |' '$prof/summary.md' && grep -q '^| 3 |' '$prof/summary.md' && grep -q 'n/a on CPU' '$prof/summary.md' && grep -q 'aten::' '$prof/summary.md'"
# The training itself is the same run: metrics for all 4 steps.
check "run: every step logged" test "$(steps_logged "$work/run/metrics.jsonl")" = "1 2 3 4"

# A run shorter than the window writes what it traced, with a warning.
"$runner" lora_finetune "${common[@]}" output_dir="$work/short" max_steps=2 profile="$work/short_prof" \
  profile_steps=3 >"$work/short.log" 2>&1
check "short run: exits 0" test $? -eq 0
check "short run: warns" grep -q "warning: profile: the run ended after 1 of 3 profiled steps" "$work/short.log"
check "short run: the one step it traced" test "$(json "$work/short_prof/summary.json" '[r["step"] for r in j["steps"]]')" = "[2]"
finish
