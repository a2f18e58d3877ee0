#!/usr/bin/env bash
# tests/cli/test_seed.sh RUNNER: the runner seeds every process-global generator (LibTorch's, Lua's
# math.random) from one number (host/core/seed.h, docs/reproducibility.md): at state start from
# LUATUNE_SEED or 0, again when config{} resolves from the config's seed; LUATUNE_SEED stands in
# for a recipe's default seed, a seed= override beats it; bad seeds fail with exit 2 and a pinned text.
set -u
runner=${1:?usage: test_seed.sh path/to/runner}
fx=tests/fixtures/recipes
failed=0 checks=0

# draws [ENV=VALUE...] -- ARGS...: the RESULT line of a run (the draws), "" when it printed none.
draws() {
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env -u LUATUNE_SEED "${envs[@]}" "$runner" "$@" 2>&1 | grep '^RESULT' || true
}
same() {  # NAME A B: A and B are the same non-empty draws
  checks=$((checks + 1))
  if [ -z "$2" ] || [ "$2" != "$3" ]; then echo "FAIL $1: '$2' vs '$3'"; failed=$((failed + 1)); fi
}
differ() {  # NAME A B: A and B are different non-empty draws
  checks=$((checks + 1))
  if [ -z "$2" ] || [ -z "$3" ] || [ "$2" = "$3" ]; then echo "FAIL $1: '$2' vs '$3'"; failed=$((failed + 1)); fi
}
# fails NAME TEXT [ENV=VALUE...] -- ARGS...: the run exits 2 and prints TEXT.
fails() {
  local name=$1 text=$2 envs=()
  shift 2
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  checks=$((checks + 1))
  out=$(env -u LUATUNE_SEED "${envs[@]}" "$runner" "$@" 2>&1)
  rc=$?
  if [ "$rc" != 2 ] || ! grep -qF -- "$text" <<<"$out"; then
    echo "FAIL $name: exit $rc, expected 2 and: $text"; echo "$out" | sed 's/^/    /'; failed=$((failed + 1))
  fi
}

# --- at state start (no config{}): seed 0, or LUATUNE_SEED
d0=$(draws -- $fx/draws.lua)
same "no config: two runs draw the same" "$d0" "$(draws -- $fx/draws.lua)"
d5=$(draws LUATUNE_SEED=5 -- $fx/draws.lua)
same "no config: LUATUNE_SEED=5 twice" "$d5" "$(draws LUATUNE_SEED=5 -- $fx/draws.lua)"
differ "no config: LUATUNE_SEED=5 draws otherwise than 0" "$d0" "$d5"
same "no config: LUATUNE_SEED=0 is the default" "$d0" "$(draws LUATUNE_SEED=0 -- $fx/draws.lua)"
# math.random alone (LuaJIT starts it at a fixed state, so only seeding makes it follow the seed)
m0=$(awk '{print $4}' <<<"$d0") m5=$(awk '{print $4}' <<<"$d5")
differ "no config: math.random follows the seed" "$m0" "$m5"

# --- config{}: draws made before it do not matter; the resolved seed decides
same "config: seed 0 draws as a run without config{}" "$d0" "$(draws -- $fx/draws_config.lua)"
same "config: seed=5 on the command line draws as LUATUNE_SEED=5" "$d5" "$(draws -- $fx/draws_config.lua seed=5)"
same "config: LUATUNE_SEED=5 stands in for the recipe's seed" "$d5" "$(draws LUATUNE_SEED=5 -- $fx/draws_config.lua)"
d7=$(draws -- $fx/draws_config.lua seed=7)
differ "config: seed=7 draws otherwise than 5" "$d5" "$d7"
same "config: seed=7 beats LUATUNE_SEED=5" "$d7" "$(draws LUATUNE_SEED=5 -- $fx/draws_config.lua seed=7)"
checks=$((checks + 1))
out=$(LUATUNE_SEED=5 "$runner" $fx/draws_config.lua 2>&1)
if ! grep -qE '^  seed += 5 +\[LUATUNE_SEED\]$' <<<"$out" || ! grep -q '^SEED 5$' <<<"$out"; then
  echo "FAIL config: the printed config says where seed 5 came from"; echo "$out" | sed 's/^/    /'
  failed=$((failed + 1))
fi

# --- deterministic = true: one line saying what it does and what it cannot
checks=$((checks + 1))
out=$(env -u LUATUNE_SEED "$runner" $fx/draws_config.lua deterministic=true 2>&1)
if ! grep -q '^deterministic: LibTorch deterministic algorithms on' <<<"$out" ||
   ! grep -q 'torch.cumsum' <<<"$out" || ! grep -q '^RESULT' <<<"$out"; then
  echo "FAIL deterministic=true: prints its line and runs"; echo "$out" | sed 's/^/    /'; failed=$((failed + 1))
fi
checks=$((checks + 1))
if env -u LUATUNE_SEED "$runner" $fx/draws_config.lua 2>&1 | grep -q '^deterministic:'; then
  echo "FAIL deterministic=false: says nothing"; failed=$((failed + 1))
fi

# --- bad seeds: usage errors, also under validate
fails "seed=-1" "config: seed (command line) must be a whole number in [0, 2^53], got -1" -- $fx/draws_config.lua seed=-1
fails "seed=1.5 (validate)" "config: seed (command line) must be a whole number in [0, 2^53], got 1.5" \
  -- validate $fx/draws_config.lua seed=1.5
fails "LUATUNE_SEED=abc" "LUATUNE_SEED must be a whole number in [0, 2^53], got 'abc'" LUATUNE_SEED=abc -- $fx/draws.lua
fails "LUATUNE_SEED=-3" "LUATUNE_SEED must be a whole number in [0, 2^53], got -3" LUATUNE_SEED=-3 -- $fx/draws.lua

echo "$((checks - failed))/$checks seeding checks passed"
[ "$failed" -eq 0 ]
