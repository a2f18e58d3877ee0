#!/usr/bin/env bash
# tests/cli/test_api.sh RUNNER TMPDIR: the checks on bindings/api/*.yaml, the Lua API's declarations
# (bindings/lua_api.h). `runner api --check --spec DIR` checks DIR/*.yaml instead of the embedded
# copies: a function a module registers and DIR does not declare is reported at its LT_REGISTER line
# (bindings/lua_util.h), one DIR declares and no module registers at its file's line; a malformed
# file fails on one line naming the file, line and column and what was expected. And every
# declaration a binding looks up by name is in the files.
set -u
runner=${1:?usage: test_api.sh path/to/runner TMPDIR}
tmp=${2:?usage: test_api.sh path/to/runner TMPDIR}
spec=bindings/api
# variant NAME: a copy of the declarations in $tmp/NAME, for one check to break
variant() { cp -r $spec "$tmp/$1"; }
failed=0 checks=0

source tests/cli/lib.sh

rm -rf "$tmp"
mkdir -p "$tmp"

# --- the embedded declarations match what the modules register
check embedded_sound 0 "$runner" api --check
refute_out "runner api:"

# --- a function registered but not declared: lora.merge's entry (up to the blank line) removed
variant missing
sed -i '/^    lora\.merge:$/,/^$/d' "$tmp/missing/lora.yaml"
line=$(grep -n '^LT_REGISTER("lora\.merge", ' bindings/lora.cpp | cut -d: -f1)
check undeclared_function 1 "$runner" api --check --spec "$tmp/missing"
expect_out "runner api: bindings/lora.cpp:$line: lora.merge: the lora module registers it, but $tmp/missing does not declare it"

# --- a method registered but not declared
variant method
sed -i '/^    Model:dtype:/d' "$tmp/method/models.yaml"
line=$(grep -n '^LT_REGISTER("Model:dtype", ' bindings/models.cpp | cut -d: -f1)
check undeclared_method 1 "$runner" api --check --spec "$tmp/method"
expect_out "runner api: bindings/models.cpp:$line: Model:dtype: a method registered for class Model, but $tmp/method does not declare it"

# --- a function declared that no module registers (export.yaml ends inside export's functions)
variant extra
line=$(($(wc -l <"$tmp/extra/export.yaml") + 1))
printf '    export.onnx: {params: "model: Model, path: string", doc: not written yet}\n' >>"$tmp/extra/export.yaml"
check unregistered_function 1 "$runner" api --check --spec "$tmp/extra"
expect_out "runner api: $tmp/extra/export.yaml:$line: export.onnx: declared, but the export module registers no function onnx"

# --- a method declared through self_class that the class lacks
variant self
awk '{print} /^    torch\.cat:$/ {print "      self_class: Tensor"}' $spec/torch.yaml >"$tmp/self/torch.yaml"
line=$(grep -n '^    torch\.cat:' "$tmp/self/torch.yaml" | cut -d: -f1)
check unregistered_method 1 "$runner" api --check --spec "$tmp/self"
expect_out "runner api: $tmp/self/torch.yaml:$line: torch.cat: declared, but class Tensor registers no method cat (self_class Tensor)"

# --- malformed files: one line, file:line:column, what was expected
variant syntax
sed -i 's/^    lora\.merge:$/    lora.merge: [unclosed/' "$tmp/syntax/lora.yaml"
check yaml_syntax 1 "$runner" api --parse --spec "$tmp/syntax"  # what the build runs
expect_out "error: $tmp/syntax/lora.yaml:"; expect_out ": not valid YAML: "
[ "$(wc -l <<<"$out")" = 1 ] || { echo "FAIL yaml_syntax: more than one line"; failed=$((failed + 1)); }
check parse_embedded 0 "$runner" api --parse
expect_exact ""

# One edit to one file each; the error names the edited line ($line) and the column given.
# NAME|FILE|SED SCRIPT|GREP PATTERN of the edited line|COLUMN|MESSAGE after "file:line:column: "
while IFS='|' read -r -u 3 name file edit pattern column message; do
  variant "$name"
  sed -i "$edit" "$tmp/$name/$file"
  line=$(grep -n -m1 "$pattern" "$tmp/$name/$file" | cut -d: -f1)
  check "$name" 1 "$runner" api --lua-types --spec "$tmp/$name"
  expect_exact "error: $tmp/$name/$file:$line:$column: $message"
done 3<<'CASES'
unknown_key|lora.yaml|s/^      returns: "integer # the Linears adapted"$/      retuns: "integer # the Linears adapted"/|^      retuns:|7|lora.apply: unknown key 'retuns'; expected params, returns, doc, options, self_class
unknown_table|torch.yaml|0,/^      options: CreationOpts$/s//      options: CreationOps/|^      options: CreationOps$|16|torch.tensor: options names the table 'CreationOps', which no module declares under tables
missing_type|torch.yaml|s/^        ignore_index: {type: integer, /        ignore_index: {/|^        ignore_index: {default|23|torch.cross_entropy: options: option 'ignore_index': expected a type (type: integer, ...)
CASES

# --- modules.yaml lists the modules in order; each is declared in one file
variant unlisted
sed -i '/^- eval$/d' "$tmp/unlisted/modules.yaml"
check unlisted_module 1 "$runner" api --parse --spec "$tmp/unlisted"
expect_exact "error: $tmp/unlisted/eval.yaml:3:1: module eval is declared, but $tmp/unlisted/modules.yaml does not list it"

variant twice
cp "$tmp/twice/eval.yaml" "$tmp/twice/eval2.yaml"
check module_twice 1 "$runner" api --parse --spec "$tmp/twice"
expect_exact "error: $tmp/twice/eval2.yaml:3:1: module eval is declared twice (also at $tmp/twice/eval.yaml:3:1)"

# --- an old option name (renamed:) works, with one warning line per name per process
cat >"$tmp/old_names.lua" <<'LUA'
local model = models.init { arch = "llama", vocab_size = 50, hidden_size = 32, intermediate_size = 40,
                            num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2, seed = 1 }
local new = train.new(model, { learning_rate = 0.5, max_steps = 4, schedule = "linear" }):lr(3)
for _ = 1, 3 do assert(train.new(model, { lr = 0.5, steps = 4, schedule = "linear" }):lr(3) == new) end
for _ = 1, 2 do assert(hw.plan { model = "llama3.1-8b", method = "lora", lora_r = 8 }.lora_r == 8) end
print("done")
LUA
check old_option_names 0 "$runner" "$tmp/old_names.lua"
expect_exact "warning: train.new: option 'lr' is deprecated; use 'learning_rate' (the old name goes in the next release)
warning: train.new: option 'steps' is deprecated; use 'max_steps' (the old name goes in the next release)
warning: hw.plan: option 'lora_r' is deprecated; use 'lora.r' (the old name goes in the next release)
done"
variant renamed
sed -i 's/^        lr: {renamed: learning_rate}$/        lr: {renamed: learning_rat}/' "$tmp/renamed/train.yaml"
line=$(grep -n '^        lr: {renamed' "$tmp/renamed/train.yaml" | cut -d: -f1)
check renamed_unknown 1 "$runner" api --parse --spec "$tmp/renamed"
expect_exact "error: $tmp/renamed/train.yaml:$line:13: train.new: options: option 'lr': renamed names 'learning_rat', which is not an option declared above it"

# --- every declaration a binding asks for by name is declared (lt_api fails at run time otherwise)
checks=$((checks + 1))
for name in $(grep -ohE 'lt_api(_table)?\("[^"]+"\)' bindings/*.cpp | sed -E 's/.*\("([^"]+)"\)/\1/' | sort -u); do
  if ! grep -qE "^    $(sed 's/[.]/\\./g' <<<"$name"):( |\$)" $spec/*.yaml; then
    echo "FAIL lookups: a binding asks for $name, which $spec/*.yaml do not declare"
    failed=$((failed + 1))
  fi
done

cli_finish
