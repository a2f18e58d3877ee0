# Sourced by the headless-Chromium render tests (tests/tools/test_*_render.sh) once `test_name` (the
# CTest name their messages start with) and `out` (their work directory, made) are set. Finds
# Chromium ($chrome), python3 and this directory ($here); skips (exit 77) without them, or when
# Chromium cannot render even a trivial page here (no /dev/shm, missing libraries, a container that
# forbids it): from then on a failure is the page's. `fail MESSAGE` ends the test.
chrome=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$chrome" ] || { echo "$test_name: chromium not installed (skipped)"; exit 77; }
command -v python3 >/dev/null || { echo "$test_name: python3 not installed (skipped)"; exit 77; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fail() { echo "$test_name: $*" >&2; exit 1; }

printf '<!doctype html><html><body><p>luatune</p></body></html>\n' >"$out/trivial.html"
if ! bash "$here/render_html.sh" "$out/trivial.html" "$out/trivial.png" >"$out/trivial.log" 2>&1; then
  echo "$test_name: headless chromium cannot render even a trivial page here (skipped):"
  tail -3 "$out/trivial.log"
  exit 77
fi
