#!/usr/bin/env bash
# Renders an HTML file to a PNG screenshot with headless Chromium (1200x2000 window), for the
# hardware report's render test and for looking at a report by eye. Exit 77 without chromium.
# Usage: tests/tools/render_html.sh HTML PNG
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: render_html.sh HTML PNG" >&2; exit 2; }
chrome=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$chrome" ] || { echo "render_html: chromium not installed (skipped)" >&2; exit 77; }
html=$(realpath "$1")
rm -f "$2"
# --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start. Chromium's D-Bus
# complaints on a machine without a session bus, and its wrapper script's shell warning, are noise.
timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars --window-size=1200,2000 \
  --screenshot="$(realpath -m "$2")" "file://$html" 2> >(grep -v -e dbus -e Fontconfig -e 'unexpected operator' >&2) >/dev/null
[ -s "$2" ] || { echo "render_html: no screenshot written to $2" >&2; exit 1; }
