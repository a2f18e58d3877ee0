# Sourced by the CLI tests (tests/cli/test_*.sh): one command per check, its exit status and the
# text it must or must not print. Needs `failed=0 checks=0` set; the script ends with `cli_finish`.
# check NAME EXPECTED_STATUS COMMAND...; then expect_out TEXT / refute_out TEXT on its output.
check() {
  local name=$1 want=$2
  shift 2
  checks=$((checks + 1))
  out=$("$@" 2>&1)
  rc=$?
  current=$name
  if [ "$rc" != "$want" ]; then
    echo "FAIL $name: exit status $rc, expected $want"
    echo "$out" | head -c 4000 | sed 's/^/    /'
    failed=$((failed + 1))
  fi
  if echo "$out" | grep -qE 'terminate called|Aborted|Segmentation fault|core dumped'; then
    echo "FAIL $name: crashed"; failed=$((failed + 1))
  fi
}
expect_out() {
  if ! grep -qF -- "$1" <<<"$out"; then
    echo "FAIL $current: output lacks: $1"
    echo "$out" | head -c 4000 | sed 's/^/    /'
    failed=$((failed + 1))
  fi
}
expect_exact() {  # the whole output, every line
  if [ "$out" != "$1" ]; then
    echo "FAIL $current: output is not exactly:"; echo "$1" | sed 's/^/    /'
    echo "  got:"; echo "$out" | sed 's/^/    /'
    failed=$((failed + 1))
  fi
}
refute_out() {
  if grep -qF -- "$1" <<<"$out"; then
    echo "FAIL $current: output has: $1"; failed=$((failed + 1))
  fi
}
cli_finish() {
  echo "$checks checks, $failed failed"
  [ "$failed" -eq 0 ]
}
