#!/usr/bin/env bash
# CTest real_model_quality: what the methods do to a real model, each with its stated threshold.
#  - one-shot 50 % sparsity on real prose (the GPL-3 text Debian ships, as paragraphs): Wanda and SparseGPT
#    keep perplexity far below magnitude pruning (wanda_sparsegpt check=true, the papers' order);
#  - QLoRA's NF4 base: perplexity within 50 % of bf16, bf16 within 2 % of float32 (smollm2_nf4.lua).
# Usage, from the repository root: tests/real_model/test_smollm2_quality.sh RUNNER MODEL_DIR WORKDIR
set -uo pipefail
runner=$1 model=$2 work=$3
[ -f "$model/model.safetensors" ] || { echo "skip: no $model (the real_model_smollm2 fixture skipped)"; exit 77; }
[ -f /usr/share/common-licenses/GPL-3 ] || { echo "skip: no /usr/share/common-licenses/GPL-3 (Debian's base-files)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
python3 -c '
import json, sys
text = open("/usr/share/common-licenses/GPL-3").read()
with open(sys.argv[1], "w") as f:
    for p in text.split("\n\n"):
        p = " ".join(p.split())
        if len(p) > 200:
            f.write(json.dumps({"text": p}) + "\n")' "$work/gpl.jsonl"
"$runner" wanda_sparsegpt base_model="$model" data="$work/gpl.jsonl" output_dir="$work/prune" calibration_rows=8 \
  max_length=192 batch_size=4 eval_fraction=0.3 patterns=50% check=true device=cpu >"$work/prune.log" 2>&1
check "wanda_sparsegpt at 50 %: Wanda and SparseGPT beat magnitude on real prose" test $? -eq 0
grep -E '^\| (dense|magnitude|wanda|sparsegpt) ' "$work/prune/results.md"
MODEL_DIR="$model" "$runner" tests/real_model/smollm2_nf4.lua >"$work/nf4.log" 2>&1
check "NF4 perplexity within 50 % of bf16, bf16 within 2 % of float32" test $? -eq 0
grep perplexity "$work/nf4.log"
finish
