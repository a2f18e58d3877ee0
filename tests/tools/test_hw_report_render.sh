#!/usr/bin/env bash
# The hardware report's HTML in headless Chromium: a sample report (9 GPUs, and 1 and 20 rows)
# parses with its three SVG charts and their bars intact (--dump-dom), and its screenshots are real
# pictures (PNGs of some size; the full sample's with more than a handful of colours), not blank.
# Usage: test_hw_report_render.sh HW_REPORT_SAMPLE OUT_DIR. Exit 77 (skip) without chromium.
set -euo pipefail
sample=$1 out=$2
chrome=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$chrome" ] || { echo "hw_report_renders: chromium not installed (skipped)"; exit 77; }
command -v python3 >/dev/null || { echo "hw_report_renders: python3 not installed (skipped)"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
fail() { echo "hw_report_renders: $*" >&2; exit 1; }

# First the environment: a trivial page must render. A machine whose Chromium cannot start at all
# (no /dev/shm, missing libraries, a container that forbids it) says so and skips; from here on a
# failure is the report's.
printf '<!doctype html><html><body><p>luatune</p></body></html>\n' >"$out/trivial.html"
if ! bash "$here/render_html.sh" "$out/trivial.html" "$out/trivial.png" >"$out/trivial.log" 2>&1; then
  echo "hw_report_renders: headless chromium cannot render even a trivial page here (skipped):"
  tail -3 "$out/trivial.log"
  exit 77
fi

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
