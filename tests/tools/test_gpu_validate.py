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
        self.assertEqual(args[args.index("-E") + 1], "^(nf4_kernel_tests|step_kernel_smoke)$")

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

    def test_a_failed_smoke_step_stops_the_rest(self):
        self.ctx.stopped = "the smoke step failed: FAIL swiglu llama-3.1-8b: d gate: not finite"
        rec = gv.run_step(self.ctx, gv.Step("bench:x", "bench", 100, lambda c, s: ("ok", "")))
        self.assertEqual(rec["status"], "skipped")
        self.assertEqual(rec["reason"], "not run: the smoke step failed: FAIL swiglu llama-3.1-8b: d gate: not finite")

    def test_continue_state_round_trip(self):
        self.ctx.continuing = True
        self.assertEqual(gv.load_state(self.ctx)["used_s"], 0.0)  # none yet: afresh
        self.assertFalse(self.ctx.continuing)
        gv.save_state(self.ctx, {"used_s": 321.5, "records": [{"name": "build", "status": "ok"}], "info": {}})
        self.ctx.continuing = True
        st = gv.load_state(self.ctx)
        self.assertEqual((st["used_s"], st["records"][0]["name"]), (321.5, "build"))

    def test_planner_appends_calibration_points(self):
        self.ctx.info = {"date": "2026-12-08 10:00 UTC", "git": "abc1234", "gpu": {"name": "NVIDIA H200"},
                         "runner_version": "luatune 0.1.0\ntraining step 0123456789ab (host/hw/step_files.txt)"}
        pair = ("llama-3.2-1b", "lora", 2048, 4)
        ok = {"status": "ok", "result": {"peak_memory_kind": "cuda_max_allocated", "peak_memory_gb": 5.5}}
        by_name = {gv.pair_step_name("llama-3.2-1b", "lora", "luatune"): ok,
                   gv.pair_step_name("llama-3.2-1b", "full", "luatune"): {"status": "failed", "result": {}}}
        self.assertEqual(gv.append_calibration(self.ctx, [pair, ("llama-3.2-1b", "full", 2048, 4)], by_name), 1)
        self.assertEqual(gv.append_calibration(self.ctx, [pair], by_name), 0)  # the same point once
        doc = gv.read_json(os.path.join(self.ctx.out_dir, "planner_calibration.json"))
        shipped = gv.read_json(os.path.join(ROOT, gv.CALIBRATION))
        self.assertEqual(doc["points"][:-1], shipped["points"])
        new = doc["points"][-1]
        self.assertEqual((new["date"], new["commit"], new["gpu"], new["step"], new["shape"], new["method"],
                          new["batch_size"], new["max_length"], new["peak_memory_gb"], new["loss_logit_bytes"]),
                         ("2026-12-08", "abc1234", "NVIDIA H200", "0123456789ab", "llama-3.2-1b", "lora", 4, 2048,
                          5.5, 0))
        self.ctx.info["runner_version"] = "luatune 0.1.0"  # an old runner: no fingerprint, no point
        self.assertEqual(gv.append_calibration(self.ctx, [("llama-3.1-8b", "lora", 2048, 4)], by_name), 0)

    def test_budget_spent_skips(self):
        self.ctx.part_deadline = time.monotonic() + 5
        rec = gv.run_step(self.ctx, gv.Step("late", "bench", 100, lambda c, s: ("ok", "")))
        self.assertEqual(rec["status"], "skipped")
        self.assertIn("time budget is spent", rec["reason"])


class Plan(unittest.TestCase):
    """The plan at the budgets docs/gpu.md shows (600, 780, 1500 s; calls of 570 s)."""

    def steps(self, part="all"):
        args = argparse.Namespace(dry_run=False, out_dir=".", work=tempfile.gettempdir(), build_dir="build",
                                  budget=780, deps=".deps", part=part, only=None)
        return gv.make_steps(gv.Context(args))

    def test_order_calls_and_budget(self):
        steps = self.steps()
        names = [s.name for s in steps]
        self.assertEqual(names[:3], ["build", "smoke", "peer_wheels"])
        self.assertEqual(names[-1], "whole_suite")
        # the GPU ratios against every peer come before the tests that settle less
        self.assertLess(names.index("bench:llama-3.2-1b:lora:unsloth"), names.index("gpu_tests"))
        self.assertLess(names.index("planner"), names.index("bench:llama-3.1-8b:qlora:luatune"))
        for budget in (600, 780, 1500):
            calls, left_out, slack = gv.plan_calls(steps, budget, 570)
            total = sum(gv.CALL_OVERHEAD + sum(e for _, e in c) for c in calls)
            self.assertLessEqual(total, budget + 1e-9)
            self.assertGreaterEqual(slack, 0)
            for c in calls:
                self.assertLessEqual(gv.CALL_OVERHEAD + sum(e for _, e in c), 570)
            planned = [s.name for c in calls for s, _ in c]
            self.assertEqual(len(planned) + len(left_out), len(steps))  # every step planned or said why not
            self.assertEqual(planned[:2], ["build", "smoke"])
            for i, name in enumerate(planned):  # what a step needs comes before it
                for need in dict((s.name, s) for s in steps)[name].kw.get("needs", ()):
                    self.assertIn(need, planned[:i], "%s before %s at %d s" % (need, name, budget))
            # a luatune benchmark side runs only with HF's beside it
            for name in planned:
                if name.startswith("bench:") and name.endswith(":luatune"):
                    self.assertIn(name[:-len("luatune")] + "hf", planned, name)
            for s, why in left_out:
                self.assertTrue(why.startswith(("does not fit --budget", "needs ", "less than")), why)
        one = gv.plan_calls(steps, 600, 570)[0]
        self.assertEqual(len(one), 1)  # 30 s more would be a call mostly spent starting
        self.assertIn("bench:llama-3.2-1b:qlora:unsloth", [s.name for s, _ in one[0]])
        two, out780, _ = gv.plan_calls(steps, 780, 570)
        self.assertEqual(len(two), 2)
        self.assertIn("bench:llama-3.1-8b:qlora:hf", [s.name for s, _ in two[1]])
        three, out1500, _ = gv.plan_calls(steps, 1500, 570)
        self.assertEqual(len(three), 3)
        self.assertLess(len(out1500), len(out780))
        every, none_out, _ = gv.plan_calls(steps, 3000, 570)  # enough for everything: the suite takes the rest
        self.assertEqual((none_out, [s.name for s, _ in every[-1]][-1]), ([], "whole_suite"))

    def test_a_part_keeps_its_own_steps_and_the_build(self):
        names = [s.name for s in self.steps("long")]
        self.assertEqual(names[0], "build")
        self.assertTrue(all(n == "build" or n.startswith(("bench:llama-3.1-8b:full", "planner:long", "sheared"))
                            for n in names), names)

    def test_plan_text_says_what_is_left_out(self):
        text = gv.plan_text(self.steps(), 300, 570)[0]
        self.assertIn("not run: whole_suite", text)
        self.assertIn("does not fit --budget 300", text)
        self.assertRegex(text, r"planned: \d+ steps in 1 call\(s\), about \d+ s of 300")


if __name__ == "__main__":
    unittest.main(verbosity=1)
