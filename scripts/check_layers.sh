#!/usr/bin/env bash
# scripts/check_layers.sh [ROOT]: fails (exit 1, one line per include) when a directory of host/
# includes one it sits below (docs/building.md, "Layers"); CTest's layers_check runs it. ROOT is the
# checkout (default: this script's). Both spellings count: "host/adapt/lora.h" and "adapt/lora.h".
set -euo pipefail
root=${1:-"$(dirname "$0")/.."}
cd "$root"

# Each rule: a directory of host/, then the directories of host/ it must not include.
rules=(
  "core: adapt cli data dist distill export hw io metrics model prune quant sweep text train"
  "quant: adapt cli data dist distill export hw io metrics model prune sweep text train"
  "text: io"
  "model: adapt"
)

bad=0
for rule in "${rules[@]}"; do
  from=${rule%%:*}
  if [ ! -d "host/$from" ]; then
    echo "layers: host/$from: no such directory (expected by the rules in scripts/check_layers.sh)"
    bad=1
    continue
  fi
  for to in ${rule#*:}; do
    # grep exits 1 when nothing matches: the good case.
    while IFS= read -r hit; do
      [ -n "$hit" ] || continue
      file=${hit%%:*}
      rest=${hit#*:}
      line=${rest%%:*}
      header=$(sed -E 's/^[^"]*"([^"]*)".*/\1/' <<<"$rest")
      echo "layers: $file:$line includes \"$header\"; host/$from sits below host/$to (docs/building.md, \"Layers\")"
      bad=1
    done < <(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]*\"(host/)?$to/" "host/$from" || true)
  done
done
if [ "$bad" = 1 ]; then exit 1; fi
echo "layers: ${#rules[@]} rules hold"
