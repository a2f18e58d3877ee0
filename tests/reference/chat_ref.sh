#!/usr/bin/env bash
# CTest driver for chat_reference: renders tests/fixtures/chat_cases.json with every reference
# engine available here (transformers.js through node, Jinja2 through python3) and has
# chat_ref_check compare luatune's chat_render with each. Exit 77 (skip) when none is available.
# Usage, from the repository root: tests/reference/chat_ref.sh path/to/chat_ref_check
set -uo pipefail
check=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
outs=()
if command -v node >/dev/null 2>&1 && [ -d tests/reference/node/node_modules/@lenml/tokenizers ]; then
  node tests/reference/chat_ref.mjs >"$tmp/transformers_js.json" || exit 1
  outs+=("$tmp/transformers_js.json")
else
  echo "skipping transformers.js: node or tests/reference/node/node_modules missing (tests/reference/node/setup.sh)"
fi
python=${LUATUNE_PYTHON:-python3}  # the environment's python (CTest sets it), with the Jinja2 the lock pins
if command -v "$python" >/dev/null 2>&1 && "$python" -c 'import jinja2' 2>/dev/null; then
  "$python" tests/reference/chat_ref.py >"$tmp/jinja2.json" || exit 1
  outs+=("$tmp/jinja2.json")
else
  echo "skipping Jinja2: $python with jinja2 missing"
fi
[ ${#outs[@]} -gt 0 ] || exit 77
"$check" "${outs[@]}"
