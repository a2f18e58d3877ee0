#!/usr/bin/env python3
"""tests/tools/test_gpu_validate.py: the GPU harness's parsers and report rendering
(scripts/gpu_validate_report.py) and its step runner (scripts/gpu_validate.py: time caps, failures that
do not stop the rest), on canned output: no GPU, no runner needed.
CTest: gpu_validate_units (label cli)."""
import argparse
import importlib.util
import os
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the checkout
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
spec = importlib.util.spec_from_file_location("gpu_validate", os.path.join(ROOT, "scripts", "gpu_validate.py"))
gv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gv)

CTEST = """Test project /x/build-gpu
    Start 403: nf4_kernel_tests
1/4 Test #403: nf4_kernel_tests .................   Passed    1.20 sec
2/4 Test #419: lua_torch_cuda ...................***Skipped   0.65 sec
3/4 Test #420: lua_models_cuda ..................***Failed    2.01 sec
4/4 Test #421: slow_one .........................***Timeout 120.02 sec

25% tests passed, 2 tests failed out of 4
"""

PLAN = """plan (recipes/qlora_finetune.lua; model from preset llama3.1-8b)
predicted peak memory per GPU (GiB)
  weights                5.31
  adapters               0.16
  optimizer_step         5.87  (transient after backward; the larger of it and activations+logits counts)
  cuda_context           1.00
  fragmentation          0.47
  total                 10.87
host RAM: no optimizer state offloaded (optimizer_offload=none)
"""

NF4 = """bench_nf4_kernels on NVIDIA H100 80GB HBM3: NF4 4096 x 14336, blocksize 64, bf16 out, mean of 50 calls (CUDA events)
  dequantize_4bit (ours)           0.120 ms   1530.2 GB/s
  two-pass peer (unpack+gather)    0.400 ms    459.0 GB/s  (same bits: yes)
  ratio peer / ours                3.33x
  quantize_4bit from bf16          0.300 ms    612.1 GB/s
"""


class Parsers(unittest.TestCase):
    def test_ctest(self):
        r = gv.parse_ctest(CTEST)
        self.assertEqual((r["passed"], r["skipped"], r["failed"], r["total"]), (1, 1, 2, 4))
        self.assertEqual(r["failed_tests"], ["lua_models_cuda", "slow_one"])
        self.assertTrue(r["complete"])
        partial = gv.parse_ctest(CTEST.split("\n\n")[0].rsplit("\n", 1)[0])  # cut off mid-run
        self.assertFalse(partial["complete"])
        self.assertEqual(partial["total"], 3)

    def test_plan(self):
        comps, total = gv.parse_plan(PLAN)
        self.assertEqual(total, 10.87)
        self.assertEqual(comps["cuda_context"], 1.0)
        self.assertEqual(comps["optimizer_step"], 5.87)
        self.assertEqual(gv.parse_plan("error: no plan\n"), ({}, None))

    def test_plan_phases(self):
        phased = ("plan (recipes/llama31_sheared.lua; model from x)\n\n== phase pruning: masks and weights\n" +
                  PLAN.split("\n", 1)[1] + "\n== phase recovery: the pruned model\n" +
                  PLAN.split("\n", 1)[1].replace("  cuda_context", "  teacher               14.96\n  cuda_context")
                  .replace("10.87", "25.83") + "\nthe recovery phase peaks: 25.83 GiB per GPU (pruning: 10.87)\n")
        phases = gv.parse_plan_phases(phased)
        self.assertEqual(sorted(phases), ["pruning", "recovery"])
        self.assertEqual(phases["pruning"][1], 10.87)
        self.assertEqual(phases["recovery"][1], 25.83)
        self.assertEqual(phases["recovery"][0]["teacher"], 14.96)
        self.assertNotIn("teacher", phases["pruning"][0])
        self.assertEqual(gv.parse_plan_phases(PLAN), {})  # one plan: no phases

    def test_gpu_tests_leave_nf4_to_its_own_step(self):
        seen = []
        orig = gv.ctest_step
        gv.ctest_step = lambda ctx, step, args, what, gpu_only=False: seen.append(args) or ("ok", "")
        try:
            gv.step_gpu_tests(type("Ctx", (), {"need_cuda": lambda self: None})(), None)
        finally:
            gv.ctest_step = orig
        args = seen[0]
        self.assertEqual(args[args.index("-L") + 1], "gpu")
        self.assertEqual(args[args.index("-E") + 1], "^nf4_kernel_tests$")

    def test_nf4_bench_and_catalog(self):
        r = gv.parse_nf4_bench(NF4)
        self.assertEqual(r["gpu"], "NVIDIA H100 80GB HBM3")
        self.assertEqual(r["dequantize_ours"]["gb_per_s"], 1530.2)
        self.assertTrue(r["same_bits"])
        self.assertEqual(gv.catalog_bandwidth("NVIDIA H100 80GB HBM3"), ("H100 SXM", 3350))
        self.assertEqual(gv.catalog_bandwidth("NVIDIA H200"), ("H200", 4800))
        self.assertEqual(gv.catalog_bandwidth("NVIDIA H100 PCIe")[0], "H100 PCIe")
        self.assertEqual(gv.catalog_bandwidth("Some Unknown Card"), (None, None))


def report(steps, dry_run=False):
    return {"dry_run": dry_run, "steps": steps, "comparisons": gv.comparisons(steps),
            "machine": {"date": "2026-11-26 00:00 UTC", "part": "bench", "mode": "GPU run", "cuda_used": True,
                        "gpu": {"name": "NVIDIA H100 80GB HBM3", "memory": "81559 MiB", "count": 1},
                        "python": {"torch": "2.11.0", "cuda": "13.0", "cuda_available": True,
                                   "transformers": "5.17.0", "peft": None}}}


def step(name, status, result=None, reason=""):
    return {"name": name, "part": "bench", "status": status, "reason": reason, "seconds": 1.5,
            "result": result or {}, "log": "logs/x.log"}


class Rendering(unittest.TestCase):
    def test_pairs_ratios_and_tables(self):
        steps = [step("bench:llama-3.2-1b:lora:luatune", "ok", {"tokens_per_s": 30000.0, "peak_memory_gb": 10.0,
                                                                 "step_time_s": 0.27, "mfu": 0.45}),
                 step("bench:llama-3.2-1b:lora:hf", "ok", {"tokens_per_s": 20000.0, "peak_memory_gb": 12.5,
                                                            "step_time_s": 0.41, "mfu": 0.30}),
                 step("bench:llama-3.1-8b:full:luatune", "ok", {"oom": True, "error": "CUDA out of memory"}),
                 step("bench:llama-3.1-8b:full:hf", "skipped", reason="hf_train_bench: skipped: no | pipes"),
                 step("planner", "ok", {"rows": [{"shape": "llama-3.2-1b", "method": "lora", "error_pct": -3.2}],
                                        "note": "n"})]
        c = {(r["shape"], r["method"]): r for r in gv.comparisons(steps)}
        self.assertEqual(c[("llama-3.2-1b", "lora")]["tokens_per_s_ratio"], 1.5)
        self.assertEqual(c[("llama-3.2-1b", "lora")]["peak_memory_gb_ratio"], 0.8)
        self.assertEqual(c[("llama-3.1-8b", "full")]["luatune_peak_memory_gb"], "OOM")
        self.assertIsNone(c[("llama-3.1-8b", "full")]["tokens_per_s_ratio"])
        md = gv.render_markdown(report(steps))
        self.assertIn("- date: 2026-11-26 00:00 UTC", md)
        self.assertIn("- GPU: NVIDIA H100 80GB HBM3, 81559 MiB", md)
        self.assertIn("- torch: 2.11.0, CUDA 13.0, available", md)
        self.assertIn("peft: not importable", md)
        self.assertNotIn("Dry run", md)
        self.assertNotIn("No CUDA device was usable", md)
        for s in steps:  # one row per step in the steps table
            self.assertIn("| %s | bench | %s |" % (s["name"], s["status"]), md)
        self.assertIn("no \\| pipes", md)  # a reason's | does not break the table
        self.assertIn("| llama-3.2-1b | lora | ok | ok | 3e+04 | 2e+04 | 1.5 |", md)
        self.assertIn("### planner (ok)", md)
        self.assertIn("| llama-3.2-1b | lora | -3.2 |", md)
        self.assertIn("## Steps (4 ok, 1 skipped)", md)

    def test_dry_run_banner_and_no_gpu(self):
        r = report([step("build", "ok")], dry_run=True)
        del r["machine"]["gpu"]
        r["machine"]["python"] = {}
        md = gv.render_markdown(r)
        self.assertIn("**Dry run on the CPU: nothing here ran on a GPU.**", md)
        self.assertIn("- GPU: none", md)
        self.assertIn("- torch: not importable", md)


class StepRunner(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        args = argparse.Namespace(dry_run=True, out_dir=self.tmp.name, work=self.tmp.name, build_dir="build",
                                  budget=570, deps=".deps", part="all", only=None)
        self.ctx = gv.Context(args)
        os.makedirs(self.ctx.log_dir, exist_ok=True)

    def tearDown(self):
        self.tmp.cleanup()

    def test_time_cap_ends_the_process_group(self):
        def fn(ctx, st):
            ctx.run(st, ["bash", "-c", "sleep 30 & sleep 30"])
        t0 = time.monotonic()
        rec = gv.run_step(self.ctx, gv.Step("slow", "bench", 2, fn))
        self.assertGreater(time.monotonic() - t0, 1.5)
        self.assertLess(time.monotonic() - t0, 8)  # not the sleeps' 30 s: the group got SIGTERM
        self.assertEqual(rec["status"], "timeout")
        self.assertIn("time cap 2 s reached in: bash -c 'sleep 30 & sleep 30'", rec["reason"])
        with open(os.path.join(self.ctx.work, rec["log"])) as f:
            self.assertIn("--- exit timeout after", f.read())

    def test_failures_are_recorded_not_raised(self):
        def boom(ctx, st):
            raise KeyError("nope")

        def skip(ctx, st):
            raise gv.Skip("no CUDA")

        def fail(ctx, st):
            p = ctx.run(st, ["bash", "-c", "echo out; echo the reason >&2; exit 7"])
            raise gv.Fail("exit %d: %s" % (p.rc, p.last_err_line()))
        self.assertEqual(gv.run_step(self.ctx, gv.Step("a", "bench", 10, boom))["status"], "failed")
        self.assertIn("driver error: KeyError", gv.run_step(self.ctx, gv.Step("a", "bench", 10, boom))["reason"])
        self.assertEqual(gv.run_step(self.ctx, gv.Step("b", "bench", 10, skip))["reason"], "no CUDA")
        rec = gv.run_step(self.ctx, gv.Step("c", "bench", 10, fail))
        self.assertEqual((rec["status"], rec["reason"]), ("failed", "exit 7: the reason"))
        with open(os.path.join(self.ctx.work, rec["log"])) as f:
            log = f.read()
        self.assertIn("out\n", log)
        self.assertIn("--- stderr ---\nthe reason", log)
        self.assertIn("--- exit 7 after", log)

    def test_budget_spent_skips(self):
        self.ctx.part_deadline = time.monotonic() + 5
        rec = gv.run_step(self.ctx, gv.Step("late", "bench", 100, lambda c, s: ("ok", "")))
        self.assertEqual(rec["status"], "skipped")
        self.assertIn("time budget is spent", rec["reason"])


if __name__ == "__main__":
    unittest.main(verbosity=1)
