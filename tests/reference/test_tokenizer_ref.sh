#!/usr/bin/env bash
# tests/reference/test_tokenizer_ref.sh RUNNER: runs tokenize_ref.mjs (luatune vs transformers.js on
# tests/fixtures/tokenizer_corpus.jsonl). Exit 77 (skip) when node is not installed.
set -u
runner=${1:?usage: test_tokenizer_ref.sh path/to/runner}
if ! command -v node >/dev/null 2>&1; then
  echo "SKIP: node is not installed (scripts/setup.sh installs nodejs and the reference packages)"
  exit 77
fi
exec node tests/reference/tokenize_ref.mjs "$runner" tests/fixtures/tokenizer_corpus.jsonl
