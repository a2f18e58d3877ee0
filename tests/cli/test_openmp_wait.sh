#!/usr/bin/env bash
# tests/cli/test_openmp_wait.sh RUNNER WORKDIR: luatune's OpenMP wait policy (host/core/device.h).
# Without OMP_WAIT_POLICY or GOMP_SPINCOUNT the runner starts itself again with
# OMP_WAIT_POLICY=PASSIVE before libgomp reads its environment, so a recipe sees PASSIVE, and
# `runner --version` (which skips the restart, as every verb that runs no kernels does) says
# recipes get luatune's default; a policy or spin count the user set is kept as it is. A runner whose start-up hook was dropped by the linker, or that overrode the user, fails.
set -u
runner=${1:?usage: test_openmp_wait.sh path/to/runner WORKDIR}
work=${2:?usage: test_openmp_wait.sh path/to/runner WORKDIR}
failed=0 checks=0

source tests/cli/lib.sh
mkdir -p "$work"
probe=$work/omp_probe.lua
cat >"$probe" <<'LUA'
print("policy=" .. tostring(os.getenv("OMP_WAIT_POLICY")) .. " spin=" .. tostring(os.getenv("GOMP_SPINCOUNT")))
LUA
clean=(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u LUATUNE_OPENMP_WAIT)

check default_version 0 "${clean[@]}" "$runner" --version  # --version skips the restart and says so
expect_out "OpenMP wait PASSIVE (luatune's default, set as a recipe starts)"
check default_recipe 0 "${clean[@]}" "$runner" "$probe"
expect_out "policy=PASSIVE spin=nil"
# A process started with luatune's setting (a rank, a sweep trial) reports it as luatune's.
check marked_version 0 "${clean[@]}" OMP_WAIT_POLICY=PASSIVE LUATUNE_OPENMP_WAIT=default "$runner" --version
expect_out "OpenMP wait PASSIVE (luatune's default)"
refute_out "set as a recipe starts"

check user_policy_version 0 "${clean[@]}" OMP_WAIT_POLICY=ACTIVE "$runner" --version
expect_out "OpenMP wait ACTIVE (OMP_WAIT_POLICY)"
check user_policy_recipe 0 "${clean[@]}" OMP_WAIT_POLICY=ACTIVE "$runner" "$probe"
expect_out "policy=ACTIVE spin=nil"

check user_spincount 0 "${clean[@]}" GOMP_SPINCOUNT=1000 "$runner" --version
expect_out "OpenMP wait libgomp's default (GOMP_SPINCOUNT=1000)"
check user_spincount_recipe 0 "${clean[@]}" GOMP_SPINCOUNT=1000 "$runner" "$probe"
expect_out "policy=nil spin=1000"

# Started through the dynamic linker, /proc/self/exe is the linker: no restart, the recipe still runs.
ldso=$(ldd "$runner" | awk '$1 ~ /\/ld-linux/ {print $1; exit}')
if [ -x "$ldso" ]; then
  check through_ld_so 0 "${clean[@]}" "$ldso" "$runner" "$probe"
  expect_out "policy=nil spin=nil"
fi

# An inherited mark without luatune's value is the user's setting, not luatune's default.
check inherited_mark 0 "${clean[@]}" OMP_WAIT_POLICY=ACTIVE LUATUNE_OPENMP_WAIT=default "$runner" --version
expect_out "OpenMP wait ACTIVE (OMP_WAIT_POLICY)"
cli_finish
