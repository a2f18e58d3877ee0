#!/usr/bin/env python3
"""scripts/gpu_validate_report.py: what scripts/gpu_validate.py reads and writes, as pure functions:
the parsers of its tools' output (ctest, gtest JSON, `runner plan`, bench_nf4_kernels, the GPU
catalog) and the report's Markdown with the luatune/HF ratios (docs/gpu.md). Standard library only;
tests/tools/test_gpu_validate.py tests them on canned output."""
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STATUSES = ("ok", "failed", "skipped", "timeout")


def pair_step_name(shape, method, side):
    """The step of one side ("luatune" or "hf") of a speed/memory pair."""
    return "bench:%s:%s:%s" % (shape, method, side)


# ============================================================================================
# Parsers: ctest, gtest JSON, runner plan, the NF4 bench, the catalog.

def parse_ctest(text):
    """Counts and names from ctest's output (also a partial one: the per-test lines)."""
    res = {"passed": 0, "failed": 0, "skipped": 0, "failed_tests": [], "skipped_tests": []}
    seen = {}
    for m in re.finditer(r"^\s*\d+/\d+ Test\s+#\d+: (\S+) \.*\s*(\*+)?(\w[^\n]*?)\s+[\d.]+ sec", text, re.M):
        name, verdict = m.group(1), m.group(3).strip()
        seen[name] = ("passed" if verdict == "Passed" else  # "Not Run" alone: a missing executable, a failure
                      "skipped" if verdict.startswith("Skipped") or "Disabled" in verdict else "failed")
    for name, v in seen.items():
        res[v] += 1
        if v != "passed":
            res[v + "_tests"].append(name)
    m = re.search(r"(\d+)% tests passed, (\d+) tests? failed out of (\d+)", text)
    res["total"] = int(m.group(3)) if m else len(seen)
    res["complete"] = bool(m)
    return res


def parse_gtest_json(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    rows = []
    for suite in doc.get("testsuites", []):
        for t in suite.get("testsuite", []):
            failures = t.get("failures", [])
            status = ("failed" if failures else "skipped" if t.get("result") == "SKIPPED" else "ok")
            detail = failures[0].get("failure", "").splitlines()[0] if failures else ""
            rows.append({"test": suite["name"] + "." + t["name"], "status": status, "detail": detail[:200]})
    return rows


def parse_plan(text):
    """{component: GiB} and the total from `runner plan`'s 'predicted peak memory' block."""
    comps, total, inside = {}, None, False
    for line in text.splitlines():
        if line.startswith("predicted peak memory"):
            inside = True
            continue
        if inside:
            m = re.match(r"^\s+(\w+)\s+([\d.]+)", line)
            if not m:
                break
            if m.group(1) == "total":
                total = float(m.group(2))
                break
            comps[m.group(1)] = float(m.group(2))
    return comps, total


def parse_plan_phases(text):
    """{phase: ({component: GiB}, total)} from a phased `runner plan` (its '== phase NAME:' blocks)."""
    out, name, block = {}, None, []
    for line in text.splitlines() + ["== phase "]:  # the last block ends at a sentinel
        m = re.match(r"^== phase (\w*)", line)
        if m:
            if name:
                out[name] = parse_plan("\n".join(block))
            name, block = m.group(1), []
        elif name:
            block.append(line)
    return out


def parse_nf4_bench(text):
    res = {}
    m = re.search(r"bench_nf4_kernels on (.+?):", text)
    if m:
        res["gpu"] = m.group(1)
    for key, pat in (("dequantize_ours", r"dequantize_4bit \(ours\)\s+([\d.]+) ms\s+([\d.]+) GB/s"),
                     ("dequantize_peer", r"two-pass peer \(unpack\+gather\)\s+([\d.]+) ms\s+([\d.]+) GB/s"),
                     ("quantize", r"quantize_4bit from bf16\s+([\d.]+) ms\s+([\d.]+) GB/s")):
        m = re.search(pat, text)
        if m:
            res[key] = {"ms": float(m.group(1)), "gb_per_s": float(m.group(2))}
    m = re.search(r"same bits: (\w+)", text)
    if m:
        res["same_bits"] = m.group(1) == "yes"
    return res


def catalog_bandwidth(gpu_name):
    """Datasheet GB/s of the catalog GPU whose name or alias the device name contains."""
    try:
        with open(os.path.join(ROOT, "data", "gpu_catalog.json"), encoding="utf-8") as f:
            gpus = json.load(f)["gpus"]
    except (OSError, ValueError, KeyError):
        return None, None
    name = (gpu_name or "").replace("NVIDIA ", "").strip().lower()
    best = None
    for g in gpus:
        for alias in [g["name"]] + g.get("aliases", []):
            a = alias.lower()
            if a and (a == name or a in name) and (best is None or len(a) > best[0]):
                best = (len(a), g)
    return (best[1]["name"], best[1].get("bandwidth_gbs")) if best else (None, None)


# ============================================================================================
# The report: the luatune/HF ratios and the Markdown.

def comparisons(steps):
    """luatune / HF ratios for each pair both sides of which were measured."""
    by = {s["name"]: s for s in steps}
    rows = []
    for s in steps:
        m = re.match(r"bench:([^:]+):([^:]+):luatune$", s["name"])
        if not m:
            continue
        hf = by.get(pair_step_name(m.group(1), m.group(2), "hf"), {})
        a, b = s.get("result", {}), hf.get("result", {})
        row = {"shape": m.group(1), "method": m.group(2), "luatune": s["status"], "hf": hf.get("status", "-")}
        for key in ("tokens_per_s", "peak_memory_gb", "step_time_s", "mfu"):
            va, vb = num(a.get(key)), num(b.get(key))
            row["luatune_" + key] = "OOM" if a.get("oom") else va
            row["hf_" + key] = "OOM" if b.get("oom") else vb
            row[key + "_ratio"] = round(va / vb, 3) if va is not None and vb else None
        # The pure-GPU roofline: the step's FLOPs at the GPU's datasheet peak (tokens/s at MFU 1).
        peak, fpt = num(a.get("peak_tflops")), num(a.get("flops_per_token"))
        row["roofline_tokens_per_s"] = round(peak * 1e12 / fpt) if peak and fpt else None
        rows.append(row)
    return rows


def peer_comparisons(steps):
    """luatune / peer ratios for the sides other than hf (HF with Liger's kernels, Unsloth): one row per
    pair and peer that has a step, its status and skip reason included."""
    by = {s["name"]: s for s in steps}
    rows = []
    for s in steps:
        m = re.match(r"bench:([^:]+):([^:]+):(\w[\w-]*)$", s["name"])
        if not m or m.group(3) in ("luatune", "hf"):
            continue
        lt = by.get(pair_step_name(m.group(1), m.group(2), "luatune"), {})
        a, b = lt.get("result", {}), s.get("result", {})
        row = {"shape": m.group(1), "method": m.group(2), "peer": m.group(3), "luatune": lt.get("status", "-"),
               "peer_status": s["status"]}
        for key in ("tokens_per_s", "peak_memory_gb", "mfu"):
            va, vb = num(a.get(key)), num(b.get(key))
            row["luatune_" + key] = "OOM" if a.get("oom") else va
            row["peer_" + key] = "OOM" if b.get("oom") else vb
            row[key + "_ratio"] = round(va / vb, 3) if va is not None and vb else None
        row["peer_reason"] = s.get("reason", "") if s["status"] != "ok" else ""
        rows.append(row)
    return rows


def num(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def md_cell(v):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return ("%.4g" % v) if abs(v) < 1e6 else ("%.3e" % v)
    if isinstance(v, (dict, list)):
        v = json.dumps(v, sort_keys=True)
    s = str(v).replace("|", "\\|").replace("\n", " ")
    return s if len(s) <= 240 else s[:237] + "..."


def md_table(rows, cols=None):
    if not rows:
        return ""
    if cols is None:
        cols = []
        for r in rows:
            cols += [k for k in r if k not in cols]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(md_cell(r.get(c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def md_result(result):
    """A step's result: its scalars as a key/value table, each list of objects as its own table."""
    scalars, tables = [], []
    for k, v in result.items():
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            tables.append((k, v))
        elif isinstance(v, dict) and v and all(not isinstance(x, (dict, list)) for x in v.values()):
            scalars += [{"key": "%s.%s" % (k, k2), "value": v2} for k2, v2 in v.items()]
        else:
            scalars.append({"key": k, "value": v})
    out = md_table(scalars, ["key", "value"])
    for k, rows in tables:
        out += "\n%s:\n\n%s" % (k, md_table(rows))
    return out


def render_markdown(report):
    info = report.get("machine", {})
    py = info.get("python", {})
    gpu = info.get("gpu")
    lines = ["# luatune on a GPU: gpu-validate report", ""]
    if report.get("dry_run"):
        lines += ["**Dry run on the CPU: nothing here ran on a GPU.** GPU-only steps are skipped; the CPU-side "
                  "code paths (the tiny-shape benchmarks, the planner, the recipes' arguments) ran.", ""]
    elif not info.get("cuda_used"):
        lines += ["**No CUDA device was usable (torch.cuda.is_available() false or torch absent): the GPU "
                  "steps were skipped.**", ""]
    lines += ["- date: %s" % info.get("date", "?"),
              "- part: %s (%s)" % (info.get("part", "?"), info.get("mode", "?")),
              "- GPU: %s" % ("%s, %s%s" % (gpu["name"], gpu["memory"], " (x%d)" % gpu["count"] if gpu.get("count", 1) > 1
                                           else "") if gpu else "none (nvidia-smi absent or found no GPU)"),
              "- torch: %s, CUDA %s%s" % (py.get("torch") or "not importable", py.get("cuda") or "-",
                                          "" if not py.get("torch") else ", available" if py.get("cuda_available")
                                          else ", not available"),
              "- transformers: %s; peft: %s; bitsandbytes: %s" % (py.get("transformers") or "not importable",
                                                                  py.get("peft") or "not importable",
                                                                  py.get("bitsandbytes") or "not importable"),
              "- peer packages (installed versions, after peer_wheels where it ran): %s" % (
                  ", ".join("%s %s" % (k, v or "absent") for k, v in (py.get("peers") or {}).items()) or "-"),
              "- runner: %s" % "; ".join(l.strip() for l in (info.get("runner_version") or "-").splitlines()
                                         if l.strip()).replace(":; ", ": "),
              "- checkout: %s; host %s" % (info.get("git", "?"), info.get("host", "?")), ""]
    steps = report.get("steps", [])
    counts = {s: sum(1 for x in steps if x["status"] == s) for s in STATUSES}
    lines += ["## Steps (%s)" % ", ".join("%d %s" % (n, s) for s, n in counts.items() if n), "",
              md_table([{"step": s["name"], "part": s["part"], "status": s["status"], "seconds": s["seconds"],
                         "reason": s.get("reason", ""), "log": s.get("log", "")} for s in steps],
                       ["step", "part", "status", "seconds", "reason", "log"])]
    # (title, intro, the report's key, columns) of each comparison table; a table without rows is left out.
    sections = [
        ("Speed and memory: luatune / HF transformers",
         "Each side its own process, same shape, batch, steps; ratios are luatune over HF "
         "(tokens/s and MFU: higher is better for luatune; memory and step time: lower).",
         "comparisons",
         ["shape", "method", "luatune", "hf", "luatune_tokens_per_s", "hf_tokens_per_s", "tokens_per_s_ratio",
          "luatune_peak_memory_gb", "hf_peak_memory_gb", "peak_memory_gb_ratio", "luatune_step_time_s",
          "hf_step_time_s", "luatune_mfu", "hf_mfu", "mfu_ratio", "roofline_tokens_per_s"]),
        ("Speed and memory: luatune / HF with Liger's kernels, Unsloth, luatune without its kernels",
         "The same shapes and settings as the HF pairs (docs/gpu_bench.md \"Peers\"); ratios are luatune "
         "over the peer. A skipped peer says why (its import error, when it does not import). luatune-aten is "
         "luatune with LUATUNE_STEP_KERNELS=0: its ratio is what the step's own CUDA kernels give.",
         "peer_comparisons",
         ["shape", "method", "peer", "luatune", "peer_status", "luatune_tokens_per_s", "peer_tokens_per_s",
          "tokens_per_s_ratio", "luatune_peak_memory_gb", "peer_peak_memory_gb", "peak_memory_gb_ratio",
          "luatune_mfu", "peer_mfu", "mfu_ratio", "peer_reason"]),
    ]
    for title, intro, key, cols in sections:
        if report.get(key):
            lines += ["## " + title, "", intro, "", md_table(report[key], cols)]
    traces = [x for x in steps if x["name"].startswith("trace:") and x["status"] == "ok" and x.get("result")]
    if traces:
        lines += ["## Where a step's time goes: two traced steps of each side", "",
                  "Counted from each side's Kineto trace by scripts/gpu/trace_summary.py (docs/profiling.md). "
                  "aten ops: top-level calls, each one or more kernel launches on a GPU; host syncs: the "
                  "runtime's synchronising calls (on the CPU: item() and nonzero()).", ""]
        cols = ["wall_ms", "aten_ops", "forward", "backward", "optimizer", "host_syncs", "kernel_launches",
                "kernel_ms", "gpu_busy_pct"]
        lines += [md_table([dict({"side": x["result"]["side"]}, **x["result"]["per_step"]) for x in traces],
                           ["side"] + cols)]
        for x in traces:
            lines += ["Top by time, %s (per step):" % x["result"]["side"], "",
                      md_table(x["result"]["top"][:10], ["name", "calls", "ms", "share_pct"])]
    lines += ["## Results per step", ""]
    for s in steps:
        if s.get("result"):
            lines += ["### %s (%s)" % (s["name"], s["status"]), "", md_result(s["result"])]
    return "\n".join(lines).rstrip() + "\n"
