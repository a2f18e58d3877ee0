#!/usr/bin/env bash
# tests/cli/test_user_errors.sh RUNNER WORKDIR: user mistakes found at run time (a broken JSONL line,
# an empty evaluation split, a wrong adapter path) end in one line without a traceback and leave no
# run.json behind; quickstart's one report.html holds both stages and the accuracy table, and
# `runner report` reads quickstart's directory (issue 32). On a tiny model tiny_model writes here.
set -u
runner=${1:?usage: test_user_errors.sh path/to/runner WORKDIR}
tmp=${2:?usage: test_user_errors.sh path/to/runner WORKDIR}
rm -rf "$tmp" && mkdir -p "$tmp"
failed=0 checks=0

source tests/cli/lib.sh

check tiny_model 0 "$runner" tiny_model num_hidden_layers=1 output_dir="$tmp/tiny"
base=$tmp/tiny
printf '{"text":"one two three four"}\n{"text": broken\n{"text":"five six"}\n' >"$tmp/broken.jsonl"
printf '{"text":"one two three four five six seven eight"}\n' >"$tmp/one.jsonl"
train=(base_model="$base" max_steps=2 warmup_steps=0 batch_size=1 max_length=16 device=cpu dtype=fp32)

# --- a broken JSONL line: the line and what was expected, no traceback, output_dir as it was
check broken_line 1 "$runner" full_finetune data="$tmp/broken.jsonl" output_dir="$tmp/broken" "${train[@]}"
expect_out "$tmp/broken.jsonl:2: expected a JSON object"; refute_out "stack traceback"
check broken_line_no_output_dir 0 test ! -e "$tmp/broken"
# With the line fixed, the same output_dir is free for the run (nothing of the failed one is in it).
for i in $(seq 1 20); do printf '{"text":"record %d of twenty, a few words"}\n' "$i"; done >"$tmp/fixed.jsonl"
check fixed_line_same_output_dir 0 "$runner" full_finetune data="$tmp/fixed.jsonl" output_dir="$tmp/broken" \
  eval_fraction=0.1 "${train[@]}"
check fixed_line_run_json 0 test -s "$tmp/broken/run.json"
rm -rf "$tmp/broken"
# An output_dir that was there before (made by the user, empty) stays, and empty.
mkdir -p "$tmp/made"
check broken_line_made_dir 1 "$runner" full_finetune data="$tmp/broken.jsonl" output_dir="$tmp/made" "${train[@]}"
check broken_line_made_dir_kept_empty 0 test -d "$tmp/made" -a -z "$(ls -A "$tmp/made")"
# LUATUNE_TRACEBACK=1 (or --traceback) shows where it came from.
check broken_line_traceback_env 1 env LUATUNE_TRACEBACK=1 "$runner" full_finetune data="$tmp/broken.jsonl" \
  output_dir="$tmp/broken" "${train[@]}"
expect_out "$tmp/broken.jsonl:2: expected a JSON object"; expect_out "stack traceback:"
check broken_line_traceback_flag 1 "$runner" full_finetune --traceback data="$tmp/broken.jsonl" \
  output_dir="$tmp/broken" "${train[@]}"
expect_out "stack traceback:"

# --- one record: nothing is left to evaluate on. Whether that is an error or a warning, no traceback.
"$runner" full_finetune data="$tmp/one.jsonl" output_dir="$tmp/no_eval" "${train[@]}" >"$tmp/no_eval.log" 2>&1
rc=$?
checks=$((checks + 1))
if grep -q "stack traceback" "$tmp/no_eval.log" || { [ "$rc" != 0 ] && ! grep -q "^error: \|^config: " "$tmp/no_eval.log"; }; then
  echo "FAIL empty_eval_split: exit status $rc, a traceback or no one-line error"
  sed 's/^/    /' "$tmp/no_eval.log" | tail -20
  failed=$((failed + 1))
fi

# --- a wrong adapter= path: a LoRA run's output_dir instead of its adapter/, caught with the config
mkdir -p "$tmp/lora_run/adapter" && printf '{}\n' >"$tmp/lora_run/adapter/adapter_config.json"
check adapter_run_dir 2 "$runner" export_gguf model="$base" output="$tmp/x.gguf" adapter="$tmp/lora_run"
expect_out "adapter = \"$tmp/lora_run\" (command line): holds no adapter_config.json; its adapter/ does: adapter = \"$tmp/lora_run/adapter\""
refute_out "stack traceback"
check adapter_not_adapter 2 "$runner" export_gguf model="$base" output="$tmp/x.gguf" adapter="$tmp/tiny"
expect_out "holds no adapter_config.json (expected a PEFT adapter directory)"
check adapter_no_gguf_written 0 test ! -e "$tmp/x.gguf"
# The same mistake through the Lua API, found at run time: one line with the hint, no traceback.
cat >"$tmp/export_api.lua" <<'EOF'
local cfg = config { from = "", to = "", lora_dir = "" }
export.gguf(cfg.from, cfg.to, { adapter = cfg.lora_dir })
EOF
check adapter_api 1 "$runner" "$tmp/export_api.lua" from="$base" to="$tmp/x.gguf" lora_dir="$tmp/lora_run"
expect_out "$tmp/lora_run/adapter_config.json: missing (expected a PEFT adapter directory)"
expect_out "HINT: a LoRA run's adapter is in $tmp/lora_run/adapter"; refute_out "stack traceback"
# The recipe's help shows an adapter path that works.
check export_gguf_help 0 "$runner" help export_gguf
expect_out "adapter=out/lora/adapter"; refute_out "adapter=out/lora]"

# --- a bug keeps its traceback: an internal Lua error in a script
printf 'local cfg = config { n = 1 }\nlocal t = nil\nprint(t.x)\n' >"$tmp/bug.lua"
check bug_traceback 1 "$runner" "$tmp/bug.lua"
expect_out "attempt to index local 't' (a nil value)"; expect_out "stack traceback:"

# --- quickstart: one report.html with both stages and the accuracy table; runner report reads its directory
tok=tokenizers/llama3_1
if [ -f "$tok/tokenizer.json" ]; then
  qs=$tmp/quickstart
  check quickstart 0 "$runner" quickstart_tiny pretrain.max_steps=3 lora.max_steps=3 output_dir="$qs"
  expect_out "report: $qs/report.html"
  check quickstart_one_report 0 test -s "$qs/report.html" -a -s "$qs/report.md" -a ! -e "$qs/pretrain.report.html" \
    -a ! -e "$qs/lora.report.html"
  check quickstart_report_phases 0 grep -q '<tr><td>LoRA (questions and answers)</td><td>steps 4–6</td></tr>' "$qs/report.html"
  check quickstart_report_accuracy 0 grep -qE '^\| 6 \| LoRA \(questions and answers\) \| [0-9.]+ \| [0-9.]+ \|$' "$qs/report.md"
  check quickstart_report_accuracy_columns 0 grep -q '| step | phase | eval_acc_held_out | eval_acc_seen |' "$qs/report.md"
  check quickstart_report_loss_both_stages 0 \
    test "$(grep -o 'data-name="loss" points="[^"]*"' "$qs/report.html" | grep -o '[0-9.]*,[0-9.]*' | wc -l)" -eq 6
  rm "$qs/report.html" "$qs/report.md"
  check report_quickstart_dir 0 "$runner" report "$qs"
  expect_exact "report: $qs/report.html"
  check report_quickstart_redrawn 0 grep -q '<h2>Evaluations</h2>' "$qs/report.html"
else
  echo "skipped the quickstart checks: no $tok (scripts/setup.sh fetches it)"
fi
check quickstart_help 0 "$runner" help quickstart
expect_out "SmolLM2-135M-Instruct"
check quickstart_tiny_help 0 "$runner" help quickstart_tiny
expect_out "a minute on 2 CPU cores"; refute_out "a few minutes"

# --- runner report on a directory a recipe wrote without a log says so
check report_no_log 1 "$runner" report "$tmp/tiny"
expect_exact "error: report: no metrics file '$tmp/tiny/metrics.jsonl' (metrics.open{jsonl = OUTPUT_DIR .. \"/metrics.jsonl\"} writes it)"
check report_help 0 "$runner" report --help
expect_out "usage: runner report OUTPUT_DIR [--out FILE]"

cli_finish
