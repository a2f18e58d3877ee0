#!/usr/bin/env bash
# tests/cli/test_docs_examples.sh RUNNER TINY_MODEL_DIR WORKDIR: every example in README.md and
# docs/lua_api.md runs, on the CPU, on the tiny Llama (the tiny_llama fixture).
# What it extracts, from each fenced block:
# - ```lua that calls config (a recipe): written to WORKDIR and run as a recipe with these overrides,
#   so it trains two steps on the tiny model: base_model=TINY_MODEL_DIR
#   data=tests/fixtures/data/chat_small.jsonl output_dir=WORKDIR/... max_steps=2 warmup_steps=0
#   batch_size=2 gradient_accumulation_steps=1 max_length=96 eval_steps=2 dtype=float32 device=cpu.
# - any other ```lua: run as a script (`runner FILE`).
# - ```sh, ```bash, ```console, ```shell: each line (a leading `$ ` dropped) must be a runner command
#   (`runner`, `build/runner` or `./build/runner`), run with the test's RUNNER.
# In Lua and in commands, model and data paths are substituted: `models/NAME` becomes TINY_MODEL_DIR,
# `data/NAME.jsonl` becomes tests/fixtures/data/chat_small.jsonl.
# A block that cannot run here (it downloads, builds, needs a GPU or hours) has the line
# `<!-- not run: REASON -->` right before it in the doc; the test counts and prints those.
set -u
runner=${1:?usage: test_docs_examples.sh RUNNER TINY_MODEL_DIR WORKDIR} tiny=${2:?} work=${3:?}
failed=0 ran=0 skipped=0
rm -rf "$work" && mkdir -p "$work"
data=tests/fixtures/data/chat_small.jsonl

# One record per fenced block into WORKDIR/blocks.tsv: doc, line of the fence, language, the file
# holding its text (WORKDIR/<doc>-<line>.txt) and the not-run reason ("" to run it).
for doc in README.md docs/lua_api.md; do
  awk -v doc="$doc" -v dir="$work" -v base="$(basename "$doc" .md)" '
    /^[ \t]*```/ && !inblock {
      lang = $0; sub(/^[ \t]*```/, "", lang); sub(/[ \t].*$/, "", lang); inblock = 1; start = NR
      file = dir "/" base "-" NR ".txt"; printf "" > file
      reason = ""
      if (prev ~ /^[ \t]*<!-- not run: .* -->$/) { reason = prev; sub(/^[ \t]*<!-- not run: /, "", reason); sub(/ -->$/, "", reason) }
      next
    }
    /^[ \t]*```/ && inblock {
      inblock = 0; close(file); prev = ""
      printf "%s\t%d\t%s\t%s\t%s\n", doc, start, lang, file, reason >> (dir "/blocks.tsv")
      next
    }
    inblock { print >> file; next }
    /[^ \t]/ { prev = $0 }
  ' "$doc"
done

subst() {  # stdin -> stdout: the documented model and data paths replaced by the tiny ones
  sed -E "s#(^|[ \"'=])models/[A-Za-z0-9._-]+#\\1$tiny#g; s#(^|[ \"'=])data/[A-Za-z0-9._-]+\\.jsonl#\\1$data#g"
}

fail() {  # WHERE MESSAGE OUTPUT
  echo "FAIL $1: $2"
  [ -z "$3" ] || echo "$3" | tail -n 15 | sed 's/^/    /'
  failed=$((failed + 1))
}

while IFS=$'\t' read -r doc line lang file reason; do
  where="$doc:$line (\`\`\`$lang)"
  case $lang in lua | sh | bash | console | shell) ;; *) continue ;; esac
  if [ -n "$reason" ]; then
    echo "not run: $where: $reason"
    skipped=$((skipped + 1))
    continue
  fi
  ran=$((ran + 1))
  if [ "$lang" = lua ]; then
    script="${file%.txt}.lua"
    subst <"$file" >"$script"
    if grep -qE '(^|[^.a-z_])config *[({]' "$script"; then
      out=$("$runner" "$script" base_model="$tiny" data="$data" output_dir="${file%.txt}-out" max_steps=2 \
        warmup_steps=0 batch_size=2 gradient_accumulation_steps=1 max_length=96 eval_steps=2 dtype=float32 \
        device=cpu 2>&1 </dev/null)
    else
      out=$("$runner" "$script" 2>&1 </dev/null)
    fi
    rc=$?
    [ $rc -eq 0 ] || fail "$where" "exit status $rc" "$out"
    continue
  fi
  while IFS= read -r cmd; do
    cmd=${cmd#\$ }
    case $cmd in "" | "#"*) continue ;; esac
    case $cmd in
      runner\ * | build/runner\ * | ./build/runner\ *) ;;
      *)
        fail "$where" "'$cmd' is not a runner command; a block that cannot run here needs <!-- not run: REASON --> before it" ""
        continue
        ;;
    esac
    out=$(RUNNER=$runner bash -c "\"\$RUNNER\" $(echo "${cmd#* }" | subst)" 2>&1 </dev/null)
    rc=$?
    [ $rc -eq 0 ] || fail "$where: $cmd" "exit status $rc" "$out"
  done <"$file"
done <"$work/blocks.tsv"

echo "$ran examples run, $skipped not run (marked), $failed failed"
[ "$failed" -eq 0 ] && [ "$ran" -gt 0 ]
