#!/usr/bin/env bash
# tests/cli/test_api.sh RUNNER TMPDIR: the checks on bindings/lua_api.yaml, the Lua API's declarations
# (bindings/lua_api.h). `runner api --check --spec FILE` checks FILE instead of the embedded copy: a
# function a module registers and FILE does not declare is reported at its LT_REGISTER line
# (bindings/lua_util.h), one FILE declares and no module registers at FILE's line; a malformed FILE
# fails on one line naming the file, line and column and what was expected. And every declaration a
# binding looks up by name is in the file.
set -u
runner=${1:?usage: test_api.sh path/to/runner TMPDIR}
tmp=${2:?usage: test_api.sh path/to/runner TMPDIR}
spec=bindings/lua_api.yaml
failed=0 checks=0

source tests/cli/lib.sh

rm -rf "$tmp"
mkdir -p "$tmp"

# --- the embedded declarations match what the modules register
check embedded_sound 0 "$runner" api --check
refute_out "runner api:"

# --- a function registered but not declared: lora.merge's entry (up to the blank line) removed
sed '/^    lora\.merge:$/,/^$/d' $spec >"$tmp/missing.yaml"
line=$(grep -n '^LT_REGISTER("lora\.merge", ' bindings/lora.cpp | cut -d: -f1)
check undeclared_function 1 "$runner" api --check --spec "$tmp/missing.yaml"
expect_out "runner api: bindings/lora.cpp:$line: lora.merge: the lora module registers it, but $tmp/missing.yaml does not declare it"

# --- a method registered but not declared
sed '/^    Model:dtype:/d' $spec >"$tmp/method.yaml"
line=$(grep -n '^LT_REGISTER("Model:dtype", ' bindings/models.cpp | cut -d: -f1)
check undeclared_method 1 "$runner" api --check --spec "$tmp/method.yaml"
expect_out "runner api: bindings/models.cpp:$line: Model:dtype: a method registered for class Model, but $tmp/method.yaml does not declare it"

# --- a function declared that no module registers (the file ends inside export's functions)
cp $spec "$tmp/extra.yaml"
line=$(($(wc -l <"$tmp/extra.yaml") + 1))
printf '    export.onnx: {params: "model: Model, path: string", doc: not written yet}\n' >>"$tmp/extra.yaml"
check unregistered_function 1 "$runner" api --check --spec "$tmp/extra.yaml"
expect_out "runner api: $tmp/extra.yaml:$line: export.onnx: declared, but the export module registers no function onnx"

# --- a method declared through self_class that the class lacks
awk '{print} /^    torch\.cat:$/ {print "      self_class: Tensor"}' $spec >"$tmp/self.yaml"
line=$(grep -n '^    torch\.cat:' "$tmp/self.yaml" | cut -d: -f1)
check unregistered_method 1 "$runner" api --check --spec "$tmp/self.yaml"
expect_out "runner api: $tmp/self.yaml:$line: torch.cat: declared, but class Tensor registers no method cat (self_class Tensor)"

# --- malformed files: one line, file:line:column, what was expected
sed 's/^    lora\.merge:$/    lora.merge: [unclosed/' $spec >"$tmp/syntax.yaml"
check yaml_syntax 1 "$runner" api --parse --spec "$tmp/syntax.yaml"  # what the build runs
expect_out "error: $tmp/syntax.yaml:"; expect_out ": not valid YAML: "
[ "$(wc -l <<<"$out")" = 1 ] || { echo "FAIL yaml_syntax: more than one line"; failed=$((failed + 1)); }
check parse_embedded 0 "$runner" api --parse
expect_exact ""

sed 's/^      returns: "integer # the Linears adapted"$/      retuns: "integer # the Linears adapted"/' $spec >"$tmp/key.yaml"
line=$(grep -n '^      retuns:' "$tmp/key.yaml" | cut -d: -f1)
check unknown_key 1 "$runner" api --lua-types --spec "$tmp/key.yaml"
expect_exact "error: $tmp/key.yaml:$line:7: lora.apply: unknown key 'retuns'; expected params, returns, doc, options, self_class"

sed '0,/^      options: CreationOpts$/s//      options: CreationOps/' $spec >"$tmp/table.yaml"
line=$(grep -n '^      options: CreationOps$' "$tmp/table.yaml" | cut -d: -f1)
check unknown_table 1 "$runner" api --lua-types --spec "$tmp/table.yaml"
expect_exact "error: $tmp/table.yaml:$line:16: torch.tensor: options names the table 'CreationOps', which no module declares under tables"

sed 's/^        ignore_index: {type: integer, /        ignore_index: {/' $spec >"$tmp/type.yaml"
line=$(grep -n '^        ignore_index: {default' "$tmp/type.yaml" | cut -d: -f1)
check missing_type 1 "$runner" api --lua-types --spec "$tmp/type.yaml"
expect_exact "error: $tmp/type.yaml:$line:23: torch.cross_entropy: options: option 'ignore_index': expected a type (type: integer, ...)"

# --- every declaration a binding asks for by name is declared (lt_api fails at run time otherwise)
checks=$((checks + 1))
for name in $(grep -ohE 'lt_api(_table)?\("[^"]+"\)' bindings/*.cpp | sed -E 's/.*\("([^"]+)"\)/\1/' | sort -u); do
  if ! grep -qE "^    $(sed 's/[.]/\\./g' <<<"$name"):( |\$)" $spec; then
    echo "FAIL lookups: a binding asks for $name, which $spec does not declare"
    failed=$((failed + 1))
  fi
done

cli_finish
