"""tests/dist/same_metrics.py A B: two recipe runs wrote the same numbers (relative 1e-6): every
step's loss and kd_loss and every eval_perplexity in metrics.jsonl, and summary.json's perplexities
and parameters after pruning. Exit 1 naming the first that differs."""
import json
import sys


def numbers(d):
    out = []
    for line in open(d + "/metrics.jsonl"):
        row = json.loads(line)
        for key in ("loss", "kd_loss", "eval_perplexity"):
            if key in row:
                out.append(("step %s %s" % (row.get("step"), key), row[key]))
    summary = json.load(open(d + "/summary.json"))
    for key, v in sorted(summary.get("perplexity", {}).items()):
        out.append(("perplexity " + key, v))
    for key in ("parameters_after", "parameters_kept"):
        out.append((key, summary[key]))
    return out


a, b = numbers(sys.argv[1]), numbers(sys.argv[2])
if [k for k, _ in a] != [k for k, _ in b] or len(a) < 8:
    sys.exit("different metrics: %d vs %d numbers" % (len(a), len(b)))
for (key, x), (_, y) in zip(a, b):
    if abs(x - y) > 1e-6 * max(1.0, abs(x)):
        sys.exit("%s differs: %r vs %r" % (key, x, y))
print("same_metrics: %d numbers agree" % len(a))
