#!/usr/bin/env bash
# The run report (runner report OUTPUT_DIR) in headless Chromium: a made-up 200-step run (loss,
# eval loss, cosine learning rate, grad norm, tokens/s, a truncated last line, a run.json) is
# drawn; the parsed page holds its four charts with every step's point (--dump-dom), and its
# screenshot is a real picture with the loss curve's colour in it, not a blank page.
# Usage: test_run_report_render.sh RUNNER OUT_DIR. Exit 77 (skip) without chromium or python3.
set -euo pipefail
runner=$1 out=$2 test_name=run_report_renders
rm -rf "$out"
mkdir -p "$out/run"
# Chromium ($chrome), $here and fail; skips (77) where Chromium cannot render a trivial page.
source "$(dirname "$0")/chromium.sh"

# The run: metrics.jsonl as the JSONL sink writes it, ending in a line cut off mid-write.
awk 'BEGIN {
  print "{\"config\":{\"learning_rate\":0.0002,\"max_steps\":200,\"lora\":{\"r\":16}}}"
  for (s = 1; s <= 200; s++) {
    lr = s <= 20 ? 2e-4 * s / 20 : 1e-4 * (1 + cos(3.14159265 * (s - 20) / 180))
    loss = 2.5 * exp(-s / 60) + 0.6 + 0.15 * sin(s * 1.7)
    printf "{\"step\":%d,\"time\":%.3f,\"elapsed\":%.3f,\"loss\":%.5f,\"lr\":%.8f,\"grad_norm\":%.4f,", s, 1.8e9 + 2 * s, 2 * s, loss, lr, 1 + 0.3 * sin(s / 7)
    printf "\"tokens\":4096,\"tokens_per_s\":%.1f}\n", 2000 + 150 * sin(s / 11)
    if (s % 50 == 0) printf "{\"step\":%d,\"eval_loss\":%.5f,\"eval_perplexity\":%.3f}\n", s, 2.7 * exp(-s / 70) + 0.7, exp(2.7 * exp(-s / 70) + 0.7)
  }
  print "{\"summary\":{\"loss\":0.61,\"eval_loss\":0.95}}"
  printf "{\"step\":201,\"loss\":0."
}' >"$out/run/metrics.jsonl"
cat >"$out/run/run.json" <<'JSON'
{"run_id": "20261126T010000Z-ci-1", "started": "2026-11-26T01:00:00Z", "luatune": "0.1.0", "host": "ci",
 "world_size": 1, "recipe": "recipes/lora_finetune.lua",
 "config": {"learning_rate": 0.0002, "max_steps": 200, "device": "cpu", "dtype": "float32", "lora": {"r": 16}}}
JSON

"$runner" report "$out/run" >"$out/report.log" 2>&1 || { cat "$out/report.log"; fail "runner report failed"; }
grep -qx "report: $out/run/report.html" "$out/report.log" || fail "no 'report: PATH' line: $(cat "$out/report.log")"
[ -s "$out/run/report.md" ] || fail "no report.md beside report.html"
grep -q "^| loss | 0.6100 | summary |$" "$out/run/report.md" || fail "report.md lacks the summary's loss"
grep -q "1 line was skipped" "$out/run/report.html" || fail "the truncated line is not counted in the report"

# Parsed by the browser: loss (with eval loss), learning rate, grad norm, tokens/s, eval perplexity;
# the loss polyline has a point for each of the 200 steps.
timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --dump-dom \
  "file://$out/run/report.html" 2>/dev/null >"$out/report.dom.html"
svgs=$(grep -o '<svg' "$out/report.dom.html" | wc -l)
[ "$svgs" -eq 5 ] || fail "$svgs <svg> elements after parsing, expected 5"
polylines=$(grep -o '<polyline' "$out/report.dom.html" | wc -l)
[ "$polylines" -eq 6 ] || fail "$polylines <polyline> elements after parsing, expected 6"
points=$(grep -o 'data-name="loss" points="[^"]*"' "$out/report.dom.html" | grep -o '[0-9.]*,[0-9.]*' | wc -l)
[ "$points" -eq 200 ] || fail "the loss curve has $points points after parsing, expected 200"

bash "$here/render_html.sh" "$out/run/report.html" "$out/report.png"
size=$(stat -c %s "$out/report.png")
[ "$size" -gt 20000 ] || fail "the screenshot is $size bytes (a blank page is a few KB)"
# More than a handful of colours, and the loss curve's own blue (#2b6cb0) among the pixels.
python3 "$here/png_colours.py" "$out/report.png" 8 2b6cb0 || fail "the screenshot looks blank or has no loss curve"
echo "run_report_renders: ok ($out)"
