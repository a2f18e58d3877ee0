#!/usr/bin/env bash
# Trustworthy runs (docs/checkpoints.md), end to end on the tiny model:
# - output_dir is a contract: a fresh run refuses another run's checkpoints (exit 2, one line; the
#   other outputs a run writes: test_output_dir.sh),
#   overwrite=true moves that run to previous-<time>/, run.json says what made the directory;
# - resume says what it resumed and warns for each changed config key, refuses a changed shape;
# - a newest checkpoint missing a file is skipped; leftovers of killed saves are cleaned up;
# - a checkpoint never runs ahead of metrics.jsonl (a kill right after a step, before its row);
# - SIGTERM saves: one process, runner --nproc 2 and a sweep trial stop after a step with a
#   checkpoint of it and exit 130 without a traceback, and resume=true ends where an
#   uninterrupted run ends.
# Usage, from the repository root: tests/recipes/test_run_safety.sh RUNNER TINY_MODEL_DIR WORKDIR
set -uo pipefail
runner=$1 base=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
losses() {  # "step:loss:grad_norm" of each training line
  python3 -c 'import json,sys
print(" ".join("%d:%r:%r" % (j["step"], j["loss"], j["grad_norm"]) for j in map(json.loads, open(sys.argv[1])) if "loss" in j))' "$1"
}
wait_for_steps() {  # wait_for_steps FILE N: until FILE has N training lines (at most 120 s)
  for _ in $(seq 1 1200); do
    if [ -f "$1" ] && [ "$(grep -c '"loss"' "$1" 2>/dev/null)" -ge "$2" ]; then return 0; fi
    sleep 0.1
  done
  return 1
}
no_traceback() { ! grep -q -e "traceback" -e "^error:" "$1"; }
data=tests/fixtures/data/chat_small.jsonl
common=(base_model="$base" data=$data dtype=fp32 device=cpu batch_size=2 gradient_accumulation_steps=1 max_length=64
  eval_steps=1000 eval_fraction=0.1 lora.dropout=0.1)

# ---------------------------------------------------------------------------------------------
# The output directory contract.
out=$work/used
"$runner" lora_finetune "${common[@]}" output_dir="$out" max_steps=5 save_steps=1 >"$work/used_a.log" 2>&1
check "contract: first run exits 0" test $? -eq 0
check "contract: run.json says what made the directory" test "$(json "$out/run.json" \
  'all(k in j for k in ("run_id", "config", "seed", "started", "luatune", "host")) and j["config"]["max_steps"] == 5')" = True
if git rev-parse --git-dir >/dev/null 2>&1; then
  check "contract: run.json has git describe in a checkout" test "$(json "$out/run.json" '"git_describe" in j')" = True
fi
"$runner" lora_finetune "${common[@]}" output_dir="$out" max_steps=3 save_steps=1 >"$work/used_b.log" 2>&1
rc=$?
check "contract: a fresh run into a used output_dir exits 2" test $rc -eq 2
check "contract: one line naming the directory and both ways out" bash -c \
  "tail -1 '$work/used_b.log' | grep -q 'output_dir: $out holds another run.s outputs (.*checkpoints/.*); continue that run with resume=true, or start afresh with overwrite=true'"
check "contract: the refused run touched nothing" test -d "$out/checkpoints/step-0000005" -a -d "$out/checkpoints/step-0000004"
"$runner" lora_finetune "${common[@]}" output_dir="$out" max_steps=3 save_steps=1 overwrite=true >"$work/used_c.log" 2>&1
check "contract: overwrite=true runs" test $? -eq 0
prev=$(ls -d "$out"/previous-* 2>/dev/null | head -1)
check "contract: the old run moved whole to previous-<time>/" \
  test -n "$prev" -a -d "$prev/checkpoints/step-0000005" -a -f "$prev/metrics.jsonl" -a -f "$prev/run.json"
check "contract: the new run keeps its own last two checkpoints" \
  test "$(ls "$out/checkpoints")" = "$(printf 'step-0000002\nstep-0000003')"

# ---------------------------------------------------------------------------------------------
# Resume tells what it resumed, warns for changed keys, refuses a changed shape.
"$runner" lora_finetune "${common[@]}" output_dir="$out" max_steps=4 save_steps=1 resume=true learning_rate=1e-4 \
  >"$work/resume_a.log" 2>&1
check "resume: exits 0" test $? -eq 0
check "resume: says where it resumed from" grep -q "resumed from step 3 of 4 (checkpoint $out/checkpoints/step-0000003)" "$work/resume_a.log"
check "resume: warns that learning_rate changed" \
  grep -q "warning: resume: learning_rate is 0.0001 now, 0.0002 in the checkpointed run" "$work/resume_a.log"
check "resume: warns that max_steps changed" grep -q "warning: resume: max_steps is 4 now, 3 in the checkpointed run" "$work/resume_a.log"
check "resume: run.json records the resume" \
  test "$(json "$out/run.json" '[(r["step"], r["changed"]) for r in j["resumes"]]')" = "[(3, ['learning_rate', 'max_steps'])]"
check "resume: metrics.jsonl has every step once" test "$(steps_logged "$out/metrics.jsonl")" = "1 2 3 4"
"$runner" lora_finetune "${common[@]}" output_dir="$out" max_steps=6 save_steps=1 resume=true learning_rate=1e-4 lora.r=8 \
  >"$work/resume_b.log" 2>&1
check "resume: a changed LoRA rank is refused" test $? -ne 0
check "resume: ... naming the tensor and the changed key" \
  grep -q "has shape.*config keys changed since the checkpoint: lora.r, max_steps" "$work/resume_b.log"

# A newest checkpoint that lost a file (a kill while it was replaced, a full disk) is skipped.
rm "$out/checkpoints/step-0000004/state.safetensors"
mkdir -p "$out/checkpoints/step-0000009.tmp-999999999" "$out/checkpoints/step-0000003.old-1"
"$runner" lora_finetune "${common[@]}" output_dir="$out" max_steps=4 save_steps=1 resume=true learning_rate=1e-4 \
  >"$work/resume_c.log" 2>&1
check "incomplete: resume exits 0" test $? -eq 0
check "incomplete: warns and takes the previous checkpoint" \
  grep -q "skipping the incomplete checkpoint $out/checkpoints/step-0000004 (state.safetensors is missing); taking $out/checkpoints/step-0000003" "$work/resume_c.log"
check "incomplete: resumed from step 3" grep -q "resumed from step 3 of 4" "$work/resume_c.log"
check "incomplete: leftovers of killed saves are gone" \
  test ! -e "$out/checkpoints/step-0000009.tmp-999999999" -a ! -e "$out/checkpoints/step-0000003.old-1"
check "incomplete: step 4 is whole again" test -f "$out/checkpoints/step-0000004/state.safetensors"

# ---------------------------------------------------------------------------------------------
# A checkpoint never holds a step metrics.jsonl does not: the process dies right after step 3
# returns, before its row is written (save_steps=1); the resumed run logs every step once.
cat >"$work/kill_after_step.lua" <<'LUA'
local cfg = config { base = "", data = "", output_dir = "", steps = 6, kill_at = 0, resume = false, overwrite = false }
local tok = tokenizer.load(cfg.base)
local model = models.load(cfg.base, { dtype = "float32" })
lora.apply(model, { r = 4, alpha = 8, dropout = 0.1, targets = { "q_proj", "v_proj" }, seed = 1 })
local ds = data.jsonl(cfg.data, { tokenizer = tok, max_length = 64, pack = true, seed = 1 })
local trainer = train.new(model, { learning_rate = 1e-3, schedule = "constant", max_steps = cfg.steps, output_dir = cfg.output_dir,
                                   save_steps = 1 })
local start = cfg.resume and trainer:resume() or 0
local log = metrics.open { console = false, jsonl = cfg.output_dir .. "/metrics.jsonl", resume = start }
for step, batch in ds:batches { size = 2, max_steps = cfg.steps, start = start } do
  local s = trainer:step(batch)
  if step == cfg.kill_at then os.execute("kill -9 " .. io.open("/proc/self/stat"):read("*l"):match("^(%d+)")) end
  log:write(step, s)
end
log:close()
LUA
out=$work/killed
("$runner" "$work/kill_after_step.lua" base="$base" data=$data output_dir="$out" kill_at=3 >"$work/killed_a.log" 2>&1) 2>/dev/null
check "logs first: the killed run died" test $? -ne 0
"$runner" "$work/kill_after_step.lua" base="$base" data=$data output_dir="$out" resume=true >"$work/killed_b.log" 2>&1
check "logs first: the resumed run exits 0" test $? -eq 0
check "logs first: every step logged exactly once" test "$(steps_logged "$out/metrics.jsonl")" = "1 2 3 4 5 6"

# ---------------------------------------------------------------------------------------------
# SIGTERM saves. The reference: 12 uninterrupted steps.
ref=$work/straight
"$runner" lora_finetune "${common[@]}" output_dir="$ref" max_steps=12 save_steps=0 >"$work/straight.log" 2>&1
check "sigterm: uninterrupted run exits 0" test $? -eq 0
out=$work/term
"$runner" lora_finetune "${common[@]}" output_dir="$out" max_steps=12 save_steps=0 >"$work/term_a.log" 2>&1 &
pid=$!
wait_for_steps "$out/metrics.jsonl" 3
kill -TERM $pid
wait $pid
rc=$?
check "sigterm: exits 130" test $rc -eq 130
check "sigterm: no traceback, no error line" no_traceback "$work/term_a.log"
last=$(steps_logged "$out/metrics.jsonl" | awk '{print $NF}')
check "sigterm: says what it saved" grep -q "runner: stopped by SIGTERM after step $last; checkpoint $out/checkpoints/step-$(printf %07d "$last"); continue with resume=true" "$work/term_a.log"
check "sigterm: the checkpoint is of the last logged step" test -f "$out/checkpoints/step-$(printf %07d "$last")/trainer.json"
"$runner" lora_finetune "${common[@]}" output_dir="$out" max_steps=12 save_steps=0 resume=true >"$work/term_b.log" 2>&1
check "sigterm: resumed run exits 0" test $? -eq 0
check "sigterm: resumed losses equal the uninterrupted run's" test "$(losses "$out/metrics.jsonl")" = "$(losses "$ref/metrics.jsonl")"
check "sigterm: adapters equal" cmp "$out/adapter/adapter_model.safetensors" "$ref/adapter/adapter_model.safetensors"

# Two ranks: SIGTERM to the launcher; both ranks stop after the same step and save it.
dist=(tests/dist/ddp_train.lua size=2 lr=1e-3)
"$runner" --nproc 2 "${dist[@]}" steps=10 out="$work/ddp_ref" >"$work/ddp_ref.log" 2>&1
check "sigterm --nproc 2: uninterrupted run exits 0" test $? -eq 0
"$runner" --nproc 2 "${dist[@]}" steps=10 out_dir="$work/ddp/ck" out="$work/ddp" >"$work/ddp_a.log" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do grep -q "^step 3 " "$work/ddp_a.log" 2>/dev/null && break; sleep 0.1; done
kill -TERM $pid
wait $pid
rc=$?
check "sigterm --nproc 2: exits 130" test $rc -eq 130
check "sigterm --nproc 2: both ranks stopped after the same step" test "$(grep -o 'stopped by SIGTERM after step [0-9]*' "$work/ddp_a.log" | sort -u | wc -l)" -eq 1 \
  -a "$(grep -c 'stopped by SIGTERM after step' "$work/ddp_a.log")" -eq 2
check "sigterm --nproc 2: no traceback" no_traceback "$work/ddp_a.log"
dlast=$(grep -o 'stopped by SIGTERM after step [0-9]*' "$work/ddp_a.log" | head -1 | awk '{print $NF}')
check "sigterm --nproc 2: a checkpoint of that step" test -f "$work/ddp/ck/checkpoints/step-$(printf %07d "${dlast:-0}")/trainer.json"
# ddp_train.lua's losses.txt is written at the end (or at kill_after): rebuild the stopped run's
# first losses from its log so the resumed run appends to them.
grep "^step " "$work/ddp_a.log" | awk -v n="${dlast:-0}" '$2 <= n {print $4}' >"$work/ddp/losses.txt"
"$runner" --nproc 2 "${dist[@]}" steps=10 out_dir="$work/ddp/ck" out="$work/ddp" resume=true >"$work/ddp_b.log" 2>&1
check "sigterm --nproc 2: resumed run exits 0" test $? -eq 0
check "sigterm --nproc 2: resumed losses equal the uninterrupted run's" cmp "$work/ddp/losses.txt" "$work/ddp_ref/losses.txt"

# A sweep trial: SIGTERM to the sweep reaches the trial, which saves; the rerun resumes it.
cat >"$work/term_sweep.lua" <<LUA
local cfg = config { output_dir = "$work/sweep" }
sweep.run {
  recipe = "lora_finetune", output_dir = cfg.output_dir,
  fixed = { base_model = "$base", data = "$data", dtype = "fp32", device = "cpu", batch_size = 2,
            gradient_accumulation_steps = 1, max_length = 64, eval_steps = 1000, eval_fraction = 0.1, max_steps = 12,
            save_steps = 0 },
  parameters = { ["lora.r"] = { values = { 4 } } },
  metric = { name = "eval_loss", goal = "minimize" },
}
LUA
"$runner" sweep "$work/term_sweep.lua" >"$work/sweep_a.log" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
  m=$(ls "$work"/sweep/*/metrics.jsonl 2>/dev/null | head -1)
  if [ -n "$m" ] && [ "$(grep -c '"loss"' "$m")" -ge 3 ]; then break; fi
  sleep 0.1
done
kill -TERM $pid
wait $pid
rc=$?
check "sigterm sweep: exits 130" test $rc -eq 130
tdir=$(dirname "$(ls "$work"/sweep/*/metrics.jsonl | head -1)")
check "sigterm sweep: the trial saved a checkpoint" bash -c "ls '$tdir/checkpoints' | grep -q step-"
check "sigterm sweep: the trial stopped without a traceback" no_traceback "$tdir/trial.log"
"$runner" sweep "$work/term_sweep.lua" >"$work/sweep_b.log" 2>&1
check "sigterm sweep: rerun exits 0" test $? -eq 0
check "sigterm sweep: the rerun resumed the trial" grep -q "resuming from its checkpoint" "$work/sweep_b.log"
check "sigterm sweep: the trial logged every step once" test "$(steps_logged "$tdir/metrics.jsonl")" = "1 2 3 4 5 6 7 8 9 10 11 12"
finish
