# Sourced by the data-parallel tests: start ranks as torchrun starts them (RANK, WORLD_SIZE, ...,
# MASTER_ADDR/PORT; no launcher in between), and the 1-process run they are compared with. Needs
# $runner and $base set; $driver names the script both run (default tests/dist/ddp_train.lua).

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# two_ranks LOG_PREFIX ARGS...: ranks 0 and 1 as torchrun would start them; returns the worse
# exit status (rank 0's when both fail).
two_ranks() {
  local prefix=$1; shift
  local p; p=$(port)
  local pids=() r
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$p \
      TORCHELASTIC_USE_AGENT_STORE=False OMP_NUM_THREADS=1 \
      "$runner" "${driver:-tests/dist/ddp_train.lua}" base="$base" "$@" >"$prefix.rank$r.log" 2>&1 &
    pids+=($!)
  done
  local rc0 rc1
  wait "${pids[0]}"; rc0=$?
  wait "${pids[1]}"; rc1=$?
  [ "$rc0" -ne 0 ] && return "$rc0"
  return "$rc1"
}

# one ARGS...: the driver in 1 process, the reference. It runs on one thread like each
# rank: the thread count changes the order of float sums, which on some CPUs moved full fine-tuning's
# weights past the 1e-6 tolerance after 3 AdamW steps.
one() { OMP_NUM_THREADS=1 "$runner" "${driver:-tests/dist/ddp_train.lua}" base="$base" "$@"; }
