"""tests/recipes/same_rows.py A.jsonl B.jsonl: two runs of one recipe with the same arguments wrote
the same metrics.jsonl, line by line and bit for bit, once the fields that measure wall-clock time
are left out (and the config line's output_dir, which differs by design). Exit 1 naming the first
line and key that differ; print how many lines and numbers agreed."""
import json
import sys

# Every field in a metrics row that reads a clock: the row's own stamps, the trainer's step timing
# and throughput, and whatever a recipe logs in seconds.
WALL_CLOCK = {"time", "elapsed", "step_time", "tokens_per_s", "seconds", "runtime"}


def wall_clock(key):
    return key in WALL_CLOCK or key.endswith(("_time", "_seconds", "_per_s"))


def strip(row, top=True):
    out = {}
    for key, value in row.items():
        if wall_clock(key) or (not top and key == "output_dir"):
            continue
        out[key] = strip(value, False) if isinstance(value, dict) else value
    return out


def rows(path):
    return [strip(json.loads(line)) for line in open(path) if line.strip()]


def numbers(row):
    return sum(numbers(v) if isinstance(v, dict) else isinstance(v, float) for v in row.values())


a, b = rows(sys.argv[1]), rows(sys.argv[2])
if len(a) != len(b):
    sys.exit("different line counts: %d vs %d" % (len(a), len(b)))
if not any("loss" in r for r in a):
    sys.exit("%s has no training line (no 'loss'): nothing was compared" % sys.argv[1])
for n, (x, y) in enumerate(zip(a, b), 1):
    for key in sorted(set(x) | set(y)):
        if x.get(key) != y.get(key):
            sys.exit("line %d (step %s): %s differs: %r vs %r" % (n, x.get("step"), key, x.get(key), y.get(key)))
print("same_rows: %d lines, %d numbers agree" % (len(a), sum(map(numbers, a))))
