#!/usr/bin/env bash
# tests/cli/test_limits.sh RUNNER: absurd inputs end in one pinned line naming the file, line,
# tensor or option, never in a crash (docs/limits.md): JSON nested 100000 deep (datasets,
# preferences, config.json, tokenizer.json), Lua tables that contain themselves, sizes in
# config.json beyond the weights or any model, models.init far beyond memory, batch sizes and
# step counts no run can have, an allocation that fails, hostile chat templates and GGUF files, and a
# --config file returning {}.
set -u
runner=${1:?usage: test_limits.sh path/to/runner}
tk=tests/fixtures/tokenizers/bytelevel
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0 checks=0

source tests/cli/lib.sh

deep_open=$(head -c 100000 /dev/zero | tr '\0' '[')
deep_close=$(head -c 100000 /dev/zero | tr '\0' ']')
deep="$deep_open$deep_close"

# --- JSON nested 100000 levels deep: every reader stops at 128 with the file and line
printf '%s\n' "$deep" >"$tmp/deep.jsonl"
check data_deep 1 "$runner" data --tokenizer $tk "$tmp/deep.jsonl"
expect_out "error: $tmp/deep.jsonl:1: JSON nested deeper than 128 levels"
printf '{"text": "ok"}\n{"text": %s}\n' "$deep" >"$tmp/deep_field.jsonl"
check data_deep_field 1 "$runner" data --tokenizer $tk "$tmp/deep_field.jsonl"
expect_out "error: $tmp/deep_field.jsonl:2: JSON nested deeper than 128 levels"

cat >"$tmp/prefs.lua" <<'EOF'
local data, tokenizer = require "data", require "tokenizer"
local tok = tokenizer.load(os.getenv("TK"))
local p = data.preferences(os.getenv("FILE"), { tokenizer = tok, chat = false,
                                                skip_bad = os.getenv("SKIP") == "1" })
print("pairs", #p, "skipped", p:stats().skipped_bad)
EOF
printf '{"prompt": "a", "chosen": "b", "rejected": "c"}\n{"prompt": %s, "chosen": "b", "rejected": "c"}\n' "$deep" \
  >"$tmp/prefs.jsonl"
check preferences_deep 1 env TK=$tk FILE="$tmp/prefs.jsonl" "$runner" "$tmp/prefs.lua"
expect_out "$tmp/prefs.jsonl:2: JSON nested deeper than 128 levels"
check preferences_deep_skipped 0 env TK=$tk FILE="$tmp/prefs.jsonl" SKIP=1 "$runner" "$tmp/prefs.lua"
expect_out "pairs	1	skipped	1"

# A model to spoil: tiny, saved with its config.json.
cat >"$tmp/save.lua" <<'EOF'
local models = require "models"
models.init({ arch = "llama", vocab_size = 64, hidden_size = 16, intermediate_size = 32, num_hidden_layers = 2,
              num_attention_heads = 2 }):save(os.getenv("DIR"))
EOF
cat >"$tmp/load.lua" <<'EOF'
print(require("models").load(os.getenv("DIR")))
EOF
check save_tiny 0 env DIR="$tmp/tiny" "$runner" "$tmp/save.lua"
spoil() {  # spoil NAME SED_EXPR: a copy of the tiny model with config.json edited
  rm -rf "$tmp/$1"
  cp -r "$tmp/tiny" "$tmp/$1"
  sed -i "$2" "$tmp/$1/config.json"
}
spoil deep_config ''
{ head -n 1 "$tmp/tiny/config.json"; printf '  "deep": %s,\n' "$deep"; tail -n +2 "$tmp/tiny/config.json"; } \
  >"$tmp/deep_config/config.json"
check config_deep 1 env DIR="$tmp/deep_config" "$runner" "$tmp/load.lua"
expect_out "$tmp/deep_config/config.json:2: JSON nested deeper than 128 levels"

# --- sizes in config.json: checked against sane limits and the weights before anything is sized
spoil layers_1e9 's/"num_hidden_layers": 2/"num_hidden_layers": 1000000000/'
check layers_1e9 1 env DIR="$tmp/layers_1e9" "$runner" "$tmp/load.lua"
expect_out "$tmp/layers_1e9/config.json: num_hidden_layers is 1000000000, more than luatune's limit of 1024"
spoil layers_3 's/"num_hidden_layers": 2/"num_hidden_layers": 3/'
check layers_3 1 env DIR="$tmp/layers_3" "$runner" "$tmp/load.lua"
expect_out "$tmp/layers_3/config.json: num_hidden_layers is 3, but the weights in $tmp/layers_3 have 2 layers (model.layers.0 to model.layers.1)"
spoil layers_1e300 's/"num_hidden_layers": 2/"num_hidden_layers": 1e300/'
check layers_1e300 1 env DIR="$tmp/layers_1e300" "$runner" "$tmp/load.lua"
expect_out "config.json: field \"num_hidden_layers\" must be an integer between -2^53 and 2^53, got 1e+300"

# --- tokenizer.json
rm -rf "$tmp/tok" && cp -r $tk "$tmp/tok"
{ printf '{"deep": %s,' "$deep"; tail -c +2 $tk/tokenizer.json; } >"$tmp/tok/tokenizer.json"
check tokenizer_deep 1 "$runner" data --tokenizer "$tmp/tok" "$tmp/deep.jsonl"
expect_out "$tmp/tok/tokenizer.json:1: JSON nested deeper than 128 levels"

# --- Lua tables that contain themselves: a config value, a record
cat >"$tmp/cycle_config.lua" <<'EOF'
local t = {}
t.again = t
config { a = t }
EOF
check config_cycle 2 "$runner" "$tmp/cycle_config.lua"
expect_out "config: 'a.again.again.again"; expect_out "nests tables deeper than 128 levels"
cat >"$tmp/cycle_record.lua" <<'EOF'
local data, tokenizer = require "data", require "tokenizer"
local r = {}
r.text = r
data.from_records({ r }, { tokenizer = tokenizer.load(os.getenv("TK")) })
EOF
check record_cycle 1 env TK=$tk "$runner" "$tmp/cycle_record.lua"
expect_out "from_records: records[1].text.text"; expect_out "nests tables deeper than 128 levels"

# --- models.init far beyond memory: refused with the bytes it would need, before allocating
cat >"$tmp/init_huge.lua" <<'EOF'
require("models").init { arch = "llama", vocab_size = 1024, hidden_size = 131072, intermediate_size = 1048576,
                         num_hidden_layers = 1024, num_attention_heads = 1024 }
EOF
check init_huge 1 "$runner" "$tmp/init_huge.lua"
expect_out "models.init: a llama of these sizes (1024 layers, hidden_size 131072, vocab_size 1024) needs 1.8 PiB"
expect_out "more than this machine's"

# --- batches and steps: gradient_accumulation_steps=1e18, max_steps=1e300 (the recipes' keys)
cat >"$tmp/batches.lua" <<'EOF'
local cfg = config { batch_size = 4, gradient_accumulation_steps = 1, max_steps = 2 }
local data, tokenizer = require "data", require "tokenizer"
local ds = data.from_records({ { text = "a b c" }, { text = "d e f" } }, { tokenizer = tokenizer.load(os.getenv("TK")) })
for step, b in ds:batches { size = cfg.batch_size * cfg.gradient_accumulation_steps, max_steps = cfg.max_steps } do print("step", step) end
EOF
check grad_accum_1e18 1 env TK=$tk "$runner" "$tmp/batches.lua" gradient_accumulation_steps=1e18
expect_out "batches.lua:4: data: batches: option 'size' is 4e+18 rows per step, more than the dataset's 1 rows and more than 65536"
check batches_steps_1e300 1 env TK=$tk "$runner" "$tmp/batches.lua" max_steps=1e300
expect_out "option 'max_steps' expects an integer between -9007199254740992 and 9007199254740992, got 1e+300"
check batches_ok 0 env TK=$tk "$runner" "$tmp/batches.lua" gradient_accumulation_steps=3
expect_out "step	2"
cat >"$tmp/train_steps.lua" <<'EOF'
local cfg = config { max_steps = 10 }
local models, train = require "models", require "train"
local m = models.init { arch = "llama", vocab_size = 64, hidden_size = 16, intermediate_size = 32,
                        num_hidden_layers = 1, num_attention_heads = 2 }
print(train.new(m, { learning_rate = 1e-3, max_steps = cfg.max_steps, schedule = "cosine" }))
EOF
check train_steps_1e300 1 "$runner" "$tmp/train_steps.lua" max_steps=1e300
expect_out "train_steps.lua:5: bad argument #2 to 'new' (option 'max_steps' expects an integer between -9007199254740992 and 9007199254740992, got 1e+300)"

# --- an allocation that fails names what it was for (an address-space limit makes it fail everywhere)
cat >"$tmp/oom.lua" <<'EOF'
local data, tokenizer = require "data", require "tokenizer"
local ds = data.from_records({ { text = "a b c" } }, { tokenizer = tokenizer.load(os.getenv("TK")), max_length = 2^40 })
for _, b in ds:batches { size = 1 } do print(b) end
EOF
check oom_batch 1 bash -c 'ulimit -v 16000000 && TK=$1 "$2" "$3"' _ $tk "$runner" "$tmp/oom.lua"
expect_out "oom.lua:3: data: allocating a batch of 1 rows x 1099511627776 tokens (4 int64 tensors): out of memory ("

# --- hostile chat templates (docs/chat_formats.md, "Bad templates"): one line naming the template's file
# and line, before or at the record that triggered it; never a crash, a hang or a traceback
pr=tests/fixtures/data/prompt_response.jsonl
printf 'ok\n{%% if messages %%}\nno end\n' >"$tmp/t_syntax.jinja"
check template_syntax 2 "$runner" data --tokenizer $tk --chat-template "$tmp/t_syntax.jinja" $pr
expect_out "chat_template $tmp/t_syntax.jinja:3: syntax error: unexpected end of input, expected end of block"
printf 'a\n{%% for m in messages %%}{{ raise_exception("no " + m.role + " here") }}{%% endfor %%}' >"$tmp/t_raise.jinja"
check template_raise 1 "$runner" data --tokenizer $tk --chat-template "$tmp/t_raise.jinja" $pr
expect_out "error: $pr:1: chat_template $tmp/t_raise.jinja:2: the template raised an exception: no user here"
printf '{{ messages[0].content }}{{ nope.attr }}' >"$tmp/t_undefined.jinja"
check template_undefined 1 "$runner" data --tokenizer $tk --chat-template "$tmp/t_undefined.jinja" $pr
expect_out "error: $pr:1: chat_template $tmp/t_undefined.jinja:1: undefined value"
printf '{%% for i in range(100000) %%}{%% for j in range(100000) %%}{%% endfor %%}{%% endfor %%}' >"$tmp/t_loop.jinja"
check template_endless 1 timeout 120 "$runner" data --tokenizer $tk --chat-template "$tmp/t_loop.jinja" $pr
expect_out "chat_template $tmp/t_loop.jinja:1: the template ran past its work limit (an endless loop?)"
printf '{%% macro f(n) %%}{{ f(n + 1) }}{%% endmacro %%}{{ f(0) }}' >"$tmp/t_recursion.jinja"
check template_recursion 1 "$runner" data --tokenizer $tk --chat-template "$tmp/t_recursion.jinja" $pr
expect_out "chat_template $tmp/t_recursion.jinja:1: invalid operation: recursion limit exceeded"
printf '{%% for i in range(70) %%}{{ "x" * 1048576 }}{%% endfor %%}' >"$tmp/t_huge.jinja"
check template_huge 1 "$runner" data --tokenizer $tk --chat-template "$tmp/t_huge.jinja" $pr
expect_out "chat_template $tmp/t_huge.jinja: the rendered text is past its size limit"
printf '\xff{{ x }}' >"$tmp/t_binary.jinja"
check template_not_utf8 2 "$runner" data --tokenizer $tk --chat-template "$tmp/t_binary.jinja" $pr
expect_out "chat_template $tmp/t_binary.jinja: the template is not valid UTF-8 (byte 0)"
# inside tokenizer_config.json the line is the template's own
mkdir -p "$tmp/tk_bad_template"
cp $tk/tokenizer.json "$tmp/tk_bad_template/"
printf '{"eos_token": "<|special|>", "chat_template": "x\\n{%% for %%}"}' >"$tmp/tk_bad_template/tokenizer_config.json"
check template_in_config 2 "$runner" data --tokenizer "$tmp/tk_bad_template" $pr
expect_out "chat_template $tmp/tk_bad_template/tokenizer_config.json (template line 2): syntax error:"
refute_out "stack traceback"

# --- truncated and hostile GGUF files (tests/tools/gguf_hostile.py: counts, string lengths, types,
# dimensions, offsets, alignment): `runner convert` ends each in one line naming the file and what is
# wrong, and leaves no output directory
py=${LUATUNE_PYTHON:-.venv/bin/python3}
if "$py" tests/tools/gguf_hostile.py "$tmp/gguf" >"$tmp/gguf.tsv" 2>"$tmp/gguf.err"; then
  while IFS=$'\t' read -r name want; do
    check "gguf_$name" 1 "$runner" convert "$tmp/gguf/$name.gguf" "$tmp/gguf_out"
    expect_out "error: "
    expect_out "$want"
    refute_out "stack traceback"
    [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || { echo "FAIL gguf_$name: more than one line"; failed=$((failed + 1)); }
    [ ! -e "$tmp/gguf_out" ] || { echo "FAIL gguf_$name: left $tmp/gguf_out"; failed=$((failed + 1)); rm -rf "$tmp/gguf_out"; }
  done <"$tmp/gguf.tsv"
  [ "$(wc -l <"$tmp/gguf.tsv")" -ge 30 ] || { echo "FAIL gguf: expected 30 or more files"; failed=$((failed + 1)); }
else
  echo "FAIL gguf: tests/tools/gguf_hostile.py: $(cat "$tmp/gguf.err")"; failed=$((failed + 1))
fi

# --- a --config file returning {}: no overrides, not "a list"
echo 'return {}' >"$tmp/empty.lua"
check config_file_empty 0 "$runner" "$tmp/train_steps.lua" --config "$tmp/empty.lua"
expect_out "Trainer(adamw"

cli_finish
