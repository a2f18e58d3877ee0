#!/usr/bin/env bash
# The hardware report's HTML in headless Chromium: a sample report (9 GPUs, and 1 and 20 rows)
# parses with its three SVG charts and their bars intact (--dump-dom), and its screenshots are real
# pictures (PNGs of some size; the full sample's with more than a handful of colours), not blank.
# Usage: test_hw_report_render.sh HW_REPORT_SAMPLE OUT_DIR. Exit 77 (skip) without chromium.
set -euo pipefail
sample=$1 out=$2 test_name=hw_report_renders
mkdir -p "$out"
# Chromium ($chrome), $here and fail; skips (77) where Chromium cannot render a trivial page.
source "$(dirname "$0")/chromium.sh"

for rows in 0 1 20; do
  name=sample_$rows
  "$sample" "$out/$name.md" "$out/$name.html" "$rows"
  # Parsed by the browser: exactly three charts, and bars in them (9 rows: ~25 rects; 1 row: a few).
  timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --dump-dom "file://$out/$name.html" \
    2>/dev/null >"$out/$name.dom.html"
  svgs=$(grep -o '<svg' "$out/$name.dom.html" | wc -l)
  rects=$(grep -o '<rect' "$out/$name.dom.html" | wc -l)
  [ "$svgs" -eq 3 ] || fail "$name: $svgs <svg> elements after parsing, expected 3"
  [ "$rects" -ge 10 ] || fail "$name: only $rects <rect> elements after parsing"
  bash "$here/render_html.sh" "$out/$name.html" "$out/$name.png"
  size=$(stat -c %s "$out/$name.png")
  [ "$size" -gt 20000 ] || fail "$name: the screenshot is $size bytes (a blank page is a few KB)"
  # Colours on the full sample only: decoding in pure Python takes ~8 s a screenshot.
  [ "$rows" -eq 0 ] || continue
  python3 "$here/png_colours.py" "$out/$name.png" 8 || fail "$name: the screenshot looks blank"
done
echo "hw_report_renders: ok ($out)"
