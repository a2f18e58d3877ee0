#!/usr/bin/env python3
"""What a training step asks of the machine, read from a Kineto Chrome trace (luatune's profile=DIR,
docs/profiling.md, or torch.profiler's export_chrome_trace in bench/gpu/hf_train_bench.py --profile):
the same numbers for both sides of a benchmark pair, counted by the same code.

Per traced step ("step N" ranges): wall time; aten ops called at the top level (not from inside
another aten op; on a GPU each launches one or more kernels; a luatune:: range, a fused op's ATen
path, counts as one), in total and per phase ("forward",
"backward", "optimizer" ranges, where the trace has them); ops that make a GPU's host wait
(aten::_local_scalar_dense, item()'s read, and aten::nonzero); on a GPU also kernel launches, the
runtime's synchronising calls, kernel time and GPU busy share (kernel time / wall); and the 20
kernels (GPU) or top-level ops (CPU) taking the most time.
Standard library only (it runs in scripts/gpu_validate.py's report and in bench/step_ops.sh).
  trace_summary.py TRACE.json|DIR [...]          a Markdown table, one row per trace
  trace_summary.py --json TRACE.json|DIR         the summary as JSON"""
import json
import os
import sys
from collections import Counter, defaultdict

SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero")
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
              "cudaMemcpy2D")
PHASES = ("forward", "backward", "optimizer")


def trace_path(p):
    return os.path.join(p, "trace.json") if os.path.isdir(p) else p


def top_level(ops):
    """Aten ops with no enclosing aten op on their thread."""
    by_thread = defaultdict(list)
    for e in ops:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    top = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        end = -1.0
        for e in evs:
            if e["ts"] >= end:
                top.append(e)
                end = e["ts"] + e["dur"]
    return top


def summarise(path, top_n=20):
    with open(trace_path(path), encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    x = [e for e in events if e.get("ph") == "X" and "dur" in e and "ts" in e]
    ranges = [e for e in x if e.get("cat") in ("user_annotation", "cpu_instant_event", "python_function")
              or (e.get("cat") == "cpu_op" and not e["name"].startswith("aten::"))]
    steps = sorted((e for e in ranges if e["name"].startswith("step ")), key=lambda e: e["ts"])
    phases = [e for e in ranges if e["name"] in PHASES]
    ops = [e for e in x if e.get("cat") == "cpu_op" and e["name"].startswith("aten::")]
    # luatune's fused ops name their ATen path luatune::NAME (host/model/fused.cpp, fused_adamw.cpp):
    # on a GPU each is one kernel, so the range counts as one op and the aten ops inside it not at all.
    fused = [e for e in x if e.get("cat") in ("cpu_op", "user_annotation") and e["name"].startswith("luatune::")]
    top = top_level(ops + fused)
    kernels = [e for e in x if e.get("cat") == "kernel"]
    runtime = [e for e in x if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    gpu = bool(kernels)
    rows = []
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]

        def inside(e):
            return lo <= e["ts"] < hi

        row = {"step": s["name"], "wall_ms": s["dur"] / 1e3, "aten_ops": sum(1 for e in top if inside(e)),
               "sync_ops": Counter(e["name"] for e in ops if e["name"] in SYNC_OPS and inside(e))}
        for p in phases:
            if inside(p):
                plo, phi = p["ts"], p["ts"] + p["dur"]
                row[p["name"]] = row.get(p["name"], 0) + sum(1 for e in top if plo <= e["ts"] < phi)
        if gpu:
            # Kernels run after their launch: those launched inside the step (by correlation), else
            # those that start inside it.
            launched = {e.get("args", {}).get("correlation") for e in runtime
                        if inside(e) and ("LaunchKernel" in e["name"] or "GraphLaunch" in e["name"])}
            launched.discard(None)
            ks = [k for k in kernels if k.get("args", {}).get("correlation") in launched] if launched else \
                [k for k in kernels if inside(k)]
            row["kernel_launches"] = len(launched) if launched else len(ks)
            row["runtime_syncs"] = sum(1 for e in runtime if e["name"] in SYNC_CALLS and inside(e))
            row["kernel_ms"] = sum(k["dur"] for k in ks) / 1e3
            row["gpu_busy_pct"] = 100.0 * row["kernel_ms"] / row["wall_ms"] if row["wall_ms"] > 0 else 0.0
        rows.append(row)
    if not rows:
        raise SystemExit(f"trace_summary: {trace_path(path)} has no 'step N' ranges (was it written by "
                         "profile=DIR or hf_train_bench.py --profile?)")
    n = len(rows)
    keys = ["wall_ms", "aten_ops"] + [p for p in PHASES if any(p in r for r in rows)]
    if gpu:
        keys += ["kernel_launches", "runtime_syncs", "kernel_ms", "gpu_busy_pct"]
    per_step = {k: sum(r.get(k, 0) for r in rows) / n for k in keys}
    sync_ops = sum((r["sync_ops"] for r in rows), Counter())
    per_step["host_syncs"] = per_step["runtime_syncs"] if gpu else sum(sync_ops.values()) / n
    per_step["sync_ops"] = {k: v / n for k, v in sorted(sync_ops.items())}
    # The top kernels (GPU) or top-level ops (CPU) by time within the steps.
    in_steps = lambda e: any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in steps)
    pool = kernels if gpu else top
    by_name = defaultdict(lambda: [0, 0.0])
    for e in pool:
        if in_steps(e):
            by_name[e["name"]][0] += 1
            by_name[e["name"]][1] += e["dur"]
    total = sum(v[1] for v in by_name.values()) or 1.0
    tops = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:top_n]
    return {"trace": trace_path(path), "device": "cuda" if gpu else "cpu", "steps": n,
            "host_syncs_counted": "cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize and "
                                  "cudaMemcpy calls" if gpu else
                                  "aten::_local_scalar_dense and aten::nonzero calls (the CPU proxy)",
            "per_step": per_step,
            "top": [{"name": k, "calls": v[0] / n, "ms": v[1] / 1e3 / n, "share_pct": 100.0 * v[1] / total}
                    for k, v in tops]}


def markdown(summaries, labels=None):
    labels = labels or [s["trace"] for s in summaries]
    gpu = any(s["device"] == "cuda" for s in summaries)
    cols = ["wall ms", "aten ops", "forward", "backward", "optimizer", "host syncs"]
    if gpu:
        cols += ["kernel launches", "kernel ms", "GPU busy"]
    out = ["| run | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for label, s in zip(labels, summaries):
        p = s["per_step"]
        cells = ["%.1f" % p["wall_ms"], "%.0f" % p["aten_ops"]] + \
            ["%.0f" % p[k] if k in p else "-" for k in PHASES] + ["%g" % p["host_syncs"]]
        if gpu:
            cells += ["%.0f" % p.get("kernel_launches", 0), "%.1f" % p.get("kernel_ms", 0),
                      "%.0f %%" % p.get("gpu_busy_pct", 0)]
        out.append("| %s | %s |" % (label, " | ".join(cells)))
    return "\n".join(out)


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    if argv[0] == "--json":
        print(json.dumps([summarise(p) for p in argv[1:]], indent=1))
        return 0
    sums = [summarise(p) for p in argv]
    print(markdown(sums))
    for s in sums:
        which = ", ".join("%s %g" % (k.replace("aten::", ""), v) for k, v in s["per_step"]["sync_ops"].items())
        print("\n%s: per step, host-waiting ops: %s" % (s["trace"], which or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
