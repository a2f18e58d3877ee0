#!/usr/bin/env bash
# tests/recipes/validate_recipe.sh RUNNER RECIPE: a shipped recipe's config resolves and its default
# values pass validate's checks, once the paths its defaults point at exist. A recipe's defaults name
# the user's files (models/..., data/...), so validate first reports those (exit 2, one line each);
# the test then stands in an empty directory (model keys) or file (data keys) for each and expects
# exit 0. Any problem that is not a missing path fails the test.
set -u
runner=${1:?usage: validate_recipe.sh RUNNER RECIPE}
recipe=${2:?usage: validate_recipe.sh RUNNER RECIPE}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

out=$("$runner" validate "$recipe" 2>&1)
rc=$?
[ "$rc" = 0 ] && { echo "$recipe: validates as shipped"; exit 0; }
[ "$rc" = 2 ] || { echo "FAIL: validate exited $rc"; echo "$out"; exit 1; }
problems=$(sed -n 's/^  \([a-z_.]*\) = ".*" (recipe default): .*$/\1/p' <<<"$out")
other=$(grep -E '^  [a-z_.]+ = .*\((recipe default|command line|LUATUNE_SEED)\): ' <<<"$out" |
        grep -vE '^  [a-z_.]+ = ".*" \(recipe default\): ')
if [ -z "$problems" ] || [ -n "$other" ]; then
  echo "FAIL: validate found problems other than missing default paths:"; echo "$out"; exit 1
fi
args=()
for key in $problems; do
  case ${key##*.} in
    data|eval_data|prompts|catalog) : >"$work/$key.jsonl"; args+=("$key=$work/$key.jsonl") ;;
    *) mkdir -p "$work/$key"; args+=("$key=$work/$key") ;;
  esac
done
out=$("$runner" validate "$recipe" "${args[@]}" 2>&1) || { echo "FAIL: with stand-ins (${args[*]}):"; echo "$out"; exit 1; }
echo "$recipe: validates once ${problems//$'\n'/, } exist"
