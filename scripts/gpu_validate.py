#!/usr/bin/env python3
"""scripts/gpu_validate.py: the GPU truth in one call (issue 19), driven by scripts/gpu-validate.sh.

Runs luatune's GPU checks as steps, each in its own process with its own time cap; a step that fails,
skips or runs out of time is recorded and the rest go on. After every step it rewrites
OUT_DIR/gpu-report.json (raw) and OUT_DIR/gpu-report.md (dated, with the GPU and versions), and
OUT_DIR/logs.tar.gz (every step's log).
Python 3 standard library only: it runs on the CPU machine (--dry-run, the CTest
gpu_validate_dry_run) and on the GPU machine (torch, transformers and peft there). Its parsers and
the report's Markdown are in scripts/gpu_validate_report.py. docs/gpu.md.

One plan, in the order of what each step settles (make_steps), sized by --budget (device seconds for
the whole run) in calls of at most --call-limit seconds (one device command); `--plan` prints it,
`--continue` goes on from the previous call on the same machine (scripts/gpu_validate_plan.py, docs/gpu.md):
  build        scripts/gpu-build.sh: the targets the planned steps run
  smoke        every step kernel, forward and backward in bf16 at the Llama 3.2 1B and 3.1 8B shapes,
               against its ATen path (tests/cuda/step_kernel_smoke.cpp); a failure stops the harness
  bench        the peers' wheels installed offline, then luatune vs HF transformers (+ peft,
               + bitsandbytes for QLoRA), HF with Liger's kernels and Unsloth: training speed and memory,
               Llama 3.2 1B then 3.1 8B, seq 2048, bf16, each side its own process; `runner plan`'s
               predicted peak against each measured one (planner, planner:8b)
  build+tests  the gpu-labelled tests, NF4 kernels and their GB/s, the traced 1B pair, torchrun world
               size 1, the sharded trainer on one GPU, HF fixtures + parity, the HF round trip
  long         Llama 3.1 8B full fine-tuning (does not fit 80 GB: the OOM is the result); llama31_sheared's
               pruning and recovery phases at the 8B shape on one GPU, each against its plan
  whole_suite  last, with whatever time is left
"""
import argparse
import datetime
import glob
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import traceback

sys.dont_write_bytecode = True  # no scripts/__pycache__ in the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
import trace_summary  # noqa: E402  (scripts/gpu/trace_summary.py)
from gpu_validate_plan import (BENCH_ESTIMATES, CALL_OVERHEAD, ESTIMATES, MIN_CALL,  # noqa: E402,F401
                               WHOLE_SUITE_MIN, bench_est, plan_calls, plan_text)
from gpu_validate_report import (catalog_bandwidth, comparisons, num, pair_step_name, parse_ctest,  # noqa: E402
                                 parse_gtest_json, parse_nf4_bench, parse_plan, parse_plan_phases,
                                 peer_comparisons,
                                 render_markdown)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = ("build+tests", "bench", "long")
NEW_GROUP = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
EXIT_SKIP = 3  # the bench and round-trip scripts' "cannot run here": skipped, with their last stderr line

# ============================================================================================
# What is measured: shapes, methods, the two sides of each pair.

# The shapes (Llama 3.2 1B, Llama 3.1 8B, tiny) are bench/gpu/shapes.json's, which both benchmark
# scripts read; the planner step plans the same config.json.
SHAPES_FILE = "bench/gpu/shapes.json"
RECIPES = {"full": "full_finetune", "lora": "lora_finetune", "qlora": "qlora_finetune"}
LUATUNE_BENCH = "bench/gpu/train_bench.lua"
HF_BENCH = "bench/gpu/hf_train_bench.py"
HF_ROUNDTRIP = "scripts/gpu/hf_roundtrip.py"
PEER_REQUIREMENTS = "bench/gpu/peer-requirements.txt"  # the peers' pins, each with its [bundle]
TINY_TOKENIZER = "tests/fixtures/tokenizers/bytelevel"  # in the tree: the GPU machine has no npm packages
TINY_DATA = "tests/fixtures/data/text_small.jsonl"
OOM = re.compile(r"out of memory|OutOfMemoryError|CUDA error: out of memory|std::bad_alloc", re.I)

# Each pair: (shape, method, seq, batch, steps, cap per side in s, OOM expected). On CUDA the real
# shapes; the dry run measures `tiny` on the CPU through the same scripts.
GPU_PAIRS = {
    "bench": [("llama-3.2-1b", m, 2048, 4, 6, 120, False) for m in ("full", "lora", "qlora")] +
             [("llama-3.1-8b", m, 2048, 4, 4, 180, False) for m in ("qlora", "lora")],
    "long": [("llama-3.1-8b", "full", 2048, 1, 3, 180, True)],
}
CPU_PAIRS = [("tiny", m, 64, 2, 3, 120, False) for m in ("full", "lora", "qlora")]
# The pair traced in the bench part, two steps each side (profile=DIR, hf_train_bench.py --profile):
# the shape where luatune was furthest behind HF (docs/gpu-report-2026-11-26.md).
TRACE_PAIR = ("llama-3.2-1b", "full", 2048, 4)
# The other side of each pair in the bench part: hf_train_bench.py --peer NAME, each for the methods it
# runs (docs/gpu_bench.md "Peers"); the long part runs luatune and hf only.
PEERS = {"hf": ("full", "lora", "qlora"), "liger": ("full", "lora", "qlora"), "unsloth": ("lora", "qlora")}
# luatune itself with LUATUNE_STEP_KERNELS=0 (every op on its ATen path), for these shapes' full and LoRA
# pairs: the peer table's luatune / luatune-aten ratio is what the step's own kernels give, and a
# kernel that fails still leaves luatune measured.
ATEN_SHAPES = ("llama-3.2-1b", "tiny")
# What the peers bring (their versions go into the report) and what the install must leave as it is.
PEER_PACKAGES = ("bitsandbytes", "peft", "liger-kernel", "unsloth", "unsloth-zoo", "trl", "xformers", "torchao")
KEEP_INSTALLED = re.compile(r"^(torch|torchvision|torchaudio|triton|transformers|nvidia-.*|cuda-.*)$")


# ============================================================================================
# Running one command of a step: its own process group, a time cap, the output into the step's log.

class StepTimeout(Exception):
    pass


class Skip(Exception):
    pass


class Fail(Exception):
    pass


class Proc:
    def __init__(self, rc, out, err, seconds):
        self.rc, self.out, self.err, self.seconds = rc, out, err, seconds

    def last_err_line(self):
        lines = [l.strip() for l in (self.err or self.out).splitlines() if l.strip()]
        return lines[-1] if lines else "(no output)"


class Step:
    def __init__(self, name, part, cap_s, fn, est_s=None, **kw):
        self.name, self.part, self.cap_s, self.fn, self.kw = name, part, cap_s, fn, kw
        # What the step is expected to take on the GPU (ESTIMATES); None: whatever is left (whole_suite).
        self.est_s = est_s
        self.deadline = None
        self.log_path = None
        self.result = {}


def fmt_cmd(cmd):
    return " ".join(c if re.fullmatch(r"[\w@%+=:,./-]+", c) else "'" + c.replace("'", "'\\''") + "'" for c in cmd)


class Context:
    def __init__(self, args):
        self.args = args
        self.dry_run = args.dry_run
        self.out_dir = os.path.abspath(args.out_dir)
        self.work = os.path.abspath(args.work) if args.work else tempfile.mkdtemp(prefix="luatune-gpu-validate-")
        self.log_dir = os.path.join(self.work, "logs")
        build = args.build_dir or ("build" if args.dry_run else "build-gpu")
        self.build_dir = build if os.path.isabs(build) else os.path.join(ROOT, build)
        self.runner = os.path.join(self.build_dir, "runner")
        wheels = getattr(args, "wheels", None) or ".wheels"
        self.wheels = wheels if os.path.isabs(wheels) else os.path.join(ROOT, wheels)
        self.env = dict(os.environ, PYTHONUNBUFFERED="1", LUATUNE_HOME=ROOT)
        self.env.pop("LUATUNE_SEED", None)
        self.info = {}
        self.has_cuda = False
        self.no_cuda_reason = "no CUDA"
        self.part_deadline = None  # this call's end (monotonic): --call-limit, or what --budget leaves
        self.stopped = None  # why the harness stopped early (the smoke step failed), else None
        self.slack_s = 0.0  # the plan's time to spare within --budget (nf4's check_huge runs only with 20 s)
        self.continuing = bool(getattr(args, "continue_run", False))
        self._tiny = None
        self.steps_done = []
        self.current = None  # the running command's Popen

    def module_version(self, name):
        """The version of a Python module the probe could import, else None."""
        return self.info.get("python", {}).get(name)

    def run(self, step, cmd, cap=None, cwd=ROOT, env=None):
        """Runs cmd under the step's deadline (or cap s, the smaller); returns a Proc. Raises
        StepTimeout when the time runs out (the whole process group is ended first)."""
        limit = step.deadline - time.monotonic()
        if cap is not None:
            limit = min(limit, cap)
        if limit <= 1:
            raise StepTimeout("time cap reached before: " + fmt_cmd(cmd))
        t0 = time.monotonic()
        with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
            try:
                # Its own process group (not session: the device tool ends a command's leftovers by
                # session), so a time cap ends torchrun's and ctest's children with it.
                p = subprocess.Popen(cmd, cwd=cwd, env=env or self.env, stdout=fo, stderr=fe,
                                     stdin=subprocess.DEVNULL, **NEW_GROUP)
                self.current = p
            except OSError as e:
                self._log(step, cmd, "", str(e), 127, 0.0)
                return Proc(127, "", str(e), 0.0)
            timed_out = False
            try:
                p.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                timed_out = True
                for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
                    try:
                        os.killpg(p.pid, sig)  # the group we started: torchrun's and ctest's children too
                    except ProcessLookupError:
                        break
                    try:
                        p.wait(timeout=grace)
                        break
                    except subprocess.TimeoutExpired:
                        continue
            self.current = None
            seconds = time.monotonic() - t0
            fo.seek(0)
            fe.seek(0)
            out = fo.read().decode("utf-8", "replace")
            err = fe.read().decode("utf-8", "replace")
        rc = p.returncode if p.returncode is not None else -9
        self._log(step, cmd, out, err, "timeout" if timed_out else rc, seconds)
        if timed_out:
            e = StepTimeout("time cap %.0f s reached in: %s" % (limit, fmt_cmd(cmd)))
            e.proc = Proc(rc, out, err, seconds)
            raise e
        return Proc(rc, out, err, seconds)

    def _log(self, step, cmd, out, err, rc, seconds):
        with open(step.log_path, "a", encoding="utf-8") as f:
            f.write("$ %s\n%s" % (fmt_cmd(cmd), out))
            if err:
                f.write("\n--- stderr ---\n" + err)
            f.write("\n--- exit %s after %.1f s ---\n\n" % (rc, seconds))

    def need_runner(self):
        if not os.access(self.runner, os.X_OK):
            raise Skip("no runner at %s (the build step failed or has not run)" % os.path.relpath(self.runner, ROOT))

    def need_cuda(self):
        if not self.has_cuda:
            raise Skip(self.no_cuda_reason)

    def need_script(self, path):
        if not os.path.exists(os.path.join(ROOT, path)):
            raise Fail("script missing: " + path)

    def need_transformers(self):
        if not self.module_version("transformers"):
            raise Skip("transformers not importable")

    def tiny_model(self, step):
        """A tiny random Llama with the in-tree byte-level tokenizer (made once per run)."""
        if self._tiny is None:
            out = os.path.join(self.work, "tiny-llama")
            p = self.run(step, [self.runner, "tiny_model", "tokenizer=" + TINY_TOKENIZER, "output_dir=" + out,
                                "dtype=bfloat16"], cap=60)
            if p.rc != 0:
                raise Fail("tiny_model failed (exit %d): %s" % (p.rc, p.last_err_line()))
            self._tiny = out
        return self._tiny


# ============================================================================================
# The steps.

def unpack_deps(ctx, step):
    """Unpacks the carried .deb files into DEPS/prefix as scripts/gpu-build.sh does, for a runner
    reused from an earlier call: it loads LuaJIT, utf8proc, ... from there (LD_LIBRARY_PATH)."""
    deps = os.path.abspath(ctx.args.deps)
    prefix = os.path.join(deps, "prefix")
    if not os.path.isdir(deps) or os.path.isdir(os.path.join(prefix, "usr")):
        return
    os.makedirs(prefix, exist_ok=True)
    for deb in sorted(glob.glob(os.path.join(deps, "*.deb"))):
        p = ctx.run(step, ["dpkg", "-x", deb, prefix], cap=60)
        if p.rc != 0:
            raise Fail("dpkg -x %s exited %d: %s" % (os.path.basename(deb), p.rc, p.last_err_line()))


def step_build(ctx, step):
    if ctx.dry_run:
        ctx.need_runner()
        p = ctx.run(step, [ctx.runner, "--version"], cap=30)
        if p.rc != 0:
            raise Fail("runner --version exited %d: %s" % (p.rc, p.last_err_line()))
        step.result = {"build_dir": ctx.build_dir, "runner_version": p.out.strip()}
        return "ok", "dry run: the existing build dir, not rebuilt"
    reuse = ctx.continuing or ctx.args.part in ("bench", "long")
    if reuse and os.access(ctx.runner, os.X_OK):
        unpack_deps(ctx, step)  # a warm machine keeps build-gpu/, but the carried .deps/ arrives packed
        v = ctx.run(step, [ctx.runner, "--version"], cap=30)
        step.result = {"build_dir": ctx.build_dir, "runner_version": v.out.strip()}
        if v.rc != 0:
            raise Fail("the existing runner does not start (exit %d): %s" % (v.rc, v.last_err_line()))
        return "ok", "reused the existing runner (an earlier call built it)"
    deps = os.path.abspath(ctx.args.deps)
    if not os.path.isdir(deps):
        raise Fail("no %s: run scripts/offline-deps.sh %s on the networked machine and carry it" %
                   (ctx.args.deps, ctx.args.deps))
    # What the planned steps run: the benchmarks need only the runner; the whole suite builds the rest itself.
    env = dict(ctx.env, LUATUNE_SKIP_TESTS="1",
               LUATUNE_BUILD_TARGETS="runner" if ctx.args.part in ("bench", "long") else PLAN_TARGETS)
    p = ctx.run(step, ["bash", "scripts/gpu-build.sh", deps, ctx.build_dir], env=env)
    step.result = {"build_dir": ctx.build_dir, "build_seconds": round(p.seconds, 1)}
    if p.rc != 0:
        raise Fail("scripts/gpu-build.sh exited %d: %s" % (p.rc, p.last_err_line()))
    v = ctx.run(step, [ctx.runner, "--version"], cap=30)
    step.result["runner_version"] = v.out.strip()
    return "ok", ""


def ctest_step(ctx, step, ctest_args, what, gpu_only=False):
    ctx.need_runner()
    cmd = ["ctest", "--test-dir", ctx.build_dir, "--output-on-failure"] + ctest_args
    try:
        p = ctx.run(step, cmd, env=(step.kw.get("env") if step is not None else None))
    except StepTimeout as e:
        if getattr(e, "proc", None):
            step.result = parse_ctest(e.proc.out)  # what ran before the cap
        raise
    r = parse_ctest(p.out)
    step.result = r
    if r["total"] == 0:
        raise Fail("no test matched (%s)" % fmt_cmd(ctest_args))
    if r["failed"] or p.rc != 0:
        raise Fail("%d of %d %s failed: %s" % (r["failed"], r["total"], what, ", ".join(r["failed_tests"][:8])))
    if r["skipped"] and ctx.has_cuda and gpu_only:  # they skip (77) only where CUDA is missing
        raise Fail("%d of %d %s skipped on a CUDA machine (%s): does the build see CUDA?" %
                   (r["skipped"], r["total"], what, ", ".join(r["skipped_tests"][:8])))
    return "ok", "%d %s passed%s" % (r["passed"], what, ", %d skipped" % r["skipped"] if r["skipped"] else "")


def step_gpu_tests(ctx, step):
    # nf4_kernel_tests (label gpu) runs in its own step (step_nf4), before its benchmark: once, not twice;
    # step_kernel_smoke is the smoke step's.
    ctx.need_cuda()
    return ctest_step(ctx, step, ["-L", "gpu", "-E", "^(nf4_kernel_tests|step_kernel_smoke)$", "-j", "4",
                                  "--timeout", "120"],
                      "gpu-labelled tests", gpu_only=True)


def step_smoke(ctx, step):
    """Every step kernel forward and backward in bf16 at the Llama 3.2 1B and 3.1 8B shapes, batch 4 x 2048,
    against its ATen path on the same GPU (tests/cuda/step_kernel_smoke.cpp). A failure stops the harness:
    the benchmarks would time a wrong step."""
    ctx.need_cuda()
    exe = os.path.join(ctx.build_dir, SMOKE)
    if not os.access(exe, os.X_OK):
        raise Fail("no %s (the build did not make it)" % os.path.relpath(exe, ROOT))
    p = ctx.run(step, [exe])
    checks = [l for l in p.out.splitlines() if l.startswith(("ok ", "FAIL "))]
    step.result = {"checks": len(checks), "lines": checks[:40]}
    if p.rc == 77:
        raise Fail("step_kernel_smoke skipped on a CUDA machine: %s" % p.last_err_line())
    if p.rc != 0:
        failed = next((l for l in checks if l.startswith("FAIL ")), p.last_err_line())
        ctx.stopped = "the smoke step failed: " + failed
        raise Fail(failed)
    return "ok", p.out.strip().splitlines()[-1] if p.out.strip() else "exit 0"


def step_nf4(ctx, step):
    ctx.need_cuda()
    # check_huge (n > 2^31, 10-20 s of host loops) only when the plan leaves the time for it.
    huge = ctx.slack_s >= ESTIMATES["nf4_huge"]
    step.kw["env"] = dict(ctx.env, LUATUNE_NF4_HUGE="1" if huge else "0")
    status, reason = ctest_step(ctx, step, ["-R", "^nf4_kernel_tests$", "--timeout", "60"], "NF4 kernel tests",
                                 gpu_only=True)
    reason += "; n > 2^31 %s" % ("checked" if huge else "not checked (the budget's slack is under %d s)" %
                                  ESTIMATES["nf4_huge"])
    tests = step.result
    bench = os.path.join(ctx.build_dir, "bench", "bench_nf4_kernels")
    if not os.access(bench, os.X_OK):
        raise Fail("no %s (the kernels were not built?)" % os.path.relpath(bench, ROOT))
    p = ctx.run(step, [bench], cap=90)
    r = parse_nf4_bench(p.out)
    gpu = r.get("gpu") or ctx.info.get("gpu", {}).get("name")
    catalog_name, bw = catalog_bandwidth(gpu)
    rows = []
    for key, what in (("dequantize_ours", "dequantize_4bit (ours)"), ("dequantize_peer", "two-pass peer"),
                      ("quantize", "quantize_4bit from bf16")):
        if key in r:
            rows.append({"kernel": what, "ms": r[key]["ms"], "GB/s": r[key]["gb_per_s"],
                         "of_datasheet_bandwidth": round(r[key]["gb_per_s"] / bw, 3) if bw else None})
    step.result = {"tests": {k: tests[k] for k in ("passed", "failed", "skipped")}, "gpu": gpu,
                   "catalog_gpu": catalog_name, "datasheet_bandwidth_gbs": bw,
                   "bit_exact_vs_peer": r.get("same_bits"), "kernels": rows}
    if p.rc != 0 or not rows:
        raise Fail("bench_nf4_kernels exited %d: %s" % (p.rc, p.last_err_line()))
    return status, reason


def last_step_line(text):
    lines = [l for l in text.splitlines() if re.match(r"^(\[rank \d+\] )?step \d+/\d+ \|", l)]
    if not lines:
        return {}
    out = {}
    for part in lines[-1].split("|")[1:]:
        kv = part.strip().split(" ", 1)
        if len(kv) == 2:
            try:
                out[kv[0]] = float(kv[1].replace(",", ""))
            except ValueError:
                out[kv[0]] = kv[1]
    return out


def torchrun_cmd():
    exe = shutil.which("torchrun")
    return [exe] if exe else [sys.executable, "-m", "torch.distributed.run"]


def recipe_step(ctx, step, recipe, extra):
    """A shipped training recipe on the tiny model: on CUDA under torchrun (world size 1); in the dry
    run the same recipe arguments on the CPU without torchrun, so CI catches a stale command line."""
    ctx.need_runner()
    tiny = ctx.tiny_model(step)
    out = os.path.join(ctx.work, step.name)
    args = [recipe, "base_model=" + tiny, "data=" + TINY_DATA, "output_dir=" + out, "max_steps=3", "batch_size=2",
            "gradient_accumulation_steps=1", "max_length=64", "warmup_steps=0", "eval_steps=3", "save_steps=3",
            "overwrite=true"] + extra
    if not ctx.has_cuda:
        p = ctx.run(step, [ctx.runner] + args + ["device=cpu", "dtype=fp32"], cap=90)
        step.result = dict(last_step_line(p.out), device="cpu", launcher="none")
        if p.rc != 0:
            raise Fail("%s on the CPU exited %d: %s" % (recipe, p.rc, p.last_err_line()))
        raise Skip("%s; its recipe arguments ran on the CPU without torchrun (exit 0)" % ctx.no_cuda_reason)
    cmd = torchrun_cmd() + ["--standalone", "--nproc_per_node", "1", "--no-python", ctx.runner] + args + \
        ["device=cuda", "dtype=bf16"]
    p = ctx.run(step, cmd)
    step.result = dict(last_step_line(p.out), device="cuda", launcher="torchrun, world size 1",
                       note="the runner creates its process group only when WORLD_SIZE > 1 "
                            "(runner/recipe_run.cpp), so no NCCL collective runs at world size 1")
    if p.rc != 0:
        raise Fail("%s under torchrun exited %d: %s" % (recipe, p.rc, p.last_err_line()))
    return "ok", ""


def step_nccl_lora(ctx, step):
    return recipe_step(ctx, step, "lora_finetune", [])


def step_shard_full(ctx, step):
    return recipe_step(ctx, step, "full_finetune", ["shard=full"])


def step_whole_suite(ctx, step):
    if ctx.dry_run:
        raise Skip("dry run (CI runs the suite)")
    jobs = str(os.cpu_count() or 4)
    # The build step made only the planned steps' targets: the rest first, within this step's time.
    b = ctx.run(step, ["cmake", "--build", ctx.build_dir, "-j", jobs])
    if b.rc != 0:
        raise Fail("cmake --build (the suite's other targets) exited %d: %s" % (b.rc, b.last_err_line()))
    # gpu_validate_*: this harness's own tests; the dry run inside the suite would race its fixtures.
    return ctest_step(ctx, step, ["-j", jobs, "--timeout", "300", "-E", "^gpu_validate"], "tests")


def hf_fixtures_dir(ctx):
    """Where the hf_fixtures step writes transformers' fixtures and hf_parity reads them (as CTest's
    hf_fixtures test does for HFParity.*, through LUATUNE_HF_FIXTURES): this run's work directory."""
    return os.path.join(ctx.work, "hf_fixtures")


def step_hf_fixtures(ctx, step):
    ctx.need_transformers()
    dest = hf_fixtures_dir(ctx)
    p = ctx.run(step, [sys.executable, "scripts/make_hf_fixtures.py", dest])
    if p.rc == EXIT_SKIP:
        raise Skip(p.last_err_line())
    if p.rc != 0:
        raise Fail("make_hf_fixtures.py exited %d: %s" % (p.rc, p.last_err_line()))
    archs = sorted(d for d in os.listdir(dest) if os.path.isfile(os.path.join(dest, d, "expected.safetensors")))
    step.result = {"architectures": archs}
    return "ok", "%d architectures" % len(archs)


def step_hf_parity(ctx, step):
    ctx.need_runner()
    exe = os.path.join(ctx.build_dir, "tests", "luatune_unit_tests")
    if not os.access(exe, os.X_OK):
        raise Fail("no %s" % os.path.relpath(exe, ROOT))
    # The gtest binary ctest runs for HFParity.*, called directly: a ctest nested in the dry-run CTest
    # test would share (and clobber) the outer run's Testing/Temporary logs.
    fixtures = hf_fixtures_dir(ctx)
    if not os.path.isdir(fixtures):
        raise Skip("no fixtures in %s (the hf_fixtures step makes them where transformers is importable)"
                   % os.path.relpath(fixtures, ROOT))
    js = os.path.join(ctx.work, "hf_parity.json")
    env = dict(ctx.env, LUATUNE_HF_FIXTURES=fixtures)
    p = ctx.run(step, [exe, "--gtest_filter=HFParity.*", "--gtest_output=json:" + js], cap=120, env=env)
    rows = parse_gtest_json(js) if os.path.exists(js) else []
    step.result = {"tests": rows}
    if not rows:
        raise Fail("no HFParity results (exit %d): %s" % (p.rc, p.last_err_line()))
    failed = [r["test"] for r in rows if r["status"] == "failed"]
    if failed or p.rc != 0:
        raise Fail("%d of %d parity tests failed: %s" % (len(failed), len(rows), ", ".join(failed)))
    return "ok", "%d architectures, float32 and bfloat16" % len(rows)


def step_hf_roundtrip(ctx, step):
    ctx.need_script(HF_ROUNDTRIP)
    ctx.need_runner()
    out = os.path.join(ctx.work, "hf_roundtrip.json")
    if os.path.exists(out):
        os.remove(out)
    p = ctx.run(step, [sys.executable, HF_ROUNDTRIP, "--runner", ctx.runner, "--work",
                       os.path.join(ctx.work, "hf_roundtrip"), "--out", out,
                       "--device", "cuda" if ctx.has_cuda else "cpu"])
    # Exit 3 (no transformers): the luatune half still ran and its checks are in the JSON.
    doc = read_json(out)
    step.result = doc if isinstance(doc, dict) else {}
    checks = step.result.get("checks", []) if isinstance(step.result.get("checks"), list) else []
    if p.rc not in (0, EXIT_SKIP):
        raise Fail("hf_roundtrip.py exited %d: %s" % (p.rc, p.last_err_line()))
    if not checks:
        raise Fail("hf_roundtrip.py wrote no checks to %s" % os.path.basename(out))
    bad = [c.get("name", "?") for c in checks if c.get("status") not in ("ok", "skipped")]
    if bad:
        raise Fail("%d of %d checks failed: %s" % (len(bad), len(checks), ", ".join(bad)))
    ok = sum(1 for c in checks if c.get("status") == "ok")
    if p.rc == EXIT_SKIP:
        raise Skip("%s (%d luatune-side checks ok)" % (p.last_err_line(), ok))
    return "ok", "%d checks ok, %d skipped" % (ok, len(checks) - ok)


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def bench_step(ctx, step):
    """One side of a speed/memory pair, in its own process; its JSON is the step's result."""
    kw = step.kw
    side, shape, method = kw["side"], kw["shape"], kw["method"]
    device = "cpu" if shape == "tiny" else "cuda"
    out = os.path.join(ctx.work, step.name.replace(":", "_") + ".json")
    if os.path.exists(out):
        os.remove(out)
    prof = os.path.join(ctx.work, step.name.replace(":", "_") + ".trace") if kw.get("trace") else ""
    if prof:
        shutil.rmtree(prof, ignore_errors=True)
    env = None
    if side in ("luatune", "luatune-aten"):
        if side == "luatune-aten":  # the same step with its own CUDA kernels set aside (docs/kernels.md)
            env = dict(ctx.env, LUATUNE_STEP_KERNELS="0")
        ctx.need_script(LUATUNE_BENCH)
        ctx.need_runner()
        cmd = [ctx.runner, LUATUNE_BENCH, "shape=" + shape, "method=" + method, "seq=%d" % kw["seq"],
               "batch=%d" % kw["batch"], "steps=%d" % kw["steps"], "device=" + device, "dtype=bf16", "out=" + out]
        cmd += ["profile=" + prof] if prof else []
    else:
        ctx.need_script(HF_BENCH)  # it exits 3 itself when the peer, torch, transformers, peft or bnb is missing
        cmd = [sys.executable, HF_BENCH, "--shape", shape, "--method", method, "--seq", str(kw["seq"]),
               "--batch", str(kw["batch"]), "--steps", str(kw["steps"]), "--device", device, "--dtype", "bf16",
               "--out", out] + (["--peer", side] if side != "hf" else []) + (["--profile", prof] if prof else [])
    if device == "cuda":
        ctx.need_cuda()
    step.result = {"shape": shape, "method": method, "side": side, "seq": kw["seq"], "batch": kw["batch"],
                   "steps": kw["steps"], "device": device}
    p = ctx.run(step, cmd, env=env)
    if p.rc == EXIT_SKIP:
        raise Skip(p.last_err_line())
    doc = read_json(out)
    script = os.path.basename(LUATUNE_BENCH if side.startswith("luatune") else HF_BENCH)
    # Out of memory: the scripts write {"status": "oom", "error"} and exit 0; a crash may say it on stderr.
    oom = (isinstance(doc, dict) and doc.get("status") == "oom") or \
        (p.rc != 0 and (OOM.search(p.err) or OOM.search(p.out)))
    if oom:
        step.result.update(doc if isinstance(doc, dict) else {})
        step.result.update(oom=True, error=(doc if isinstance(doc, dict) else {}).get("error") or p.last_err_line())
        if kw["expect_oom"]:
            return "ok", "out of memory, as planned for this shape: that is the result"
        raise Fail("%s ran out of memory: %s" % (script, step.result["error"]))
    if p.rc != 0:
        raise Fail("%s exited %d: %s" % (script, p.rc, p.last_err_line()))
    if not isinstance(doc, dict):
        raise Fail("exit 0 but no JSON object in %s" % os.path.basename(out))
    step.result.update(doc)
    missing = [k for k in ("tokens_per_s", "peak_memory_gb", "step_time_s") if k not in doc]
    if missing:
        raise Fail("its JSON lacks " + ", ".join(missing))
    if prof:
        # Traced steps: the summary is the result (scripts/gpu/trace_summary.py, the same count for
        # both sides); the trace itself stays in the work directory.
        try:
            summary = trace_summary.summarise(prof, top_n=15)
        except (OSError, ValueError, SystemExit) as e:
            raise Fail("no usable trace in %s: %s" % (prof, e))
        step.result = {"shape": shape, "method": method, "side": side, "seq": kw["seq"], "batch": kw["batch"],
                       "device": device, "tokens_per_s": doc.get("tokens_per_s"), "trace": summary["trace"],
                       "per_step": {k: v for k, v in summary["per_step"].items() if k != "sync_ops"},
                       "host_waiting_ops": summary["per_step"]["sync_ops"], "top": summary["top"]}
    return "ok", "fit (an OOM was expected on 80 GB)" if kw["expect_oom"] else ""


DECODE_BENCH = "bench/gpu/decode_bench.lua"
HF_DECODE = "bench/gpu/hf_decode.py"


def decode_step(ctx, step):
    """One side of the generation pair (docs/generation.md): greedy decoding after a 128-token prompt, tokens/s
    with the prefill apart; luatune's model:generate against transformers' generate with a static cache
    (compiled with torch.compile on CUDA)."""
    kw = step.kw
    side, shape = kw["side"], kw["shape"]
    device = "cpu" if shape == "tiny" else "cuda"
    if device == "cuda":
        ctx.need_cuda()
    out = os.path.join(ctx.work, step.name.replace(":", "_") + ".json")
    if os.path.exists(out):
        os.remove(out)
    dtype = "fp32" if device == "cpu" else "bf16"
    if side == "luatune":
        ctx.need_script(DECODE_BENCH)
        ctx.need_runner()
        cmd = [ctx.runner, DECODE_BENCH, "shape=" + shape, "device=" + device, "dtype=" + dtype, "out=" + out]
    else:
        ctx.need_script(HF_DECODE)
        cmd = [sys.executable, HF_DECODE, "--shape", shape, "--device", device, "--dtype", dtype, "--out", out] + \
            (["--compile"] if device == "cuda" else [])
    step.result = {"shape": shape, "side": side, "device": device, "dtype": dtype}
    p = ctx.run(step, cmd)
    if p.rc == EXIT_SKIP:
        raise Skip(p.last_err_line())
    doc = read_json(out)
    if p.rc != 0 or not isinstance(doc, dict) or not num(doc.get("tokens_per_s")):
        raise Fail("%s exited %d: %s" % (os.path.basename(cmd[1]), p.rc, p.last_err_line()))
    step.result.update(doc)
    other = ctx_result(ctx, "decode:%s:%s" % (shape, "luatune" if side != "luatune" else "hf"))
    if num(other.get("tokens_per_s")) and side != "luatune":
        step.result["luatune_over_hf"] = round(float(other["tokens_per_s"]) / float(doc["tokens_per_s"]), 3)
    return "ok", "%.1f tokens/s" % float(doc["tokens_per_s"])


def ctx_result(ctx, name):
    for s in ctx.steps_done:
        if s.get("name") == name and s.get("status") == "ok":
            return s.get("result", {})
    return {}


def norm_name(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def read_peer_requirements():
    """{bundle: ["name==version", ...]} from bench/gpu/peer-requirements.txt, in its order."""
    bundles = {}
    with open(os.path.join(ROOT, PEER_REQUIREMENTS), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^([A-Za-z0-9_.-]+==\S+)\s+#\s*\[([\w-]+)\]", line)
            if m:
                bundles.setdefault(m.group(2), []).append(m.group(1))
    return bundles


def installed_versions():
    """{normalized name: version} of this Python's distributions: the benchmarks run under it too."""
    import importlib.metadata
    out = {}
    for d in importlib.metadata.distributions():
        if d.metadata["Name"]:
            out.setdefault(norm_name(d.metadata["Name"]), d.version)
    return out


def step_peer_wheels(ctx, step):
    """Installs the peers (bench/gpu/peer-requirements.txt) offline from the carried bundle folders of
    scripts/device-wheels.sh (DIR/<bundle>), one pip call per bundle, into this Python's environment (or
    a prefix on PYTHONPATH where that is not writable). Constraints pin torch, triton, transformers and
    the CUDA wheels to the installed versions, so pip changes none of them."""
    bundles = read_peer_requirements()
    rel = os.path.relpath(ctx.wheels, ROOT) if ctx.wheels.startswith(ROOT + os.sep) else ctx.wheels
    folders = {b: os.path.join(ctx.wheels, b) for b in bundles}
    carried = [b for b in bundles if os.path.isdir(folders[b])]
    rows = [{"bundle": b, "packages": " ".join(pins), "carried": b in carried,
             "wheels": len(glob.glob(os.path.join(folders[b], "*.whl")))} for b, pins in bundles.items()]
    step.result = {"wheels_dir": rel, "python": sys.executable, "bundles": rows}
    if not carried:
        raise Skip("no %s/{%s}: run scripts/device-wheels.sh %s on a networked machine and carry its folders "
                   "(docs/gpu.md)" % (rel, ",".join(bundles), rel))
    if ctx.dry_run:
        raise Skip("dry run: would install %s offline from %s" % (
            "; ".join("%s (%s)" % (b, " ".join(bundles[b])) for b in carried), rel))
    before = installed_versions()
    constraints = os.path.join(ctx.work, "peer-constraints.txt")
    with open(constraints, "w", encoding="utf-8") as f:
        f.writelines("%s==%s\n" % (n, v) for n, v in sorted(before.items()) if KEEP_INSTALLED.match(n))
    where = []
    if not os.access(sysconfig.get_paths()["purelib"], os.W_OK):
        prefix = os.path.join(ctx.work, "peer-prefix")
        where = ["--prefix", prefix]
        site = sysconfig.get_path("purelib", vars={"base": prefix, "platbase": prefix})
        ctx.env["PYTHONPATH"] = os.pathsep.join([site] + [p for p in [ctx.env.get("PYTHONPATH")] if p])
        step.result["prefix"] = prefix
    links = [x for b in carried for x in ("--find-links", folders[b])]  # later bundles need earlier ones
    failures = []
    for row in rows:
        pins = bundles[row["bundle"]]
        if not row["carried"]:
            row["status"] = "not carried"
            continue
        if all(before.get(norm_name(p.split("==")[0])) == p.split("==")[1] for p in pins):
            row["status"] = "already installed"
            continue
        cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--only-binary=:all:", "--no-input",
               "--disable-pip-version-check", "--progress-bar", "off", "-c", constraints] + links + where + pins
        p = ctx.run(step, cmd)
        done = re.search(r"^Successfully installed (.+)$", p.out, re.M)
        row.update(status="installed" if p.rc == 0 else "failed", seconds=round(p.seconds, 1),
                   installed=done.group(1) if done else "")
        if p.rc != 0:
            errors = [l.strip() for l in p.err.splitlines() if l.startswith("ERROR:")]
            failures.append("%s: pip exited %d: %s" % (row["bundle"], p.rc, errors[0] if errors else p.last_err_line()))
    after = installed_versions()
    ctx.info.setdefault("python", {})["peers"] = {n: after.get(n) for n in PEER_PACKAGES}
    changed = ["%s %s -> %s" % (n, v, after.get(n)) for n, v in before.items() if KEEP_INSTALLED.match(n)
               and after.get(n) != v]
    if changed:
        raise Fail("the install changed what it must not: " + ", ".join(changed))
    if failures:
        raise Fail("; ".join(failures))
    return "ok", "; ".join("%s: %s" % (r["bundle"], r["status"]) for r in rows)


def plan_args(ctx, shape):
    """base_model= a folder holding the shape's config.json, as the benchmarks build it."""
    doc = read_json(os.path.join(ROOT, SHAPES_FILE))
    spec = (doc or {}).get("shapes", {}).get(shape)
    if not spec:
        raise Fail("no shape '%s' in %s" % (shape, SHAPES_FILE))
    arch = spec.get("arch", "llama")
    config = dict({"architectures": [ARCH_CLASSES.get(arch, "LlamaForCausalLM")], "model_type": arch},
                  **spec["config"])
    d = os.path.join(ctx.work, "shapes", shape)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1)
    return ["base_model=" + d]


ARCH_CLASSES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                "qwen3": "Qwen3ForCausalLM", "gemma2": "Gemma2ForCausalLM"}


GIB = float(1 << 30)


def step_planner(ctx, step):
    """`runner plan` for every pair of this part against the luatune side's measured peak."""
    ctx.need_runner()
    by_name = {s["name"]: s for s in ctx.steps_done}
    rows, failures = [], []
    for pair in step.kw["pairs"]:
        shape, method, seq, batch = pair[:4]
        # The benchmark's settings (bench/gpu/train_bench.lua): one micro-batch a step, adapters without dropout.
        cmd = [ctx.runner, "plan", RECIPES[method]] + plan_args(ctx, shape) + \
            ["batch_size=%d" % batch, "max_length=%d" % seq, "gradient_checkpointing=true", "dtype=bf16",
             "gradient_accumulation_steps=1", "margin=false"] + (["lora.dropout=0"] if method != "full" else [])
        p = ctx.run(step, cmd, cap=60)
        comps, total = parse_plan(p.out)
        row = {"shape": shape, "method": method, "batch": batch, "seq": seq}
        if p.rc != 0 or total is None:
            failures.append("%s %s: exit %d: %s" % (shape, method, p.rc, p.last_err_line()))
            rows.append(row)
            continue
        alloc = total - comps.get("cuda_context", 0) - comps.get("fragmentation", 0)
        row.update(predicted_total_gib=total, predicted_allocated_gib=round(alloc, 2))
        meas = by_name.get(pair_step_name(shape, method, "luatune"), {})
        res = meas.get("result", {})
        if meas.get("status") == "ok" and res.get("oom"):
            row["measured_gib"] = "OOM"
        elif meas.get("status") == "ok" and res.get("peak_memory_kind") == "cuda_max_allocated" \
                and num(res.get("peak_memory_gb")):
            m = float(res["peak_memory_gb"]) * 1e9 / GIB  # trainer:step's peak_memory_gb is 1e9 bytes
            row.update(measured_gib=round(m, 2), error_pct=round(100.0 * (alloc - m) / m, 1))
        else:
            row["measured_gib"] = "not measured (%s)" % (meas.get("reason") or meas.get("status") or "no run") \
                if shape != "tiny" else "not measured (CPU: no CUDA allocator peak)"
        hf = by_name.get(pair_step_name(shape, method, "hf"), {}).get("result", {})
        if hf.get("peak_memory_kind") == "cuda_max_allocated" and num(hf.get("peak_memory_gb")):
            row["hf_measured_gib"] = round(float(hf["peak_memory_gb"]) * 1e9 / GIB, 2)
        rows.append(row)
    step.result = {"rows": rows, "note": "predicted_allocated_gib = the plan's total less its cuda_context and "
                   "fragmentation terms, which the CUDA caching allocator's peak (what the bench measures) does "
                   "not see; error_pct is against that"}
    added = append_calibration(ctx, step.kw["pairs"], by_name)
    if added:
        step.result["calibration_points_added"] = added
    if failures:
        raise Fail("; ".join(failures))
    return "ok", "%d plans" % len(rows)


CALIBRATION = "data/planner_calibration.json"


def append_calibration(ctx, pairs, by_name):
    """Each luatune side of these pairs measured on the GPU becomes a point of the planner's calibration
    (data/planner_calibration.json: date, commit, GPU, the step's fingerprint from `runner --version`,
    the settings, the peak). OUT_DIR/planner_calibration.json is the repository's file with every point
    this run added, to be committed. Returns how many this call added."""
    version = ctx.info.get("runner_version", "")
    m = re.search(r"training step ([0-9a-f]{12})", version)
    gpu = ctx.info.get("gpu", {}).get("name")
    if not m or not gpu:
        return 0
    out = os.path.join(ctx.out_dir, "planner_calibration.json")
    doc = read_json(out) or read_json(os.path.join(ROOT, CALIBRATION)) or {"points": []}
    date = ctx.info.get("date", "")[:10]
    added = 0
    for pair in pairs:
        shape, method, seq, batch = pair[:4]
        res = by_name.get(pair_step_name(shape, method, "luatune"), {})
        r = res.get("result", {})
        if res.get("status") != "ok" or r.get("oom") or r.get("peak_memory_kind") != "cuda_max_allocated" or \
                not num(r.get("peak_memory_gb")):
            continue
        point = {"date": date, "commit": ctx.info.get("git", "unknown"), "gpu": gpu, "step": m.group(1),
                 "loss_logit_bytes": 0, "source": "scripts/gpu-validate.sh, step %s" % pair_step_name(shape, method,
                                                                                                 "luatune"),
                 "peak_memory_kind": "cuda_max_allocated", "name": "%s %s" % (shape, method), "shape": shape,
                 "method": method, "batch_size": batch, "max_length": seq, "gradient_checkpointing": True,
                 "dtype": "bf16", "lora_r": 16, "lora_dropout": 0.0, "lora_targets": "all-linear",
                 "peak_memory_gb": float(r["peak_memory_gb"])}
        if point not in doc["points"]:
            doc["points"].append(point)
            added += 1
    if added:
        with open(out + ".tmp", "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, indent=1) + "\n")
        os.replace(out + ".tmp", out)
    return added


SHEARED_BENCH = "bench/gpu/sheared_phases.lua"


def step_sheared_phases(ctx, step):
    """llama31_sheared's two phases on the 8B shape, one GPU, a few steps each (bench/gpu/sheared_phases.lua),
    each phase's measured peak against `runner plan llama31_sheared`'s plan of that phase."""
    ctx.need_runner()
    ctx.need_script(SHEARED_BENCH)
    shape, device = ("tiny", "cpu") if ctx.dry_run else ("llama-3.1-8b", "cuda")
    if device == "cuda":
        ctx.need_cuda()
    batch, seq = 4, 128  # the recipe's batch_size and max_length
    out = os.path.join(ctx.work, "sheared_phases.json")
    if os.path.exists(out):
        os.remove(out)
    p = ctx.run(step, [ctx.runner, SHEARED_BENCH, "shape=" + shape, "device=" + device, "batch=%d" % batch,
                       "seq=%d" % seq, "steps=2", "out=" + out])
    doc = read_json(out)
    if p.rc != 0 or not isinstance(doc, dict):
        raise Fail("sheared_phases.lua exited %d: %s" % (p.rc, p.last_err_line()))
    plan = ctx.run(step, [ctx.runner, "plan", "llama31_sheared"] + plan_args(ctx, shape) +
                   ["batch_size=%d" % batch, "max_length=%d" % seq, "gradient_accumulation_steps=1", "dtype=bf16",
                    "margin=false"],
                   cap=60)
    phases = parse_plan_phases(plan.out)
    if plan.rc != 0 or set(phases) != {"pruning", "recovery"}:
        raise Fail("runner plan llama31_sheared: exit %d, phases %s: %s" % (plan.rc, sorted(phases),
                                                                            plan.last_err_line()))
    rows = []
    for name in ("pruning", "recovery"):
        comps, total = phases[name]
        alloc = total - comps.get("cuda_context", 0) - comps.get("fragmentation", 0)
        row = {"phase": name, "predicted_total_gib": total, "predicted_allocated_gib": round(alloc, 2),
               "teacher_gib": comps.get("teacher", 0)}
        meas = doc.get("phases", {}).get(name, {})
        if doc.get("status") == "oom":
            row["measured_gib"] = "OOM"
        elif num(meas.get("peak_memory_gb")):
            m = float(meas["peak_memory_gb"]) * 1e9 / GIB
            row.update(measured_gib=round(m, 2), error_pct=round(100.0 * (alloc - m) / m, 1))
        else:
            row["measured_gib"] = "not measured (CPU: no CUDA allocator peak)" if device == "cpu" else "none"
        rows.append(row)
    step.result = {"shape": shape, "status": doc.get("status"), "shape_after": doc.get("shape_after"), "rows": rows,
                   "note": "one GPU, batch 4 x 128 tokens, 2 steps a phase; predicted_allocated_gib as in the "
                           "planner step"}
    return "ok", "%s: pruning and recovery measured against their plans" % doc.get("status")


# ============================================================================================
# The plan of steps: one list in the order of what each settles, sized by --budget.

SMOKE = "tests/step_kernel_smoke"  # under the build dir (tests/cuda/step_kernel_smoke.cpp)
# What the build step builds when the plan does not run the whole suite (which builds the rest itself).
PLAN_TARGETS = ("runner luatune_unit_tests step_kernel_smoke nf4_kernel_tests bench_nf4_kernels fused_kernel_tests "
                "train_kernel_tests trainer_cuda_tests")


def pair_steps(part, pairs, dry_run):
    out = []
    for pr in pairs:
        shape, method, seq, batch, nsteps, cap, expect_oom = pr
        peers = [p for p, methods in PEERS.items() if method in methods and (part == "bench" or p == "hf")]
        if part == "bench" and shape in ATEN_SHAPES and method in ("full", "lora"):
            peers.append("luatune-aten")
        for side in ["luatune"] + peers:
            # a peer's side is worth its time only beside luatune's
            needs = () if side == "luatune" else (pair_step_name(shape, method, "luatune"),)
            # luatune's side is planned only with room for HF's (a ratio needs both); HF's comes next
            partner = bench_est(shape, "hf") if side == "luatune" and "hf" in peers else 0
            out.append(Step(pair_step_name(shape, method, side), part, cap, bench_step, est_s=bench_est(shape, side),
                            side=side, shape=shape, method=method, seq=seq, batch=batch, steps=nsteps,
                            expect_oom=expect_oom, needs=needs, partner_s=partner))
    return out


def make_steps(ctx):
    """Every step of the selected part(s), in the order of what each settles: the build, the smoke check
    of every kernel at the benchmark shapes (a failure stops the harness), the GPU ratios against HF,
    bitsandbytes, Liger and Unsloth (Llama 3.2 1B, then 3.1 8B) and the planner against them, the
    gpu-labelled tests, the traced pair, the rest of build+tests, the long part, the whole suite."""
    dry = ctx.dry_run
    trace = TRACE_PAIR if not dry else ("tiny", "full", 64, 2)
    one_b = [p for p in GPU_PAIRS["bench"] if p[0] == "llama-3.2-1b"]
    eight_b = [p for p in GPU_PAIRS["bench"] if p[0] != "llama-3.2-1b"]
    e = ESTIMATES
    steps = [Step("build", "build+tests", 480, step_build, est_s=e["build"]),
             Step("smoke", "build+tests", 60, step_smoke, est_s=e["smoke"]),
             Step("peer_wheels", "bench", 180, step_peer_wheels, est_s=e["peer_wheels"])]
    steps += pair_steps("bench", (CPU_PAIRS if dry else []) + one_b, dry)
    # The planner against the 1B peaks, then the 8B pairs and the planner against theirs.
    steps.append(Step("planner", "bench", 120, step_planner, est_s=e["planner"], pairs=(CPU_PAIRS if dry else []) +
                      one_b, min_s=10))
    steps += pair_steps("bench", eight_b, dry)
    steps.append(Step("planner:8b", "bench", 120, step_planner, est_s=e["planner"], pairs=eight_b, min_s=10,
                      needs=tuple(pair_step_name(p[0], p[1], "luatune") for p in eight_b[:1])))
    # Generation: luatune's model:generate against transformers' static-cache generate (issue 42).
    for shape in (["tiny"] if dry else []) + ["llama-3.2-1b"]:
        for side in ("luatune", "hf"):
            steps.append(Step("decode:%s:%s" % (shape, side), "bench", 180, decode_step,
                              est_s=10 if shape == "tiny" else e["decode_" + side], side=side, shape=shape,
                              needs=() if side == "luatune" else ("decode:%s:luatune" % shape,),
                              partner_s=(10 if shape == "tiny" else e["decode_hf"]) if side == "luatune" else 0))
    steps += [Step("gpu_tests", "build+tests", 180, step_gpu_tests, est_s=e["gpu_tests"]),
              Step("nf4_kernels", "build+tests", 120, step_nf4, est_s=e["nf4_kernels"])]
    shape, method, seq, batch = trace
    for side in ("luatune", "hf"):  # two traced steps of each side (what guides the step work)
        steps.append(Step("trace:%s:%s:%s" % (shape, method, side), "bench", 90, bench_step, est_s=e["trace"],
                          side=side, shape=shape, method=method, seq=seq, batch=batch, steps=2, expect_oom=False,
                          trace=True,
                          needs=() if side == "luatune" else ("trace:%s:%s:luatune" % (shape, method),)))
    steps += [Step("torchrun_lora_ws1", "build+tests", 120, step_nccl_lora, est_s=e["torchrun_lora_ws1"]),
              Step("shard_full_1gpu", "build+tests", 120, step_shard_full, est_s=e["shard_full_1gpu"]),
              Step("hf_fixtures", "build+tests", 180, step_hf_fixtures, est_s=e["hf_fixtures"]),
              Step("hf_parity", "build+tests", 120, step_hf_parity, est_s=e["hf_parity"], needs=("hf_fixtures",)),
              Step("hf_roundtrip", "build+tests", 240, step_hf_roundtrip, est_s=e["hf_roundtrip"])]
    long_pairs = list(GPU_PAIRS["long"])
    steps += pair_steps("long", long_pairs, dry)
    steps.append(Step("planner:long", "long", 120, step_planner, est_s=e["planner:long"], pairs=long_pairs,
                      min_s=10, needs=tuple(pair_step_name(p[0], p[1], "luatune") for p in long_pairs)))
    steps.append(Step("sheared_phases", "long", 420, step_sheared_phases, est_s=e["sheared_phases"]))
    steps.append(Step("whole_suite", "build+tests", 100000, step_whole_suite, min_s=WHOLE_SUITE_MIN))

    part = ctx.args.part
    out = []
    for st in steps:
        if part != "all" and st.part != part and st.name != "build":
            continue  # every part starts with the build (or reuses the runner)
        if ctx.args.only and not re.search(ctx.args.only, st.name) and st.name not in ("build", "peer_wheels"):
            continue
        out.append(st)
    # peer_wheels only where a step needs what it installs (bitsandbytes, Liger, Unsloth)
    needs_wheels = any(st.kw.get("side") in ("liger", "unsloth") or
                       (st.kw.get("side") == "hf" and st.kw.get("method") == "qlora") for st in out)
    return [st for st in out if st.name != "peer_wheels" or needs_wheels]


def run_step(ctx, step):
    rec = {"name": step.name, "part": step.part, "status": "failed", "reason": "", "seconds": 0.0,
           "result": {}, "log": "logs/%s.log" % re.sub(r"[^\w.+-]", "_", step.name)}
    step.log_path = os.path.join(ctx.work, rec["log"])
    open(step.log_path, "w").close()
    now = time.monotonic()
    left = None if ctx.part_deadline is None else ctx.part_deadline - now
    min_s = step.kw.get("min_s", 20)
    if left is not None and left < min_s:
        rec.update(status="skipped", reason="the call's time budget is spent (%.0f s left, --budget %d)" %
                   (max(left, 0), ctx.args.budget))
        return rec
    if ctx.stopped:
        rec.update(status="skipped", reason="not run: " + ctx.stopped)
        return rec
    cap = step.cap_s if left is None else min(step.cap_s, left)
    step.deadline = now + cap
    rec["cap_s"] = round(cap)
    try:
        status, reason = step.fn(ctx, step)
        rec.update(status=status, reason=reason)
    except Skip as e:
        rec.update(status="skipped", reason=str(e))
    except Fail as e:
        rec.update(status="failed", reason=str(e))
    except StepTimeout as e:
        rec.update(status="timeout", reason=str(e))
    except Exception as e:  # the driver goes on whatever a step does
        with open(step.log_path, "a", encoding="utf-8") as f:
            f.write(traceback.format_exc())
        rec.update(status="failed", reason="driver error: %s: %s" % (type(e).__name__, e))
    rec["seconds"] = round(time.monotonic() - now, 1)
    rec["result"] = step.result
    return rec


# ============================================================================================
# The machine: GPU, versions.

def probe(ctx):
    info = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "host": socket.gethostname(), "mode": "dry run (CPU)" if ctx.dry_run else "GPU run",
            "part": ctx.args.part, "python": {}, "work_dir": ctx.work, "build_dir": ctx.build_dir}
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv"], capture_output=True,
                           text=True, timeout=30)
        rows = [l.split(",") for l in p.stdout.strip().splitlines()[1:]] if p.returncode == 0 else []
        if rows:
            info["gpu"] = {"name": rows[0][0].strip(), "memory": rows[0][1].strip(), "count": len(rows)}
    except (OSError, subprocess.SubprocessError):
        pass
    code = r"""
import json, importlib
out = {}
for mod in ("torch", "transformers", "peft", "bitsandbytes", "safetensors"):
    try:
        m = importlib.import_module(mod)
        out[mod] = getattr(m, "__version__", "?")
    except Exception as e:
        out[mod] = None
from importlib import metadata
out["peers"] = {}
for dist in ("bitsandbytes", "peft", "liger-kernel", "unsloth", "unsloth-zoo", "trl", "xformers", "torchao"):
    try:
        out["peers"][dist] = metadata.version(dist)  # not imported: unsloth needs a GPU to import
    except Exception:
        out["peers"][dist] = None
if out["torch"]:
    import torch
    out["cuda"] = torch.version.cuda
    out["cuda_available"] = torch.cuda.is_available()
    out["torch_lib"] = __import__("os").path.join(__import__("os").path.dirname(torch.__file__), "lib")
print(json.dumps(out))
"""
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        info["python"] = json.loads(p.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        info["python"] = {}
    info["python"]["executable"] = sys.executable
    try:
        p = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True, text=True,
                           timeout=10)
        info["git"] = p.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    real_cuda = bool(info["python"].get("cuda_available")) or ("gpu" in info and not info["python"].get("torch"))
    if ctx.dry_run:
        ctx.has_cuda, ctx.no_cuda_reason = False, "dry run (CPU only)" if real_cuda else "no CUDA"
    else:
        ctx.has_cuda = real_cuda
    info["cuda_used"] = ctx.has_cuda
    # As scripts/gpu-build.sh: the Python environment's LibTorch and the unpacked .deps after the host's own.
    if not ctx.dry_run:
        arch = subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True).stdout.strip() \
            if shutil.which("gcc") else ""
        extra = [info["python"].get("torch_lib") or "",
                 os.path.join(os.path.abspath(ctx.args.deps), "prefix", "usr", "lib", arch or "x86_64-linux-gnu")]
        ld = [x for x in [ctx.env.get("LD_LIBRARY_PATH", "")] + extra if x]
        ctx.env["LD_LIBRARY_PATH"] = ":".join(ld)
        ctx.env["PATH"] = ctx.env.get("PATH", "") + ":/usr/local/cuda/bin"
    info["python"].pop("torch_lib", None)
    ctx.info = info


# ============================================================================================
# The report: written after every step.

def write_report(ctx, steps):
    report = {"format": "luatune-gpu-report/1", "dry_run": ctx.dry_run, "machine": ctx.info, "steps": steps,
              "comparisons": comparisons(steps), "peer_comparisons": peer_comparisons(steps)}
    for name, text in (("gpu-report.json", json.dumps(report, indent=1, sort_keys=False) + "\n"),
                       ("gpu-report.md", render_markdown(report))):
        tmp = os.path.join(ctx.out_dir, name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, os.path.join(ctx.out_dir, name))
    pack_logs(ctx)


def pack_logs(ctx, per_file=4 << 20):
    """logs.tar.gz: every step's log (the last 4 MiB of a longer one): the device tool returns at most
    8 files from $OUT, so the logs travel as one."""
    tmp = os.path.join(ctx.out_dir, "logs.tar.gz.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for name in sorted(os.listdir(ctx.log_dir)):
            path = os.path.join(ctx.log_dir, name)
            size = os.path.getsize(path)
            with open(path, "rb") as f:
                if size > per_file:
                    f.seek(size - per_file)
                data = f.read()
            ti = tarfile.TarInfo("logs/" + name)
            ti.size, ti.mtime = len(data), int(time.time())
            tar.addfile(ti, io.BytesIO(data))
    os.replace(tmp, os.path.join(ctx.out_dir, "logs.tar.gz"))


# ============================================================================================

def parse_args(argv):
    ap = argparse.ArgumentParser(prog="scripts/gpu-validate.sh", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog="docs/gpu.md")
    ap.add_argument("out_dir", metavar="OUT_DIR", nargs="?",
                    help="gpu-report.json, gpu-report.md, logs.tar.gz go here (not needed with --plan)")
    ap.add_argument("--dry-run", action="store_true", help="CPU: GPU-only steps skipped, the existing build dir; "
                                                           "prints the plan for --budget first")
    ap.add_argument("--plan", action="store_true", help="print the plan for --budget and --call-limit, run nothing")
    ap.add_argument("--part", choices=PARTS + ("all",), default="all")
    ap.add_argument("--budget", type=int, default=570,
                    help="device seconds for the whole run, over this call and the --continue calls after it "
                         "(what the device tool's status leaves, less the machine's start; default 570)")
    ap.add_argument("--call-limit", type=int, default=570,
                    help="seconds one call may take (default 570: the device tool runs a command 600 s at most)")
    ap.add_argument("--continue", dest="continue_run", action="store_true",
                    help="go on from the last call on this machine (its state in --work): the steps it ran are "
                         "kept, the budget it used is spent")
    ap.add_argument("--build-dir", help="default build-gpu (dry run: build)")
    ap.add_argument("--deps", default=".deps", help="scripts/offline-deps.sh's folder (default .deps)")
    ap.add_argument("--wheels", default=".wheels", help="scripts/device-wheels.sh's folder (default .wheels): "
                                                        "the peers' bundles, installed offline by peer_wheels")
    ap.add_argument("--work", help="logs and scratch (default: a new temporary folder; keep it out of OUT_DIR "
                                   "on the device machine, which returns at most 8 files; --continue needs the same)")
    ap.add_argument("--only", help="run only the steps whose names match this regular expression (and build)")
    args = ap.parse_args(argv)
    if not args.plan and not args.out_dir:
        ap.error("OUT_DIR is required (except with --plan)")
    if args.continue_run and not args.work:
        ap.error("--continue needs --work, the folder the earlier call used")
    if args.budget <= 0 or args.call_limit <= 0:
        ap.error("--budget and --call-limit must be positive")
    return args


STATE = "gpu-state.json"  # in --work: what --continue goes on from


def load_state(ctx):
    path = os.path.join(ctx.work, STATE)
    doc = read_json(path) if ctx.continuing else None
    if ctx.continuing and not isinstance(doc, dict):
        print("gpu-validate: --continue, but no %s in %s: starting afresh" % (STATE, ctx.work), flush=True)
        ctx.continuing = False
    return doc if isinstance(doc, dict) else {"used_s": 0.0, "records": [], "info": {}}


def save_state(ctx, state):
    path = os.path.join(ctx.work, STATE)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(state, f, indent=1)
    os.replace(path + ".tmp", path)


def main(argv):
    args = parse_args(argv)
    if args.plan:
        ctx = Context(argparse.Namespace(**dict(vars(args), out_dir=".", work=tempfile.gettempdir())))
        print(plan_text(make_steps(ctx), args.budget, args.call_limit)[0])
        return 0
    ctx = Context(args)
    os.makedirs(ctx.out_dir, exist_ok=True)
    os.makedirs(ctx.log_dir, exist_ok=True)
    t_start = time.monotonic()
    state = load_state(ctx)
    earlier = [r for r in state["records"] if r.get("status") != "planned"]
    steps_out = ctx.steps_done
    steps_out.extend(earlier)
    done = {r["name"] for r in earlier}
    pending = []  # the plan's later calls and what it leaves out, as report rows

    def report():
        write_report(ctx, steps_out + pending)

    def on_term(signum, _frame):  # the device tool's limit: end the running command, leave what was measured
        if ctx.current is not None:
            try:
                os.killpg(ctx.current.pid, signal.SIGKILL)
            except OSError:
                pass
        steps_out.append({"name": "(interrupted)", "part": args.part, "status": "failed", "seconds": 0.0,
                          "reason": "gpu-validate stopped by signal %d" % signum, "result": {}})
        state.update(used_s=state["used_s"] + time.monotonic() - t_start, records=steps_out)
        save_state(ctx, state)
        report()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    probe(ctx)
    print("gpu-validate: %s, part %s, work %s" % (ctx.info["mode"], args.part, ctx.work), flush=True)
    steps = make_steps(ctx)
    if ctx.continuing:
        print("gpu-validate: --continue: %d steps done in earlier calls, %.0f s of --budget %d spent" %
              (len(done), state["used_s"], args.budget), flush=True)
        if not os.access(ctx.runner, os.X_OK):
            done.discard("build")  # a fresh machine: build again
    remaining = [st for st in steps if st.name not in done]
    left_total = args.budget - state["used_s"]
    text, calls, left_out, slack = plan_text(remaining, max(left_total, 0), args.call_limit)
    print(text, flush=True)
    ctx.slack_s = slack
    if ctx.dry_run:  # the CPU paths of every step, without time limits (CI's gpu_validate_dry_run)
        this_call = remaining
    else:
        this_call = [st for st, _ in calls[0]] if calls else []
        later = [(i + 2, st) for i, call in enumerate(calls[1:]) for st, _ in call]
        pending = [{"name": st.name, "part": st.part, "status": "skipped", "seconds": 0.0, "result": {},
                    "reason": "planned for call %d: scripts/gpu-validate.sh --budget %d --continue (same --work)" %
                              (n, args.budget), "log": ""} for n, st in later]
        pending += [{"name": st.name, "part": st.part, "status": "skipped", "seconds": 0.0, "result": {},
                     "reason": why, "log": ""} for st, why in left_out]
        ctx.part_deadline = t_start + min(args.call_limit, max(left_total, 0))
    for step in this_call:
        est = step.est_s or 0
        if ctx.part_deadline is not None and est > ctx.part_deadline - time.monotonic() and step.name != "build":
            # Earlier steps ran long: this one waits for the next call.
            pending.insert(0, {"name": step.name, "part": step.part, "status": "skipped", "seconds": 0.0,
                               "result": {}, "log": "", "reason": "no time left in this call (about %d s needed): "
                               "scripts/gpu-validate.sh --budget %d --continue" % (est, args.budget)})
            continue
        rec = run_step(ctx, step)
        if step.name == "build" and rec["result"].get("runner_version"):
            ctx.info["runner_version"] = rec["result"]["runner_version"]
        steps_out.append(rec)
        print("  %-34s %-8s %6.1f s  %s" % (rec["name"], rec["status"], rec["seconds"], rec["reason"]), flush=True)
        state.update(used_s=state["used_s"] + 0, records=steps_out)
        report()
    elapsed = time.monotonic() - t_start
    if not ctx.dry_run:
        state.update(used_s=state["used_s"] + elapsed, records=steps_out)
        save_state(ctx, state)
    report()
    waiting = [r for r in pending if r["reason"].startswith(("planned for call", "no time left"))]
    print("gpu-validate: %d steps in %.0f s: %s" % (len(steps_out), elapsed, os.path.join(ctx.out_dir, "gpu-report.md")))
    if waiting and not ctx.stopped:
        print("gpu-validate: %d steps wait for the next call: scripts/gpu-validate.sh --budget %d --continue "
              "--work %s OUT_DIR" % (len(waiting), args.budget, ctx.work))
    # The report is the product: exit 0 when it was written, whatever the steps said.
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
