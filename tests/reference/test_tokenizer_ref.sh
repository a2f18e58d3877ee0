#!/usr/bin/env bash
# tests/reference/test_tokenizer_ref.sh RUNNER [PYTHON]: luatune's tokenizer against two references on
# tests/fixtures/tokenizer_corpus.jsonl, for each tokenizer.json: transformers.js (tokenize_ref.mjs,
# through node) and Hugging Face tokenizers, the Rust library (tokenize_ref.py, run by PYTHON: the
# pinned environment's, LUATUNE_PYTHON). Both run even when the first fails; any mismatch fails the
# test (each script prints the first differing case of each kind). A reference whose engine is not
# installed (no node; no PYTHON given) is skipped with a line saying so; exit 77 when neither ran or
# the tokenizer packages are not installed.
set -u
runner=${1:?usage: test_tokenizer_ref.sh path/to/runner [python]}
python=${2:-${LUATUNE_PYTHON:-}}
corpus=tests/fixtures/tokenizer_corpus.jsonl
ran=0 failed=0

reference() {  # reference NAME COMMAND...: runs one reference script and folds its exit status in
  local name=$1
  shift
  echo "== $name"
  "$@"
  local rc=$?
  case $rc in
    0) ran=$((ran + 1)) ;;
    77) ;;
    *) ran=$((ran + 1)) failed=$((failed + 1)); echo "FAIL: $name (exit $rc)" ;;
  esac
}

if command -v node >/dev/null 2>&1; then
  reference "transformers.js" node tests/reference/tokenize_ref.mjs "$runner" "$corpus"
else
  echo "skipping transformers.js: node is not installed (scripts/setup.sh installs nodejs and the packages)"
fi
if [ -n "$python" ]; then
  reference "tokenizers ($python)" "$python" tests/reference/tokenize_ref.py "$runner" "$corpus"
else
  echo "skipping tokenizers: no Python environment given (LUATUNE_PYTHON; scripts/setup.sh makes .venv)"
fi
[ "$failed" -eq 0 ] || exit 1
[ "$ran" -gt 0 ] || exit 77
echo "tokenizer_reference: $ran reference(s), all equal"
