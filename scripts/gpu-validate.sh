#!/usr/bin/env bash
# scripts/gpu-validate.sh [--dry-run] [--part build+tests|bench|long|all] [--budget S] OUT_DIR: luatune's
# GPU checks as timed steps, each failure recorded without stopping the rest, into OUT_DIR/gpu-report.md
# and gpu-report.json (plus logs.tar.gz). The driver is scripts/gpu_validate.py (Python 3, standard
# library only); --help lists every option. How to run it through the device tool: docs/gpu.md.
#   scripts/gpu-validate.sh --dry-run /tmp/gv             # on the CPU: what CI runs (gpu_validate_dry_run)
#   scripts/gpu-validate.sh --part build+tests "$OUT/r"   # on the GPU machine, with .deps carried
set -euo pipefail
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
exec python3 "$(dirname "$0")/gpu_validate.py" "$@"
