#!/usr/bin/env bash
# tests/cli/test_hub_cache.sh RUNNER TINY_MODEL_DIR WORKDIR: models by name through the Hugging Face
# hub cache (host/io/hub_cache.h, docs/hub_cache.md). A fake cache laid out as huggingface_hub writes it
# (refs/main, snapshots/<commit>/ of symlinks into blobs/) holds the tiny model as org/name:
# lora_finetune base_model=org/name trains and its adapter names org/name as its base; a model not
# in the cache fails with where it looked and the command that fetches it.
set -u
runner=${1:?usage: test_hub_cache.sh RUNNER TINY_MODEL_DIR WORKDIR} base=${2:?} work=${3:?}
source tests/cli/lib.sh
failed=0 checks=0
rm -rf "$work" && mkdir -p "$work"
hub=$work/hub
commit=0123456789abcdef0123456789abcdef01234567

# The fake cache: every file of the tiny model stored once in blobs/ under its sha256, linked from
# the snapshot (relative links, as huggingface_hub makes them); refs/main holds the commit, no newline.
repo=$hub/models--org--name
mkdir -p "$repo/blobs" "$repo/refs" "$repo/snapshots/$commit"
for f in "$base"/*; do
  sha=$(sha256sum "$f" | cut -d' ' -f1)
  cp "$f" "$repo/blobs/$sha"
  ln -s "../../blobs/$sha" "$repo/snapshots/$commit/$(basename "$f")"
done
printf %s "$commit" >"$repo/refs/main"

small=(data=tests/fixtures/data/chat_small.jsonl dtype=float32 device=cpu batch_size=2
  gradient_accumulation_steps=1 max_length=96 eval_fraction=0.1 max_steps=1)

# --- a model by name trains, and the adapter keeps the name
lora=$work/lora  # not $out: check() leaves each command's output there
check "lora_finetune base_model=org/name" 0 env HF_HUB_CACHE="$hub" "$runner" lora_finetune base_model=org/name \
  output_dir="$lora" "${small[@]}"
expect_out "adapter (PEFT format): $lora/adapter"
checks=$((checks + 1))
got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["base_model_name_or_path"])' \
  "$lora/adapter/adapter_config.json" 2>&1)
if [ "$got" != "org/name" ]; then
  echo "FAIL adapter_config.json: base_model_name_or_path is '$got', expected 'org/name'"; failed=$((failed + 1))
fi

# --- models.load / tokenizer.load from Lua: the cache found through HF_HOME, a revision by commit
# prefix, and lora.save's default base_model (the snapshot's name, not its path)
cat >"$work/load.lua" <<LUA
local tok = tokenizer.load("org/name@0123456")
local m = models.load("org/name", { dtype = "float32" })
lora.apply(m, { r = 2, alpha = 4, targets = { "q_proj" } })
lora.save(m, "$work/default_base")
print("LOADED " .. tok:vocab_size())
LUA
check "models.load via HF_HOME" 0 env -u HF_HUB_CACHE HF_HOME="$work" "$runner" "$work/load.lua"
expect_out "LOADED "
checks=$((checks + 1))
if ! grep -qF '"base_model_name_or_path": "org/name"' "$work/default_base/adapter_config.json" 2>/dev/null; then
  echo "FAIL lora.save default base_model: not org/name"; cat "$work/default_base/adapter_config.json"
  failed=$((failed + 1))
fi

# --- not in the cache: exit 1 or 2, one message with where it looked and how to fetch it
checks=$((checks + 1))
out=$(HF_HUB_CACHE="$hub" "$runner" lora_finetune base_model=org/missing output_dir="$work/missing" "${small[@]}" 2>&1)
rc=$?
current="base_model=org/missing"
if [ "$rc" != 1 ] && [ "$rc" != 2 ]; then
  echo "FAIL $current: exit status $rc, expected 1 or 2"; echo "$out" | sed 's/^/    /'; failed=$((failed + 1))
fi
expect_out "'org/missing' is not a local directory"
expect_out "looked in $hub/models--org--missing: no such directory; cache dir from HF_HUB_CACHE"
expect_out "fetch it with: huggingface-cli download org/missing"
refute_out "terminate called"
sed -i 's/org\/name@0123456/org\/name@v9/' "$work/load.lua"
check "org/name@v9 (no such revision)" 1 env HF_HUB_CACHE="$hub" "$runner" "$work/load.lua"
expect_out "no refs/v9 and no snapshots/v9*"
expect_out "huggingface-cli download org/name --revision v9"

cli_finish
