#!/usr/bin/env bash
# tests/cli/test_recipe_help.sh RUNNER: recipes explain themselves and validate checks before loading.
# - `runner help RECIPE` / `runner RECIPE --help`: description, usage, every key with type, default
#   and its `-- doc` from the recipe (host/cli/recipe_docs.h); no shipped recipe has an undocumented key.
# - `runner ls`: every recipe's whole first sentence, wrapped to COLUMNS.
# - `runner validate`: paths that must exist and value ranges, every problem at once, exit 2
#   (host/cli/config_checks.h); nothing loads.
set -u
runner=$(realpath "${1:?usage: test_recipe_help.sh path/to/runner}")
failed=0 checks=0
. tests/cli/lib.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

check help_lora 0 "$runner" help lora_finetune
expect_out "lora_finetune ("
expect_out "usage:"
expect_out "learning_rate  (number) = 0.0002"
expect_out "lora.r  (number) = 16"
expect_out "lora.targets  (list of strings) = {"
refute_out "(no doc)"
help_text=$out
check help_flag 0 "$runner" lora_finetune --help
[ "$out" = "$help_text" ] || { echo "FAIL help_flag: 'runner lora_finetune --help' differs from 'runner help lora_finetune'"; failed=$((failed + 1)); }
check help_override_shown 0 "$runner" lora_finetune learning_rate=1e-3 --help
expect_out "learning_rate  (number) = 0.001"
check help_missing 2 "$runner" help no_such_recipe
expect_out "no recipe 'no_such_recipe'"

# Every shipped recipe: help works and documents every key; nothing runs (no output dirs appear).
for name in $(cd recipes && ls *.lua | sed 's/\.lua$//'); do
  check "help_$name" 0 env -C "$work" "$runner" help "$name"
  refute_out "(no doc)"
  refute_out "config ("   # help resolves silently: no config print-out, no checks
done
[ -z "$(ls -A "$work")" ] || { echo "FAIL help wrote files: $(ls -A "$work")"; failed=$((failed + 1)); }

# runner ls: whole first sentences, wrapped to the width; each entry ends its sentence.
check ls_wrapped 0 env COLUMNS=72 "$runner" ls
checks=$((checks + 1))
if awk 'length($0) > 72 { bad = 1 } END { exit bad }' <<<"$out"; then :; else
  echo "FAIL ls_wrapped: a line is wider than 72 columns"; echo "$out" | sed 's/^/    /'; failed=$((failed + 1))
fi
entries=$(awk '/^[a-z0-9_]+  / { if (e != "") print e; e = $0; next } { sub(/^ +/, " "); e = e $0 } END { print e }' <<<"$out")
n=$(grep -c . <<<"$entries")
checks=$((checks + 1))
if [ "$n" -lt 15 ] || grep -vE '[.!?]$' <<<"$entries" | grep -q .; then
  echo "FAIL ls_sentences: $n entries; these do not end their sentence:"; grep -vE '[.!?]$' <<<"$entries" | sed 's/^/    /'
  failed=$((failed + 1))
fi

# validate: every problem at once, before anything loads.
check validate_paths 2 "$runner" validate lora_finetune base_model=/nope/model data=/nope/train.jsonl
expect_out 'base_model = "/nope/model" (command line)'
expect_out 'data = "/nope/train.jsonl" (command line): no such file'
expect_out "config: 2 problems in"
refute_out "nothing was run"
check validate_ranges 2 "$runner" validate lora_finetune base_model=/nope max_steps=0 lora.dropout=1 learning_rate=-1
expect_out "config: 4 problems in"  # data's default, the example set beside the runner, is there
expect_out "max_steps = 0 (command line): expected a whole number >= 1"
expect_out "lora.dropout = 1 (command line): expected in [0, 1)"
expect_out "learning_rate = -1 (command line): expected a positive number"
mkdir -p "$work/model" && echo '{"text": "hi"}' >"$work/train.jsonl"
check validate_ok 0 "$runner" validate lora_finetune base_model="$work/model" data="$work/train.jsonl"
expect_out "config resolved; nothing was run"
# A run checks the same before loading: a bad data= fails at once, not after the model loads.
check run_checks_first 2 "$runner" lora_finetune base_model="$work/model" data=/nope/train.jsonl output_dir="$work/out"
expect_out 'data = "/nope/train.jsonl" (command line): no such file'
refute_out "tokenizer"
# Old key names say the new one.
check renamed_key 2 "$runner" validate lora_finetune lr=1e-4
expect_out "it is now 'learning_rate'"
# plan reads shapes only: a missing base_model is not a problem there, a bad range still is.
check plan_ranges 2 "$runner" plan lora_finetune model_preset=llama3.1-8b max_steps=-3
expect_out "max_steps = -3 (command line): expected a whole number >= 1"
refute_out "(recipe default): "

cli_finish
