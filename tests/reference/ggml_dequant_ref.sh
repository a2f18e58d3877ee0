#!/usr/bin/env bash
# CTest driver for ggml_dequant_reference: tests/reference/ggml_dequant_ref.py writes random blocks of every
# ggml type luatune reads (and real SmolLM2 tensors) with the gguf package's dequantization, and
# ggml_dequant_check compares luatune's bit for bit. Exit 77 (skip) without the environment's gguf.
# Usage, from the repository root: tests/reference/ggml_dequant_ref.sh path/to/ggml_dequant_check
set -uo pipefail
check=$1
python=${LUATUNE_PYTHON:-.venv/bin/python3}
"$python" -c 'import gguf' 2>/dev/null || { echo "skipping: $python has no gguf (scripts/setup.sh)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" tests/reference/ggml_dequant_ref.py "$tmp" || exit 1
"$check" "$tmp"
