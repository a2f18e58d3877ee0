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
  python3 - "$out/$name.png" <<'PY' || fail "$name: the screenshot looks blank"
import sys, zlib, struct
# A PNG decoder just big enough for Chromium's screenshots (8-bit RGB/RGBA, non-interlaced), so
# the test needs no imaging library: count the distinct colours of the decoded pixels.
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, width = 8, b"", 0
while pos < len(data):
    length, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + length]
    if kind == b"IHDR":
        width, height, depth, colour = struct.unpack(">IIBB", body[:10])
        assert depth == 8 and colour in (2, 6), f"unsupported PNG (depth {depth}, colour type {colour})"
        bpp = 3 if colour == 2 else 4
    elif kind == b"IDAT":
        idat += body
    pos += 12 + length
raw, stride = zlib.decompress(idat), width * bpp
prev, colours, i = bytearray(stride), set(), 0
for _ in range(height):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
    i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b, c = prev[x], prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    colours.update(bytes(line[x:x + 3]) for x in range(0, stride, bpp * 4))  # every 4th pixel
    prev = line
print(f"{sys.argv[1]}: {width}x{height}, {len(colours)} colours (sampled)")
sys.exit(0 if len(colours) > 8 else 1)
PY
done
echo "hw_report_renders: ok ($out)"
