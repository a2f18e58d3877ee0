#!/usr/bin/env bash
# tests/dist/test_launch.sh RUNNER: `runner --nproc N` without any process group, on
# tests/dist/env_probe.lua (it prints the variables the launcher set and fails or hangs on request).
# Two ranks print their environment (rank 1's lines prefixed) and exit 0; a failing rank stops a
# hanging one (and the hanging one's own child) and its status is the launcher's; Ctrl-C exits 130;
# nothing is left running afterwards. No timings asserted: `timeout` only guards against a hang.
# Usage, from the repository root: bash tests/dist/test_launch.sh build/runner
set -uo pipefail
runner=${1:?usage: test_launch.sh path/to/runner}
probe=tests/dist/env_probe.lua
work=$(mktemp -d)
marker="lt-launch-test-$$-$RANDOM"  # on every rank's command line, for pgrep -f
sleep_s="1000.$$"                    # hang_sleep's child: `sleep 1000.PID`
cleanup() {  # a failed check must not leave our own processes behind (found by their marker)
  local pids
  pids=$(pgrep -f -- "$marker|sleep $sleep_s" || true)
  [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
source tests/recipes/lib.sh  # check NAME COMMAND..., finish
has() { grep -qxF -- "$2" "$work/$1"; }         # FILE (out|err) has the whole line
has_prefix() { grep -q -- "^$2" "$work/$1"; }   # a line of FILE starts with the regex
lacks() { ! grep -qF -- "$2" "$work/$1"; }
nothing_left() { ! pgrep -f -- "$marker|sleep $sleep_s" >/dev/null; }  # (pgrep never matches itself)
launch() {  # launch ARGS...: the launcher's output in out/err, its status in $rc
  timeout 60 "$runner" "$@" marker="$marker" >"$work/out" 2>"$work/err"
  rc=$?
}
show() { echo "--- stdout"; cat "$work/out"; echo "--- stderr"; cat "$work/err"; }

# ---------------------------------------------------------------------------------------------
# Two ranks, both fine.
cores=$(nproc)
threads=$((cores / 2 > 0 ? cores / 2 : 1))
(unset MASTER_PORT OMP_NUM_THREADS; launch --nproc 2 "$probe"; echo $rc >"$work/rc")
rc=$(cat "$work/rc")
check "ok: exit status 0" test "$rc" -eq 0
check "ok: rank 0's line unprefixed" has_prefix out \
  "probe RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=[0-9]"
check "ok: rank 1's line prefixed" has_prefix out \
  "\[rank 1\] probe RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=[0-9]"
port0=$(sed -n 's/^probe RANK=0 .* MASTER_PORT=//p' "$work/out")
port1=$(sed -n 's/^\[rank 1\] probe RANK=1 .* MASTER_PORT=//p' "$work/out")
check "ok: one free MASTER_PORT for both ($port0, $port1)" test -n "$port0" -a "$port0" = "$port1"
check "ok: OMP_NUM_THREADS = $cores cores / 2, agent store off" has out \
  "probe OMP_NUM_THREADS=$threads TORCHELASTIC_USE_AGENT_STORE=False"
check "ok: stderr stays stderr, prefixed for rank 1" has err "[rank 1] probe stderr from rank 1"
check "ok: rank 0's stderr unprefixed" has err "probe stderr from rank 0"
check "ok: a line is never split between ranks" has out "[rank 1] probe no newline at the end"
check "ok: no launcher line when all went well" lacks err "runner --nproc"
[ "$fails" -eq 0 ] || show

# MASTER_PORT and OMP_NUM_THREADS already set are kept.
MASTER_PORT=23456 OMP_NUM_THREADS=5 launch --nproc=2 "$probe"
check "set: exit status 0" test "$rc" -eq 0
check "set: MASTER_PORT kept" has_prefix out "\[rank 1\] probe RANK=1 .* MASTER_PORT=23456$"
check "set: OMP_NUM_THREADS kept" has out "probe OMP_NUM_THREADS=5 TORCHELASTIC_USE_AGENT_STORE=False"

# --nproc 1 is a plain run: no launcher, no variables.
launch --nproc 1 "$probe"
check "one: exit status 0" test "$rc" -eq 0
check "one: no RANK set" has_prefix out "probe RANK=nil WORLD_SIZE=nil"

# ---------------------------------------------------------------------------------------------
# Failures: rank 1 fails while rank 0 hangs in Lua; rank 0 fails while rank 1 hangs in a child.
launch --nproc 2 "$probe" fail_rank=1 hang_rank=0 ready_file="$work/ready1"
check "fail 1: the failing rank's status 3" test "$rc" -eq 3
check "fail 1: one line names rank 1" has err "runner --nproc: rank 1 exited with status 3; stopping the other ranks"
check "fail 1: rank 0 was hanging" has out "probe hanging $marker"
check "fail 1: nothing left running" nothing_left
[ "$fails" -eq 0 ] || show

launch --nproc 2 "$probe" fail_rank=0 hang_rank=1 hang_sleep="$sleep_s" ready_file="$work/ready0"
check "fail 0: the failing rank's status 3" test "$rc" -eq 3
check "fail 0: one line names rank 0" has err "runner --nproc: rank 0 exited with status 3; stopping the other ranks"
check "fail 0: rank 1 was hanging" has out "[rank 1] probe hanging $marker"
check "fail 0: neither rank 1 nor its sleep left running" nothing_left
[ "$fails" -eq 0 ] || show

# ---------------------------------------------------------------------------------------------
# Ctrl-C: SIGINT to the launcher (ranks in their own process groups do not get the terminal's).
timeout 60 "$runner" --nproc 2 "$probe" hang_rank=1 marker="$marker" >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 600); do  # up to 60 s for rank 1 to be hanging
  grep -q "probe hanging" "$work/out" && break
  sleep 0.1
done
kill -INT "$pid"
wait "$pid"
rc=$?
check "ctrl-c: exit status 130" test "$rc" -eq 130
check "ctrl-c: says so" has_prefix err "runner --nproc: interrupted by Ctrl-C"
check "ctrl-c: nothing left running" nothing_left
[ "$fails" -eq 0 ] || show

# ---------------------------------------------------------------------------------------------
# Bad N: exit 2 and one line (more forms are pinned in tests/cli/test_cli.sh).
launch --nproc 0 "$probe"
check "--nproc 0: exit 2" test "$rc" -eq 2
check "--nproc 0: message" has err "runner: --nproc expects a whole number >= 1, got '0'"
launch --nproc x "$probe"
check "--nproc x: exit 2" test "$rc" -eq 2
check "--nproc x: message" has err "runner: --nproc expects a whole number >= 1, got 'x'"

finish
