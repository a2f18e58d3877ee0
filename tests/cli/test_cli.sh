#!/usr/bin/env bash
# tests/cli/test_cli.sh RUNNER: the runner's command line, exit statuses and messages, pinned.
# Each check runs one command and asserts its exit status and text it must (or must not) print.
set -u
runner=${1:?usage: test_cli.sh path/to/runner}
fx=tests/fixtures/recipes
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0 checks=0

source tests/cli/lib.sh

# --- informational verbs
check version 0 "$runner" --version
expect_out "luatune "; expect_out "LibTorch "; expect_out "CUDA "; expect_out "LuaJIT"; expect_out "devices:"
check help 0 "$runner" --help
expect_out "usage: runner RECIPE"
check no_args 0 "$runner"
expect_out "usage:"
check ls 0 "$runner" ls
expect_out "The main job on the embedded default"

# --- finding recipes
check by_name 0 "$runner" validate quickstart
expect_out "config ("; expect_out 'method             = "lora"'; expect_out "nothing was run"; refute_out "step    1"
check missing_recipe 2 "$runner" no_such_recipe
expect_out "runner: no recipe 'no_such_recipe'"; expect_out "shipped recipes: "
check near_recipe 2 "$runner" quikstart
expect_out "did you mean 'quickstart'?"
check part_of_name 2 "$runner" help qlora
expect_out "runner: no recipe 'qlora': not a file, and not a shipped recipe (did you mean 'qlora_finetune'?)"
check part_of_names 2 "$runner" finetune
expect_out "(did you mean 'adapter_finetune', 'full_finetune', 'lora_finetune' or 'qlora_finetune'?)"

# --- overrides: typed, nested, lists, files
check overrides 0 "$runner" $fx/typed.lua lr=1e-3 pack=false lora.r=8 lora.targets=k_proj,o_proj name=x
expect_out 'RESULT {"lora":{"r":8,"targets":["k_proj","o_proj"]},"lr":0.001,"name":"x","pack":false,"steps":10}'
expect_out "lora.r       = 8   [command line]"
check dashdash 0 "$runner" $fx/typed.lua --steps=3
expect_out '"steps":3'
check config_file 0 "$runner" $fx/typed.lua --config tests/fixtures/overrides.lua lora.r=2
expect_out '"lora":{"r":2,"targets":["o_proj"]}'; expect_out '"steps":7'
expect_out "[tests/fixtures/overrides.lua]"
check type_mismatch 2 "$runner" validate quickstart max_steps=abc
expect_out "config: key 'max_steps' expects a number, got 'abc' (command line)"; refute_out "stack traceback"
check bool_mismatch 2 "$runner" validate $fx/typed.lua pack=perhaps
expect_out "config: key 'pack' expects a boolean (true/false), got 'perhaps'"
check unknown_key 2 "$runner" validate quickstart seeed=3
expect_out "config: unknown key 'seeed' (command line); did you mean 'seed'?"
expect_out "valid keys: base_model, batch_size, check, device, dtype"
check table_key 2 "$runner" validate $fx/typed.lua lora=3
expect_out "config: key 'lora' is a table"
check not_kv 2 "$runner" quickstart steps
expect_out "runner: unexpected argument 'steps': expected key=value"
check bad_config_file 2 "$runner" validate quickstart --config $fx/no_config.lua
expect_out "must return a table"
check overrides_without_config 2 "$runner" $fx/no_config.lua x=1
expect_out "never called config{}"
check validate_without_config 2 "$runner" validate $fx/no_config.lua
expect_out "there is no config to validate"

# --- validate reads the data files, every line, before anything is loaded (FILE:LINE), and warns as the run
# would: an eval_fraction that holds out none of the records, warmup_steps past max_steps
vd=$tmp/validate_data
mkdir -p "$vd"
for i in $(seq 1 16); do echo "{\"text\": \"record $i\"}"; done >"$vd/d16.jsonl"
sed '8s/.*/not json/' "$vd/d16.jsonl" >"$vd/bad8.jsonl"
check validate_bad_data_line 2 "$runner" validate lora_finetune base_model="$tmp" data="$vd/bad8.jsonl" max_steps=50
expect_out "config: 1 problem in "
expect_out "data = \"$vd/bad8.jsonl\" (command line): $vd/bad8.jsonl:8: expected a JSON object, got 'not json' (not valid JSON"
refute_out "stack traceback"; refute_out "nothing was run"
check validate_eval_split 0 "$runner" validate lora_finetune base_model="$tmp" data="$vd/d16.jsonl" max_steps=5
expect_out "warning: data: eval_fraction = 0.02 holds out none of the 16 records (16 x 0.02 = 0.32 rounds to 0), so this run trains without evaluation; hint: eval_fraction = 0.063 holds out 1 of them"
expect_out "warning: config: warmup_steps = 20 (recipe default) is more than max_steps = 5 (command line)"
expect_out "nothing was run"
check validate_no_warnings 0 "$runner" validate lora_finetune base_model="$tmp" data="$vd/d16.jsonl" eval_fraction=0.1 \
  max_steps=50
refute_out "warning:"

# --- errors inside recipes
# A message raised on purpose (error("...")) is one line; a bug (a runtime error, LibTorch's) keeps
# its traceback; LUATUNE_TRACEBACK=1 or --traceback shows it for every error (docs/recipes.md).
check lua_error 1 "$runner" $fx/lua_error.lua
expect_out "error: $fx/lua_error.lua:5: boom from the recipe"; refute_out "stack traceback"
check lua_error_traceback_env 1 env LUATUNE_TRACEBACK=1 "$runner" $fx/lua_error.lua
expect_out "error: $fx/lua_error.lua:5: boom from the recipe"
expect_out "stack traceback:"; expect_out "in function 'inner'"; expect_out "$fx/lua_error.lua:7: in main chunk"
check lua_error_traceback_flag 1 "$runner" $fx/lua_error.lua --traceback
expect_out "stack traceback:"; expect_out "in function 'inner'"
check nil_error 1 "$runner" $fx/nil_error.lua
expect_out "error: $fx/nil_error.lua:4: attempt to index field 'missing' (a nil value)"
expect_out "stack traceback:"; expect_out "in function 'inner'"; expect_out "$fx/nil_error.lua:6: in main chunk"
check shape_error 1 "$runner" $fx/shape_error.lua
expect_out "error: $fx/shape_error.lua:5: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"
expect_out "stack traceback:"; refute_out "Exception raised from"; refute_out "frame #"
check syntax_error 1 "$runner" $fx/syntax_error.lua
expect_out "$fx/syntax_error.lua:2:"

# --- Ctrl-C stops the run between steps with one message (no traceback) and status 130. SIGINT is sent once the
# recipe has printed "started" (so the handler is in place however slow the machine is).
interrupt() {
  "$runner" $fx/forever.lua >"$tmp/forever.out" 2>&1 &
  local pid=$! i
  for i in $(seq 1 300); do grep -q started "$tmp/forever.out" && break; sleep 0.1; done
  kill -INT "$pid"
  wait "$pid"
  local rc=$?
  cat "$tmp/forever.out"
  return $rc
}
check interrupt 130 interrupt
expect_out "started"; expect_out "runner: stopped by Ctrl-C (SIGINT); nothing to save"
if grep -q -e traceback -e "^error:" <<<"$out"; then echo "FAIL interrupt: a traceback or error line"; failed=$((failed + 1)); fi

# --- runner cp
check cp 0 "$runner" cp quickstart "$tmp/mine.lua"
expect_out "copied to $tmp/mine.lua"
if ! cmp -s recipes/quickstart.lua "$tmp/mine.lua"; then echo "FAIL cp: copy differs"; failed=$((failed + 1)); fi
check cp_into_dir 0 "$runner" cp quickstart "$tmp"
expect_out "copied to $tmp/quickstart.lua"
check cp_no_overwrite 2 "$runner" cp quickstart "$tmp/mine.lua"
expect_out "already exists; not overwriting it"
check run_copy 0 "$runner" validate "$tmp/mine.lua" max_steps=5
expect_out "max_steps          = 5   [command line]"
# A shipped recipe's checkout-relative default (the tokenizer set-up fetched) works from elsewhere.
if [ -f tokenizers/llama3_1/tokenizer.json ]; then
  check from_elsewhere 0 bash -c "cd / && '$(realpath "$runner")' tiny_model num_hidden_layers=1 output_dir='$tmp/tm'"
  expect_out "wrote $tmp/tm (llama)"
fi

# --- runner tokenize: JSON lines in, JSON lines out (fixture ids: tests/cpp/test_tokenizer.cpp)
tk=tests/fixtures/tokenizers/bytelevel
tokenize() {  # tokenize INPUT ARGS...: feeds INPUT (printf format) to runner tokenize
  local input=$1
  shift
  printf "$input" | "$runner" tokenize "$@"
}
check tokenize 0 tokenize '"hello world"\n"lll"\n""\n' --tokenizer $tk
expect_exact $'[11,16]\n[9,2]\n[]'
check tokenize_special 0 tokenize '"hello world"\n' --tokenizer $tk --special
expect_out "[20,11,16]"
check tokenize_file 0 tokenize '"hello world"\n' --tokenizer=$tk/tokenizer.json
expect_out "[11,16]"
check tokenize_decode 0 tokenize '[11,16]\n[20,9,2]\n' --tokenizer $tk --decode
expect_exact $'"hello world"\n"<|bos|>lll"'
check tokenize_bad_line 1 tokenize '"hello"\nhello\n' --tokenizer $tk
expect_out "[11]"; expect_out "error: stdin:2: expected a JSON string"
check tokenize_decode_bad_line 1 tokenize '[11, "x"]\n' --tokenizer $tk --decode
expect_out "error: stdin:1: expected a JSON array of token ids"
check tokenize_no_dir 2 tokenize '' --special
expect_out "runner tokenize: missing --tokenizer DIR"
check tokenize_bad_arg 2 tokenize '' --tokenizer $tk --frob
expect_out "runner tokenize: unexpected argument '--frob'"
check tokenize_missing 1 tokenize '' --tokenizer no/such/dir
expect_out "error: tokenizer: 'no/such/dir' does not exist"

# --- runner data: records as trained, masked tokens in [brackets] (ids: tests/cpp/test_data.cpp)
dx=tests/fixtures/data
check data 0 "$runner" data --tokenizer $tk --no-chat $dx/prompt_response.jsonl
expect_exact "$dx/prompt_response.jsonl: format prompt_response (plain text template), max_length 2048; [bracketed] tokens are masked (no loss on them)
line 1: 5 tokens, 3 targets
  text: [<|bos|>hello] world!<|special|>
  ids:  [20 11] 16 18 21
line 2: 5 tokens, 2 targets
  text: [<|bos|>hello world]!<|special|>
  ids:  [20 11 16] 18 21
records 2, skipped_bad 0, dropped_empty 0, tokens 10, target_tokens 5, truncated 0"
check data_limit 0 "$runner" data --tokenizer=$tk --limit 1 --max-length=3 $dx/bad_text.jsonl
expect_out "format text, max_length 3"; expect_out "  text: [<|bos|>]hello world"; expect_out "truncated 1"
refute_out "line 5"
check data_bad_record 1 "$runner" data --tokenizer $tk $dx/bad_text.jsonl
expect_out "error: $dx/bad_text.jsonl:3: expected a JSON object with \"text\" (a string), got {\"txt\":\"hello\"}"
check data_wrong_format 1 "$runner" data --tokenizer $tk --format alpaca --no-chat $dx/prompt_response.jsonl
expect_out "error: $dx/prompt_response.jsonl:1: expected a JSON object with \"instruction\", \"output\""
check data_bad_chat_template 2 "$runner" data --tokenizer $tk --chat-template chatml2 $dx/prompt_response.jsonl
expect_out "chat_template: 'chatml2' is no file, no template of $tk and none luatune ships (chatml, gemma, llama3, mistral)"
expect_out "did you mean 'chatml'?"; refute_out "error: "
check data_chat_template 0 "$runner" data --tokenizer $tk --chat-template chatml $dx/prompt_response.jsonl
expect_out "format prompt_response (chat template $PWD/templates/chat/chatml.jinja)"
check data_no_file 2 "$runner" data --tokenizer $tk
expect_out "runner data: missing FILE (a JSONL dataset)"
check data_bad_limit 2 "$runner" data --tokenizer $tk --limit x $dx/bad_text.jsonl
expect_out "runner data: --limit expects a whole number >= 1, got 'x'"
check data_bad_format 2 "$runner" data --tokenizer $tk --format sharegpt $dx/bad_text.jsonl
expect_out "data: unknown format 'sharegpt'; expected one of text, prompt_response, alpaca, chat, guanaco"

# runner plan: the recipe's config resolved as validate does, then the memory plan (no model needed
# with a preset); its own keys (model_preset, method, gpus/nproc, ...) never reach the recipe.
check plan_preset 0 "$runner" plan lora_finetune model_preset=llama3.1-8b gpus=2
expect_out "model: llama, 8.03 B parameters (7.50 B in matmuls), 41.94 M trainable"
expect_out "method: lora, dtype bf16, LoRA r=16"; expect_out "2 GPUs (data parallel, replicated)"
expect_out "H100 SXM"; expect_out "MI300X"; expect_out "nothing was run"; refute_out "validate:"
check plan_full 0 "$runner" plan full_finetune model_preset=llama3.1-8b gradient_checkpointing=false
expect_out "method: full, dtype bf16 with fp32 master weights, adamw"; expect_out "- use LoRA (r=16"
check plan_quantize 0 "$runner" plan lora_finetune model_preset=llama3.1-8b quantize=nf4
expect_out "method: qlora, dtype bf16, LoRA r=16"
check plan_qlora_recipe 0 "$runner" plan qlora_finetune model_preset=llama3.1-8b max_length=2048 batch_size=1 margin=false
expect_out "method: qlora"; expect_out "  total                  8.49  (peak at a layer's backward"
# The calibration (data/planner_calibration.json): the peaks the plan was last checked against, and the
# margin while the step as built is unmeasured (docs/hardware.md, "Calibration"); margin=false plans the
# model alone.
check plan_calibration 0 "$runner" plan lora_finetune model_preset=llama3.1-8b max_length=2048 batch_size=4 \
  gradient_checkpointing=true
expect_out "calibration: activation terms last checked against peaks measured 2026-11-26 on an NVIDIA H200 (commit 53dd9cf)"
expect_out "  the training step changed since (fingerprint 8d19f59f6d4a then, "
expect_out "  margin: +"
calibrated=$out
check plan_no_margin 0 "$runner" plan lora_finetune model_preset=llama3.1-8b max_length=2048 batch_size=4 \
  gradient_checkpointing=true margin=false
expect_out "  no margin added (margin=false): this plan is the model of today's step alone"
if [ "$(grep -m1 '^  total' <<<"$calibrated")" = "$(grep -m1 '^  total' <<<"$out")" ]; then
  echo "FAIL plan_no_margin: the same total with and without the margin"; failed=$((failed + 1))
fi
check plan_bad_margin 2 "$runner" plan lora_finetune model_preset=llama3.1-8b margin=maybe
expect_out "runner plan: margin must be true or false, got 'maybe'"
check plan_no_config 2 "$runner" plan lora_finetune base_model=/nonexistent
expect_out "plan: base_model '/nonexistent' has no config.json to read the model's shape from"
expect_out "HINT: point base_model= at a Hugging Face model directory, or pass model_preset=llama3.1-8b|mistral-7b|gemma2-9b"
check plan_bad_method 2 "$runner" plan lora_finetune model_preset=llama3.1-8b method=dora
expect_out "runner plan: method must be full, lora or qlora, got 'dora'"
check plan_bad_preset 2 "$runner" plan lora_finetune model_preset=llama4
expect_out "plan: no model preset 'llama4'"
check plan_unknown_key 2 "$runner" plan lora_finetune model_preset=llama3.1-8b seeed=1
expect_out "seeed"
# ZeRO sharding, 8-bit moments, CPU offload: nproc=, shard=, optimizer=, optimizer_offload= are plan's
# own keys too (a recipe that declares them gets plan's value; one that does not gets a note).
check plan_zero3_sheared 0 "$runner" plan llama31_sheared model_preset=llama3.1-8b nproc=2 shard=full
expect_out "2 GPUs (data parallel, shard=full: ZeRO-3)"
expect_out "decoder layers sharded 1/2; embedding, lm_head, final norm whole on every rank"
expect_out "A100 80GB        80   yes"; refute_out "declares no"
expect_out '= "full"   [command line]'  # the config printed above the plan shows the shard it used
# Two phases, each planned: the whole model with its masks, then the cut model beside its frozen teacher.
expect_out "== phase pruning: masks and weights of the whole model"
expect_out "== phase recovery: the pruned model (layers 26, heads 24 (kv 8), head_dim 128, hidden 3712, intermediate 8576) distilled from the whole model, frozen in bf16, whole on every rank (teacher_shard=false)"
expect_out "teacher               14.96  (frozen bf16 teacher, whole on every rank)"
expect_out "the pruning phase peaks: 78.52 GiB per GPU (recovery: 59.54)"
expect_out "every phase fits: H100 SXM, H100 PCIe, H200, A100 80GB, MI300X"
# Time and cost per GPU: the run's tokens, FLOPs per token, the measured MFU assumed, and its source.
check plan_time 0 "$runner" plan lora_finetune model_preset=llama3.1-8b max_steps=1000
expect_out "time: 6.55e+04 tokens a step per GPU (batch_size 4 x 8 micro-batches x max_length 2048)"
expect_out "MFU 0.207: luatune's Llama 3.1 8B LoRA measured 2026-11-26"
expect_out "the run: 6.554e+07 tokens (1000 steps x 1 GPU)"; expect_out "step_s     run_h   cost_usd"
# A pruning job trains every weight: its advice never suggests adapters.
check plan_pruning_advice 0 "$runner" plan llama31_sheared model_preset=llama3.1-8b
expect_out "a pruning job: every weight trains, so the advice below leaves LoRA and QLoRA out"
expect_out "- add optimizer_offload=cpu"; refute_out "use LoRA"; refute_out "use QLoRA"
# Minitron: the cut model beside its teacher, the one phase that trains.
check plan_minitron 0 "$runner" plan minitron_prune_distill model_preset=llama3.1-8b shape.hidden=3072 shape.intermediate=9216 margin=false
expect_out "== phase distillation: the pruned model (layers 32, heads 32 (kv 8), head_dim 128, hidden 3072, intermediate 9216) distilled from the whole model, frozen in bf16, whole on every rank"
expect_out "the distillation phase peaks: 92.06 GiB per GPU"
check plan_zero3_full 0 "$runner" plan full_finetune model_preset=llama3.1-8b nproc=8 shard=full
expect_out "A100 40GB        40   yes"
check plan_zero_advice 0 "$runner" plan llama31_sheared model_preset=llama3.1-8b nproc=2
expect_out "A100 80GB        80    no"; expect_out "- add shard=full (78.5 GiB per GPU, ZeRO-3 over 2 GPUs)"
expect_out "- cache the teacher's top-64 logits first: teacher_cache=DIR (70.9 GiB per GPU"  # recovery's advice
refute_out "replicates the model"
check plan_offload 0 "$runner" plan full_finetune model_preset=llama3.1-8b nproc=8 shard=full optimizer_offload=cpu gpus_per_node=4
expect_out "adamw offloaded to the CPU"; expect_out "per node 4 ranks x 14.96 = 59.83 GiB"
check plan_undeclared_key 0 "$runner" plan $fx/typed.lua model_preset=llama3.1-8b shard=FULL_SHARD nproc=2
expect_out "note: typed.lua declares no 'shard' key: planned with shard=FULL_SHARD, but a run needs the recipe to take shard= and pass it to train.new"
expect_out "shard=full: ZeRO-3"
check plan_bad_shard 2 "$runner" plan full_finetune model_preset=llama3.1-8b shard=zero3
expect_out "runner plan: shard must be none, optimizer, gradients or full, got 'zero3'"
check plan_bad_optimizer 2 "$runner" plan full_finetune model_preset=llama3.1-8b optimizer=adam
expect_out "runner plan: optimizer must be adamw, adamw8bit or sgd, got 'adam'"
check plan_bad_nproc 2 "$runner" plan full_finetune model_preset=llama3.1-8b nproc=0
expect_out "runner plan: nproc must be a whole number >= 1, got '0'"

# --- runner --nproc: the command line only (the launcher itself: tests/dist/test_launch.sh)
check help_nproc 0 "$runner" --help
expect_out "runner --nproc N RECIPE [key=value ...]"
check nproc_zero 2 "$runner" --nproc 0 quickstart
expect_exact "runner: --nproc expects a whole number >= 1, got '0'"
check nproc_word 2 "$runner" --nproc=x quickstart
expect_exact "runner: --nproc expects a whole number >= 1, got 'x'"
check nproc_no_value 2 "$runner" --nproc
expect_exact "runner: --nproc needs N, a whole number >= 1"
check nproc_no_recipe 2 "$runner" --nproc 2
expect_exact "runner --nproc: missing RECIPE"
check nproc_verb 2 "$runner" --nproc 2 validate quickstart
expect_exact "runner --nproc: expected RECIPE [key=value ...] after N, got 'validate'"
check nproc_missing_recipe 2 "$runner" --nproc 2 no_such_recipe
expect_out "runner: no recipe 'no_such_recipe'"; refute_out "[rank 1]"

# --- runner wandb-sync: the command line only (uploads: tests/recipes/test_wandb_recipes.sh)
check help_wandb_sync 0 "$runner" --help
expect_out "runner wandb-sync [--trust-spool-host] PATH"
expect_out "--trust-spool-host, which uploads it (with the key) to the host the spool names"
check wandb_sync_trusted_no_spool 1 "$runner" wandb-sync --trust-spool-host "$tmp/no_spool"
expect_out "runner wandb-sync: '$tmp/no_spool' holds no spooled W&B run"
check wandb_sync_flag_after_path 1 "$runner" wandb-sync "$tmp/no_spool" --trust-spool-host
expect_out "holds no spooled W&B run"
check wandb_sync_no_path 2 "$runner" wandb-sync --trust-spool-host
expect_out "runner wandb-sync: expected one PATH"; expect_out "usage: runner wandb-sync [--trust-spool-host] PATH"
check wandb_sync_unknown_flag 2 "$runner" wandb-sync --trust "$tmp"
expect_out "runner wandb-sync: unexpected argument '--trust'"
check wandb_sync_two_paths 2 "$runner" wandb-sync "$tmp" "$tmp"
expect_out "runner wandb-sync: unexpected argument '$tmp'"

# --- runner report (the report itself: tests/cpp/test_run_report.cpp, tests/tools/test_run_report_render.sh)
mkdir -p "$tmp/no_log"
check report_no_metrics 1 "$runner" report "$tmp/no_log"
expect_exact "error: report: no metrics file '$tmp/no_log/metrics.jsonl' (metrics.open{jsonl = OUTPUT_DIR .. \"/metrics.jsonl\"} writes it)"
check report_help 0 "$runner" report --help
expect_out "usage: runner report OUTPUT_DIR [--out FILE]"; expect_out "report: reads OUTPUT_DIR/metrics.jsonl"
check report_no_dir 2 "$runner" report
expect_out "runner report: expected OUTPUT_DIR"; expect_out "usage: runner report OUTPUT_DIR [--out FILE]"
mkdir -p "$tmp/run" && printf '{"step":1,"loss":2.5}\n{"step":2,"loss":2.0}\n{"step":3,"lo' >"$tmp/run/metrics.jsonl"
check report_writes 0 "$runner" report "$tmp/run"
expect_exact "report: $tmp/run/report.html"
check report_files 0 test -s "$tmp/run/report.html" -a -s "$tmp/run/report.md"
check report_out 0 "$runner" report "$tmp/run" --out "$tmp/elsewhere/r.html"
expect_exact "report: $tmp/elsewhere/r.html"
check help_report 0 "$runner" --help
expect_out "runner report OUTPUT_DIR [--out FILE]"

cli_finish
