# bench/paced.sh: sourced by the benchmarks that step several processes in turn
# (bench/step_vs_pytorch.sh, bench/allocator_step.sh). A side is a process that warms up, prints
# READY, then takes one timed step per line on its stdin and prints a STEP line for each
# (bench/llama_step.lua paced=true, bench/pytorch_llama_step.py --paced). Needs $tmp (a directory)
# and $log (a file) from the script that sources it.
# shellcheck shell=bash disable=SC2154
declare -A paced_in paced_out paced_pid

# paced_start SIDE COMMAND...: runs a side with its stdin and stdout on FIFOs and waits for its
# READY (its warm-up is done).
paced_start() {
  local side=$1 line fd
  shift
  mkfifo "$tmp/$side.in" "$tmp/$side.out"
  "$@" <"$tmp/$side.in" >"$tmp/$side.out" &
  paced_pid[$side]=$!  # env(1) execs the program: this is the side's own process
  exec {fd}>"$tmp/$side.in"
  paced_in[$side]=$fd
  exec {fd}<"$tmp/$side.out"
  paced_out[$side]=$fd
  while read -r -u "$fd" line; do [[ $line == READY* ]] && return; done
  echo "paced: $side ended before its warm-up was done: $*" >&2
  exit 1
}

paced_minflt() { awk '{print $10}' "/proc/${paced_pid[$1]}/stat"; }  # field 10: minor page faults so far

# paced_step SIDE WORDS...: one timed step; its STEP line, WORDS and the minor page faults the step
# took (fresh pages the kernel mapped and zeroed) go to stdout and the log.
paced_step() {
  local side=$1 line f0
  shift
  f0=$(paced_minflt "$side")
  echo step >&"${paced_in[$side]}"
  while read -r -u "${paced_out[$side]}" line; do
    if [[ $line == STEP* ]]; then
      echo "$line $* minflt=$(($(paced_minflt "$side") - f0))" | tee -a "$log"
      return
    fi
  done
  echo "paced: $side ended without a step" >&2
  exit 1
}

# paced_stop SIDE WORDS...: logs the side's peak RSS (PEAK ... WORDS rss_gb=), closes its input so
# it exits.
paced_stop() {
  local side=$1
  shift
  echo "PEAK $* rss_gb=$(awk '/^VmHWM/ {printf "%.2f", $2 / 1048576}' "/proc/${paced_pid[$side]}/status")" |
    tee -a "$log"
  eval "exec ${paced_in[$side]}>&- ${paced_out[$side]}<&-"
  rm -f "$tmp/$side.in" "$tmp/$side.out"
}
