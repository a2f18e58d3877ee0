#!/usr/bin/env bash
# tests/cli/test_config_file.sh RUNNER TMPDIR: --config FILE in YAML and JSON (docs/config.md). The
# values reach the recipe, `validate` marks each overridden key with the file it came from, files
# apply in order before key=value, and bad files fail with exit 2 and one line naming key and file.
set -u
runner=${1:?usage: test_config_file.sh path/to/runner TMPDIR}
tmp=${2:?usage: test_config_file.sh path/to/runner TMPDIR}
fx=tests/fixtures/recipes
failed=0 checks=0

source tests/cli/lib.sh

# expect_line REGEX: some line of the last output matches REGEX (extended) as a whole.
expect_line() {
  if ! grep -qE -- "^$1\$" <<<"$out"; then
    echo "FAIL $current: no line matches: $1"
    echo "$out" | head -c 4000 | sed 's/^/    /'
    failed=$((failed + 1))
  fi
}

rm -rf "$tmp"
mkdir -p "$tmp"
t=$(sed 's/[][\\.^$*+?(){}|]/\\&/g' <<<"$tmp")  # $tmp as a regex
# Paths that exist, so validate's path checks pass whatever they look for beyond existence.
paths=(base_model=tests/fixtures data=tests/fixtures/data/text_small.jsonl)

cat >"$tmp/x.yaml" <<'EOF'
# a torchtune/Axolotl-style file of overrides
lora:
  r: 8
  targets:
    - q_proj
    - o_proj
max_length: 512
optimizer: sgd
EOF
cat >"$tmp/x.json" <<'EOF'
{"lora": {"r": 4, "dropout": 0.1}, "optimizer": "adamw8bit"}
EOF

# --- the values reach the recipe (a fixture that prints its resolved config as JSON)
printf 'name: from_yaml\npack: no\nlora:\n  r: 2\n  targets: [k_proj]\n' >"$tmp/typed.yml"
check yaml_run 0 "$runner" $fx/typed.lua --config "$tmp/typed.yml"
expect_out '"lora":{"r":2,"targets":["k_proj"]}'; expect_out '"name":"from_yaml"'; expect_out '"pack":false'
printf '{"name": "from_json", "pack": false, "lora": {"targets": ["v_proj", "o_proj"]}}' >"$tmp/typed.json"
check json_run 0 "$runner" $fx/typed.lua --config "$tmp/typed.json"
expect_out '"lora":{"r":16,"targets":["v_proj","o_proj"]}'; expect_out '"name":"from_json"'

# --- validate prints the overridden values, each marked with its file
check yaml_validate 0 "$runner" validate lora_finetune --config "$tmp/x.yaml" "${paths[@]}"
expect_line " +lora\.r += 8   \[$t/x\.yaml\]"
expect_line " +lora\.targets += \{\"q_proj\", \"o_proj\"\}   \[$t/x\.yaml\]"
expect_line " +max_length += 512   \[$t/x\.yaml\]"
expect_line " +optimizer += \"sgd\"   \[$t/x\.yaml\]"
expect_line " +lora\.alpha += 32"
check json_validate 0 "$runner" validate lora_finetune --config "$tmp/x.json" "${paths[@]}"
expect_line " +lora\.r += 4   \[$t/x\.json\]"
expect_line " +lora\.dropout += 0\.1   \[$t/x\.json\]"
expect_line " +optimizer += \"adamw8bit\"   \[$t/x\.json\]"
# Files in order, then key=value: the JSON file beats the YAML one, the command line beats both.
check order 0 "$runner" validate lora_finetune --config "$tmp/x.yaml" --config "$tmp/x.json" "${paths[@]}" lora.r=32
expect_line " +lora\.r += 32   \[command line\]"
expect_line " +optimizer += \"adamw8bit\"   \[$t/x\.json\]"
expect_line " +lora\.targets += \{\"q_proj\", \"o_proj\"\}   \[$t/x\.yaml\]"

# --- bad files: exit 2, one line naming the key (or position) and the file
# refused NAME FILE TEXT: writes TEXT (printf's format: \n is a newline) to $tmp/FILE, then `validate
# --config` of it must exit 2.
refused() {
  printf -- "$3" >"$tmp/$2"
  check "$1" 2 "$runner" validate lora_finetune --config "$tmp/$2" "${paths[@]}"
}
refused yaml_bad_type word.yaml 'lora:\n  r: eight\n'
expect_exact "config: key 'lora.r' expects a number, got 'eight' ($tmp/word.yaml)"
refused yaml_quoted_number quoted.yaml 'lora:\n  r: "8"\n'
expect_exact "config: key 'lora.r' expects a number, got a string \"8\" ($tmp/quoted.yaml)"
refused yaml_null null.yaml 'lora:\n  r:\n'
expect_exact "config: $tmp/null.yaml:2:3: key 'lora.r' has no value (null); give it one or leave the key out"
refused yaml_syntax syntax.yaml 'lora:\n  r: [8\nmax_length: 3\n'
expect_out "config: $tmp/syntax.yaml:"; expect_out ": not valid YAML: "; refute_out "terminate"
refused yaml_top_level list.yaml '- lora.r=8\n'
expect_exact "config: $tmp/list.yaml: the top level must be a mapping of overrides (key: value), got a sequence (list)"
refused json_bad_type bool.json '{"lora": {"r": true}}'
expect_exact "config: key 'lora.r' expects a number, got a boolean true ($tmp/bool.json)"
refused json_syntax syntax.json '{"lora": {"r": 8,}}'
expect_exact "config: $tmp/syntax.json:1:18: not valid JSON: syntax error while parsing object key - unexpected '}'; expected string literal"
refused unknown_extension x.toml 'lora.r = 8\n'
expect_exact "config: --config $tmp/x.toml: unknown format; the file must end in .lua, .json, or .yaml/.yml"
check missing_file 2 "$runner" validate lora_finetune --config "$tmp/missing.yml" "${paths[@]}"
expect_exact "config: --config: cannot read '$tmp/missing.yml': No such file or directory"

cli_finish
