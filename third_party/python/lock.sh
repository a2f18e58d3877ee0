#!/usr/bin/env bash
# Regenerates requirements.lock from requirements.in, with the hashes of every file of each pinned
# version, for CPython 3.11 on manylinux x86_64 (Debian 12's python3). Needs network; setup.sh
# only ever installs from the lock.
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q uv==0.13.9
"$tmp/venv/bin/uv" pip compile requirements.in --generate-hashes --no-header \
  --python-version 3.11 --python-platform x86_64-manylinux_2_28 -o requirements.lock
