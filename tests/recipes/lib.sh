# Helpers the recipe test scripts share: source it after setting `work` (the scripts' output folder).
#   check NAME COMMAND...   counts a failure unless the command succeeds, printing ok/FAIL NAME
#   json FILE EXPR          prints the Python expression EXPR on the parsed JSON file (as j)
#   steps_logged FILE       the step numbers of a metrics.jsonl's training lines, space separated
#   finish                  exits 1, with the tail of every log under $work, when a check failed
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
steps_logged() {
  python3 -c 'import json,sys
print(" ".join(str(j["step"]) for j in map(json.loads, open(sys.argv[1])) if "loss" in j))' "$1"
}
finish() {
  if [ "$fails" -ne 0 ]; then
    for f in "$work"/*.log; do echo "--- $f"; tail -8 "$f"; done
    exit 1
  fi
}
