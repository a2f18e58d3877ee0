#!/usr/bin/env bash
# W&B end to end: recipes run by the runner against the loopback server (fake_wandb_server), with
# short intervals from the environment. A LoRA run on the tiny model (config, rows, complete), a
# recipe that fails midway (exit code 1 and the error in output.log), a stop from the UI (the loop
# ends early, exit 0), an offline run uploaded by `runner wandb-sync` (twice: the second sends
# nothing), a user:password@ in WANDB_BASE_URL in no file and no output, spool files 0600,
# `wandb-sync` refusing a spool that names another host (and uploading it with
# --trust-spool-host), and the API key in no file and no output.
# Usage, from the repository root: tests/recipes/test_wandb_recipes.sh RUNNER FAKE_SERVER TINY_MODEL_DIR WORKDIR
set -uo pipefail
runner=$1 server=$2 base=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh

key=luatuneRECIPEkey0123456789abcdefghijklmn  # 40 characters, like a real key
export WANDB_API_KEY=$key NETRC=/nonexistent
export WANDB_X_FILE_STREAM_TRANSMIT_INTERVAL=0.05 WANDB_X_FILE_STREAM_RETRY_WAIT_MIN_SECONDS=0.05
export WANDB_X_FILE_STREAM_RETRY_WAIT_MAX_SECONDS=0.2 WANDB_X_FINISH_TIMEOUT=10
unset WANDB_MODE WANDB_PROJECT WANDB_ENTITY WANDB_RUN_ID WANDB_DIR

server_pid=
start_server() {  # NAME [FLAGS...]: a fresh server dumping to $work/NAME.json; sets WANDB_BASE_URL
  local name=$1
  shift
  "$server" --key "$key" --dump "$work/$name.json" "$@" >"$work/$name.port" 2>"$work/$name.server.log" &
  server_pid=$!
  for _ in $(seq 200); do [ -s "$work/$name.port" ] && break; sleep 0.05; done
  export WANDB_BASE_URL=http://127.0.0.1:$(head -1 "$work/$name.port")
}
stop_server() {
  kill "$server_pid" 2>/dev/null
  wait "$server_pid" 2>/dev/null
}
trap stop_server EXIT
run1() {  # DUMP EXPR: EXPR on the only run in DUMP (as r), printed
  json "$1" "(lambda r: $2)(list(j['runs'].values())[0]) if len(j['runs']) == 1 else 'runs: %d' % len(j['runs'])"
}
rows() {  # DUMP: how many history rows carry a training loss
  run1 "$1" "sum(1 for line in r['history'] if 'loss' in json.loads(line))"
}

# LoRA on the tiny model: the recipe's resolved config, one row per step, complete with exit code 0.
start_server lora
"$runner" lora_finetune base_model="$base" data=tests/fixtures/data/chat_small.jsonl output_dir="$work/lora" \
  max_steps=3 save_steps=0 eval_steps=2 dtype=fp32 device=cpu batch_size=2 gradient_accumulation_steps=1 max_length=96 \
  wandb_project=tests >"$work/lora.log" 2>&1
check "lora: exits 0" test $? -eq 0
stop_server
dump=$work/lora.json
check "lora: no protocol errors" test "$(json "$dump" "len(j['errors'])")" = 0
check "lora: project from wandb_project" test "$(run1 "$dump" "r['project']")" = tests
check "lora: config has the recipe's resolved keys" test "$(run1 "$dump" \
  "sorted(k for k in ('learning_rate','max_steps','lora','base_model','wandb_project')
          if k in json.loads(r['variables']['config']))")" \
  = "['base_model', 'learning_rate', 'lora', 'max_steps', 'wandb_project']"
check "lora: config values as {value: v}" test "$(run1 "$dump" "json.loads(r['variables']['config'])['max_steps']")" \
  = "{'value': 3}"
check "lora: one row per step" test "$(rows "$dump")" = 3
check "lora: counts reach W&B as JSON integers, in trainer:step's order" test "$(run1 "$dump" \
  "all(type(x['tokens']) is int and type(x['target_tokens']) is int and type(x['_step']) is int
       and list(x)[:5] == ['loss', 'lr', 'grad_norm', 'tokens_per_s', 'tokens']
       for x in map(json.loads, r['history']) if 'loss' in x)")" = True
check "lora: eval rows too" test "$(run1 "$dump" "sum(1 for l in r['history'] if 'eval_loss' in json.loads(l))")" = 2
check "lora: summary has the last loss" test "$(run1 "$dump" "'loss' in json.loads(r['summary'])")" = True
check "lora: console lines in output.log" test "$(run1 "$dump" "any('step 3/3' in l for l in r['output'])")" = True
check "lora: complete, exit code 0" test "$(run1 "$dump" "(r['complete'], r['exit_code'])")" = "(True, 0)"
check "lora: spool beside metrics.jsonl" test -f "$work/lora/wandb/$(ls "$work/lora/wandb")/history.jsonl"
check "lora: run URL printed" grep -q "wandb: run .*: $WANDB_BASE_URL/fake-entity/tests/runs/" "$work/lora.log"

# A recipe that fails at step 3: exit code 1 reaches the server, and so does the error text.
start_server crash
"$runner" tests/recipes/wandb_loop.lua output_dir="$work/crash" steps=10 fail_at=3 wandb_project=tests \
  >"$work/crash.log" 2>&1
check "crash: runner exits 1" test $? -eq 1
stop_server
dump=$work/crash.json
check "crash: three rows" test "$(rows "$dump")" = 3
check "crash: complete with exit code 1" test "$(run1 "$dump" "(r['complete'], r['exit_code'])")" = "(True, 1)"
check "crash: error text in output.log" test "$(run1 "$dump" \
  "any('error: ' in l and 'failing on purpose at step 3' in l for l in r['output'])")" = True

# Stopped from the UI after 5 rows: the loop ends early and the run ends normally.
start_server stop --stop-after-rows 5
"$runner" tests/recipes/wandb_loop.lua output_dir="$work/stop" steps=1000 wandb_project=tests >"$work/stop.log" 2>&1
check "stop: exits 0" test $? -eq 0
stop_server
dump=$work/stop.json
check "stop: notice printed" grep -q "wandb: run stopped from the W&B UI; the recipe ends after this step" "$work/stop.log"
check "stop: the loop ended early" grep -q "stopped from the W&B UI at step" "$work/stop.log"
check "stop: fewer rows than steps" test "$(rows "$dump")" -lt 1000
check "stop: complete with exit code 0" test "$(run1 "$dump" "(r['complete'], r['exit_code'])")" = "(True, 0)"

# Offline, then `runner wandb-sync` on the spool directory: every row arrives, once.
WANDB_MODE=offline "$runner" tests/recipes/wandb_loop.lua output_dir="$work/offline" steps=6 step_seconds=0 \
  wandb_project=tests >"$work/offline.log" 2>&1
check "offline: exits 0" test $? -eq 0
check "offline: says how to upload" grep -q "wandb: offline run saved to $work/offline/wandb/run-" "$work/offline.log"
WANDB_MODE=offline WANDB_DIR="$work/elsewhere" "$runner" tests/recipes/wandb_loop.lua output_dir="$work/offline2" \
  steps=2 step_seconds=0 wandb_project=tests >"$work/offline2.log" 2>&1
check "offline: WANDB_DIR beats the spool beside metrics.jsonl" \
  test -f "$(ls -d "$work"/elsewhere/run-* | head -1)/history.jsonl" -a ! -e "$work/offline2/wandb"
start_server sync
"$runner" wandb-sync "$work/offline/wandb" >"$work/sync.log" 2>&1
check "sync: exits 0" test $? -eq 0
check "sync: one line per run" grep -q "^wandb-sync: $work/offline/wandb/run-.*: 6 rows sent, complete (exit code 0)$" \
  "$work/sync.log"
"$runner" wandb-sync "$work/offline/wandb" >"$work/sync2.log" 2>&1
check "sync again: exits 0" test $? -eq 0
check "sync again: nothing to send" grep -q "already complete (exit code 0), nothing to send" "$work/sync2.log"
stop_server
dump=$work/sync.json
check "sync: all rows arrived" test "$(rows "$dump")" = 6
check "sync: complete with exit code 0" test "$(run1 "$dump" "(r['complete'], r['exit_code'])")" = "(True, 0)"
check "sync: no protocol errors" test "$(json "$dump" "len(j['errors'])")" = 0
check "sync: the second sync sent nothing" test "$(json "$dump" "len(j['requests'])")" = 2

# Credentials and hosts: a user:password@ in WANDB_BASE_URL is dropped (no file, no output), the
# spool's files are 0600, and wandb-sync sends a spool only to the configured host (WANDB_BASE_URL,
# else api.wandb.ai) unless --trust-spool-host.
start_server trust
plain=$WANDB_BASE_URL pw=s3cretRECIPEpw
WANDB_MODE=offline WANDB_BASE_URL="http://user:$pw@${plain#http://}/" "$runner" tests/recipes/wandb_loop.lua \
  output_dir="$work/creds" steps=3 step_seconds=0 wandb_project=tests >"$work/creds.log" 2>&1
check "creds: exits 0" test $? -eq 0
spool=$(ls -d "$work"/creds/wandb/run-* | head -1)
check "creds: run.json names the server without user:password@" \
  test "$(json "$spool/run.json" "j['base_url']")" = "$plain"
check "creds: the password in no file and no output" test -z "$(grep -rl "$pw" "$work")"
check "creds: says the user:password@ is ignored" grep -q "user:password@ in WANDB_BASE_URL is ignored" \
  "$work/creds.log"
check "creds: every spool file is 0600" test "$(stat -c %a "$spool"/* | sort -u)" = 600
(unset WANDB_BASE_URL; exec "$runner" wandb-sync "$spool") >"$work/refused.log" 2>&1
check "refused: exits 1" test $? -eq 1
check "refused: one line naming the spool, its host and both ways out" grep -qxF "wandb-sync: $spool: the spool \
names host 127.0.0.1 ($plain), not the configured api.wandb.ai; not sent, so the API key goes to no other host: \
set WANDB_BASE_URL=$plain or pass --trust-spool-host to upload there" "$work/refused.log"
check "refused: nothing reached the server" test "$(json "$work/trust.json" "len(j['requests'])")" = 0
(unset WANDB_BASE_URL; exec "$runner" wandb-sync --trust-spool-host "$spool") >"$work/trusted.log" 2>&1
check "trusted: exits 0" test $? -eq 0
check "trusted: uploaded" grep -q "^wandb-sync: $spool: 3 rows sent, complete (exit code 0)$" "$work/trusted.log"
stop_server
check "trusted: all rows arrived" test "$(rows "$work/trust.json")" = 3
check "trusted: complete with exit code 0" test "$(run1 "$work/trust.json" "(r['complete'], r['exit_code'])")" \
  = "(True, 0)"

# The key: in no file under the work directory (spools, logs, the servers' dumps) and no output.
check "key in no file and no output" test -z "$(grep -rl "$key" "$work")"

finish
