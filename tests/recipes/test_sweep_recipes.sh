#!/usr/bin/env bash
# Sweeps end to end. A 6-trial sweep of tests/recipes/sweep_probe.lua (no model needed) two at a
# time, x = 3 failing on purpose: all 6 recorded, the failure reported with its error, results.md
# sorted by the metric; run again it runs nothing; `runner sweep --report`; a changed spec in the
# same output_dir refused; Ctrl-C stops the running trials, exits 130 and a rerun finishes them.
# Then the shipped sweeps on the tiny model (fixture tiny_llama) with tiny step counts:
# sweep_lora_rank (2 trials) and sweep_pruning (Sheared and Minitron, 2 sparsities each).
# Usage, from the repository root: tests/recipes/test_sweep_recipes.sh RUNNER TINY_MODEL_DIR WORKDIR
set -uo pipefail
runner=$1 base=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
lines() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }
statuses() {  # "name:status" of each trials.jsonl line
  python3 -c 'import json,sys
print(" ".join("%s:%s" % (j["name"], j["status"]) for j in map(json.loads, open(sys.argv[1]))))' "$1"
}

cat >"$work/probe_sweep.lua" <<'EOF'
-- A sweep of tests/recipes/sweep_probe.lua over x; x = 3 fails on purpose.
local cfg = config { output_dir = "out/probe_sweep", xs = { 0, 1, 2, 3, 4, 5 }, parallel = 2, counter = "",
                     sleep = 0 }
local results = sweep.run {
  recipe = "tests/recipes/sweep_probe.lua", output_dir = cfg.output_dir, parallel = cfg.parallel,
  fixed = { fail_at = 3, counter = cfg.counter, sleep = cfg.sleep },
  parameters = { x = { values = cfg.xs } },
  metric = { name = "eval_loss", goal = "minimize" }, columns = { "score.final" },
}
print(("sweep.run returned %d trials, best %s"):format(#results, results[1].name))
EOF

# ---------------------------------------------------------------------------------------------
# The probe sweep: 6 trials, one failing.
out=$work/probe
t0=$(date +%s.%N)
"$runner" sweep "$work/probe_sweep.lua" output_dir="$out" counter="$work/runs.txt" >"$work/probe.log" 2>&1
rc=$?
echo "probe sweep: 6 trials, 2 at a time: $(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(date +%s.%N)") s"
check "probe: the sweep exits 0 though a trial failed" test $rc -eq 0
check "probe: 6 trials recorded" test "$(lines "$out/trials.jsonl")" -eq 6
check "probe: each trial ran once" test "$(lines "$work/runs.txt")" -eq 6
check "probe: trial-004 (x = 3) failed, the others ok" test "$(statuses "$out/trials.jsonl" | tr ' ' '\n' | sort | tr '\n' ' ')" \
  = "trial-001:ok trial-002:ok trial-003:ok trial-004:failed trial-005:ok trial-006:ok "
check "probe: the failure's error recorded" python3 -c 'import json,sys
e = [j for j in map(json.loads, open(sys.argv[1])) if j["status"] == "failed"][0]["error"]
assert e.startswith("error: ") and "sweep_probe.lua:" in e and e.endswith(": probe: x = 3 fails on purpose"), e' "$out/trials.jsonl"
check "probe: progress line for the failure" grep -q "^trial 4/6 x=3: failed (exit 1): error: .*x = 3 fails on purpose" "$work/probe.log"
check "probe: progress line for a success" grep -Eq "^trial 3/6 x=2: ok eval_loss 0.1000 \([0-9]+s\)$" "$work/probe.log"
# eval_loss = (x - 2)^2 + 0.1: x = 2, 1, 0 (tie with 4, earlier first), 4, 5; then the failure.
check "probe: results.md sorted by eval_loss, the failure last" test \
  "$(grep -o '^| [0-9-]* | trial-00[0-9]' "$out/results.md" | tr -d '| ' | tr '\n' ' ')" = \
  "1trial-003 2trial-002 3trial-001 4trial-005 5trial-006 -trial-004 "
check "probe: results.md lists the failure with its error" grep -q \
  "^- trial-004 (failed, exit 1): error: .*x = 3 fails on purpose" "$out/results.md"
check "probe: the table is printed at the end" grep -q "6 of 6 trials finished: 5 ok, 1 failed" "$work/probe.log"
check "probe: sweep.run returned the trials best first" grep -q "sweep.run returned 6 trials, best trial-003" "$work/probe.log"

# Run again: nothing reruns.
"$runner" sweep "$work/probe_sweep.lua" output_dir="$out" counter="$work/runs.txt" >"$work/probe_again.log" 2>&1
check "probe again: exits 0" test $? -eq 0
check "probe again: nothing to run" grep -q "nothing to run" "$work/probe_again.log"
check "probe again: no trial ran" test "$(lines "$work/runs.txt")" -eq 6
check "probe again: trials.jsonl unchanged" test "$(lines "$out/trials.jsonl")" -eq 6
"$runner" sweep --report "$out" >"$work/report.log" 2>&1
check "report: exits 0" test $? -eq 0
check "report: the table" grep -q "^| 1 | trial-003 | 2 | 0.1000 | -0.4333 | ok |" "$work/report.log"
# The same output_dir with other values is another sweep: refused (exit 2), nothing run.
"$runner" sweep "$work/probe_sweep.lua" output_dir="$out" counter="$work/runs.txt" xs=0,1,7 >"$work/other.log" 2>&1
check "another sweep in the same output_dir: exit 2" test $? -eq 2
check "another sweep: says so" grep -q "holds another sweep: its parameters differ" "$work/other.log"
# A file that never calls sweep.run is not a sweep.
"$runner" sweep tests/recipes/sweep_probe.lua output_dir="$work/not_a_sweep" >"$work/not_a_sweep.log" 2>&1
check "runner sweep on a plain recipe: exit 2" test $? -eq 2
check "runner sweep on a plain recipe: says why" grep -q "ran no sweep (it never called sweep.run" "$work/not_a_sweep.log"

# Ctrl-C: the running trials get SIGTERM, are not recorded, the sweep exits 130; a rerun runs them.
out=$work/interrupt
"$runner" sweep "$work/probe_sweep.lua" output_dir="$out" xs=0,1 sleep=1 >"$work/interrupt.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
  [ -f "$out/trial-001/metrics.jsonl" ] && [ -f "$out/trial-002/metrics.jsonl" ] && break
  sleep 0.1
done
kill -INT $pid
wait $pid
rc=$?
check "interrupt: exit 130" test $rc -eq 130
check "interrupt: nothing recorded" test "$(lines "$out/trials.jsonl")" -eq 0
check "interrupt: the trials were stopped" grep -q "runner: stopped by SIGTERM" "$out/trial-001/trial.log"
check "interrupt: the sweep says so" grep -q "trial 1/2 x=0: interrupted" "$work/interrupt.log"
check "interrupt: one last line, no traceback" bash -c "! grep -q -e traceback -e '^error:' '$work/interrupt.log' &&
  tail -1 '$work/interrupt.log' | grep -q 'runner: stopped by Ctrl-C (SIGINT); sweep.run stopped the running trials'"
"$runner" sweep "$work/probe_sweep.lua" output_dir="$out" xs=0,1 sleep=1 >"$work/interrupt_resume.log" 2>&1
check "interrupt, resumed: exits 0" test $? -eq 0
check "interrupt, resumed: both trials ok" test "$(statuses "$out/trials.jsonl")" != "" -a \
  "$(statuses "$out/trials.jsonl" | tr ' ' '\n' | sort | tr '\n' ' ')" = "trial-001:ok trial-002:ok "

# ---------------------------------------------------------------------------------------------
# The shipped sweeps on the tiny model.
out=$work/lora
t0=$(date +%s.%N)
"$runner" sweep sweep_lora_rank base_model="$base" data=tests/fixtures/data/chat_small.jsonl output_dir="$out" \
  max_steps=2 eval_steps=2 trials=2 parallel=2 \
  recipe_args=dtype=fp32,device=cpu,batch_size=2,gradient_accumulation_steps=1,max_length=64,eval_fraction=0.1,save_steps=0 \
  >"$work/lora.log" 2>&1
rc=$?
echo "sweep_lora_rank: 2 trials, 2 at a time: $(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(date +%s.%N)") s"
check "sweep_lora_rank: exits 0" test $rc -eq 0
check "sweep_lora_rank: 2 trials ok (rank 4 and 8 at lr 1e-4)" test \
  "$(statuses "$out/trials.jsonl" | tr ' ' '\n' | sort | tr '\n' ' ')" = "trial-001:ok trial-002:ok "
check "sweep_lora_rank: lora.alpha tied to 2 x lora.r" grep -q '"config":{"learning_rate":0.0001,"lora.r":8,"lora.alpha":16}' \
  "$out/trials.jsonl"
check "sweep_lora_rank: each trial wrote its adapter" test -f "$out/trial-001/adapter/adapter_config.json" -a \
  -f "$out/trial-002/adapter/adapter_config.json"
check "sweep_lora_rank: results.md by eval_loss" grep -q "^| rank | trial | learning_rate | lora.r | lora.alpha | eval_loss | eval_perplexity | status | seconds |" \
  "$out/results.md"
check "sweep_lora_rank: names the best" grep -q "^best: trial-00[12], lora.r=[48] learning_rate=0.0001: eval_loss" "$work/lora.log"

for pruner in sheared minitron; do
  out=$work/pruning_$pruner
  t0=$(date +%s.%N)
  "$runner" sweep sweep_pruning pruner=$pruner base_model="$base" data=tests/fixtures/data/text_small.jsonl \
    output_dir="$out" sparsities=0.25,0.5 max_steps=2 parallel=2 \
    recipe_args=dtype=fp32,device=cpu,batch_size=2,max_length=64,eval_fraction=0.2,$(
      [ $pruner = sheared ] && echo "gradient_accumulation_steps=1,eval_batches=2,eval_steps=100" ||
        echo "calibration_rows=4,distill.gradient_accumulation_steps=1,distill.warmup_steps=0") >"$work/pruning_$pruner.log" 2>&1
  rc=$?
  echo "sweep_pruning ($pruner): 2 trials, 2 at a time: $(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(date +%s.%N)") s"
  check "sweep_pruning ($pruner): exits 0" test $rc -eq 0
  check "sweep_pruning ($pruner): 2 trials ok" test \
    "$(statuses "$out/trials.jsonl" | tr ' ' '\n' | sort | tr '\n' ' ')" = "trial-001:ok trial-002:ok "
  check "sweep_pruning ($pruner): the sparser trial keeps fewer parameters" python3 -c 'import json,sys
t = {j["name"]: j["metrics"]["parameters_kept"] for j in map(json.loads, open(sys.argv[1]))}
assert 0 < t["trial-002"] < t["trial-001"] < 1, t' "$out/trials.jsonl"
  check "sweep_pruning ($pruner): pareto.md, largest first, the smallest on the front" python3 -c 'import sys
rows = [l.split("|")[1:-1] for l in open(sys.argv[1]) if l.startswith("| trial-")]
assert [r[0].strip() for r in rows] == ["trial-001", "trial-002"], rows
assert rows[1][5].strip() == "yes" and all(r[6].strip() == "ok" for r in rows), rows' "$out/pareto.md"
done

finish
