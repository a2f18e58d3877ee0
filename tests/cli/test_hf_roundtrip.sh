#!/usr/bin/env bash
# tests/cli/test_hf_roundtrip.sh RUNNER WORK_DIR: scripts/gpu/hf_roundtrip.py without transformers, as on
# a machine without it: the luatune half (scripts/gpu/roundtrip_export.lua) writes every model, adapter
# and logits file, its own adapters load back bit-exact, every HF check is reported skipped, and the
# exit status is 3 with one line on stderr saying why. `python3 -S` leaves site-packages out, so the
# result is the same on a machine where transformers happens to be installed.
set -u
runner=${1:?usage: test_hf_roundtrip.sh path/to/runner work_dir}
work=${2:?usage: test_hf_roundtrip.sh path/to/runner work_dir}
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
source "$(dirname "$0")/lib.sh"
failed=0 checks=0
rm -rf "$work"
mkdir -p "$work"

check "hf_roundtrip without transformers" 3 \
  python3 -S scripts/gpu/hf_roundtrip.py --runner "$runner" --work "$work" --out "$work/report.json"
expect_out "ok       luatune_export"
expect_out "ok       luatune_load_adapters max|diff| 0"
expect_out "hf_roundtrip: HF checks skipped: transformers not importable"

checks=$((checks + 1))
python3 -S scripts/gpu/hf_roundtrip.py --runner "$runner" --work "$work" --out "$work/report.json" \
  >/dev/null 2>"$work/stderr"
if [ "$(wc -l <"$work/stderr")" != 1 ]; then
  echo "FAIL stderr is not one line:"; sed 's/^/    /' "$work/stderr"; failed=$((failed + 1))
fi

# Every file the GPU half reads, present and non-empty.
for m in llama mistral qwen2 qwen3 gemma2 llama_pruned llama_merged_lora llama_merged_dora; do
  for f in "models/$m/config.json" "models/$m/model.safetensors" "logits/$m.pt"; do
    checks=$((checks + 1))
    [ -s "$work/$f" ] || { echo "FAIL missing or empty: $f"; failed=$((failed + 1)); }
  done
done
for a in lora dora; do
  for f in "adapters/$a/adapter_config.json" "adapters/$a/adapter_model.safetensors" "logits/adapter_$a.pt" \
           "logits/adapters_$a.pt"; do
    checks=$((checks + 1))
    [ -s "$work/$f" ] || { echo "FAIL missing or empty: $f"; failed=$((failed + 1)); }
  done
done

# The report: the luatune checks ok, every HF check skipped with the reason, nothing failed.
check "report.json" 0 python3 -S - "$work/report.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
st = {c["name"]: (c["status"], c["detail"]) for c in r["checks"]}
assert st.pop("luatune_export")[0] == "ok" and st.pop("luatune_load_adapters")[0] == "ok", st
assert len(st) == 17 and all(s == "skipped" and d.startswith("skipped: transformers not importable")
                             for s, d in st.values()), st
assert r["versions"]["luatune"].startswith("luatune "), r["versions"]
print("report ok")
EOF
expect_out "report ok"

# --luatune-only: the same, whatever is installed.
check "--luatune-only" 3 python3 scripts/gpu/hf_roundtrip.py --runner "$runner" --work "$work" \
  --out "$work/report2.json" --luatune-only
expect_out "HF checks skipped: --luatune-only; luatune side ok"
# A runner that is not there: the luatune side failed, exit 1, not 3.
check "no runner" 1 python3 -S scripts/gpu/hf_roundtrip.py --runner /nonexistent/runner --work "$work" \
  --out "$work/report3.json"
expect_out "hf_roundtrip: the luatune side failed"
cli_finish
