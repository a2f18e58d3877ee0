"""scripts/gpu_validate_plan.py: what scripts/gpu_validate.py runs in a --budget of device time (docs/gpu.md,
"The plan"): each step's estimated seconds, and the steps packed into device calls in the order given.
Standard library only; the steps are gpu_validate.Step objects (name, est_s, kw["needs"], kw["partner_s"])."""

# Seconds each step is expected to take on one H200/H100, for the plan: measured on 2026-11-26
# (docs/gpu-report-2026-11-26.md: build of four targets 108 s, gpu_tests 22, nf4_kernels 23,
# torchrun 10, hf_parity 0.6, hf_roundtrip 20, 1B luatune sides 13-14, 1B HF sides 16-21, planner 5)
# with some margin, else estimated (marked "est."): the peers' imports (Liger, Unsloth) and the 8B
# sides have not been timed on a GPU yet. A step that takes longer still gets its cap; the plan only
# decides what is attempted.
ESTIMATES = {
    "build": 150,                 # measured 108 s for four targets; the plan builds eight
    "smoke": 30,                  # est.: the bound for step_kernel_smoke
    "peer_wheels": 30,            # est.: 20 s on the 2-core CPU machine for both bundles
    "planner": 10, "planner:long": 10,
    "gpu_tests": 30, "nf4_kernels": 25, "nf4_huge": 20,  # nf4_huge: check_huge's host loops (est. 10-20 s)
    "torchrun_lora_ws1": 12, "shard_full_1gpu": 15,
    "hf_fixtures": 60, "hf_parity": 5, "hf_roundtrip": 25,
    "sheared_phases": 150,        # est.
    "trace": 30,
    "decode_luatune": 30,         # est.: a random 1B model's init, 4 x 129 tokens
    "decode_hf": 90,              # est.: torch.compile's first graphs take most of it
}
# One benchmark side by (shape, side): luatune's and HF's 1B sides and luatune's 8B sides measured
# (13-21 s; 61.5 and 67.8 s), the rest estimated from them (the peers' imports add to HF's time).
BENCH_ESTIMATES = {("llama-3.2-1b", "luatune"): 15, ("llama-3.2-1b", "luatune-aten"): 15,
                   ("llama-3.2-1b", "hf"): 22, ("llama-3.2-1b", "liger"): 25, ("llama-3.2-1b", "unsloth"): 45,
                   ("llama-3.1-8b", "luatune"): 70, ("llama-3.1-8b", "hf"): 80, ("llama-3.1-8b", "liger"): 80,
                   ("llama-3.1-8b", "unsloth"): 100}
WHOLE_SUITE_MIN = 60


def bench_est(shape, side):
    return BENCH_ESTIMATES.get((shape, side), 10 if shape == "tiny" else 60)


CALL_OVERHEAD = 15  # each call's own start: the probe (imports torch) and, continuing, the runner check
MIN_CALL = 60  # a follow-on call needs at least this much time for its steps


def plan_calls(steps, budget, call_limit):
    """Which steps fit --budget seconds in device calls of at most call_limit seconds each, by their
    estimates, in order. A step goes into the current call when it fits what is left of it, what it
    needs (Step kw "needs") is planned, and the steps before it that wait for a later call still fit
    the budget after it; otherwise it waits for the next call. A step that fits no call is left out.
    The whole suite (no estimate) takes what is left of the last call, if at least WHOLE_SUITE_MIN.
    Each call starts with CALL_OVERHEAD seconds of its own.
    Returns (calls, left_out, slack): calls a list of [(step, seconds)], left_out [(step, why)], slack
    the seconds of --budget the plan leaves unused."""
    calls, caps, left_out = [], [], []
    todo = [st for st in steps if st.est_s is not None]
    suite = [st for st in steps if st.est_s is None]
    planned = set()
    used = 0.0  # the calls so far: overhead + their steps' estimates
    while todo:
        cap = min(call_limit, budget - used) - CALL_OVERHEAD
        if calls and cap < MIN_CALL:
            break  # a call this short would be mostly its own start
        call, t, later, waiting = [], 0.0, [], 0.0
        for st in todo:
            needs_ok = all(n in planned for n in st.kw.get("needs", ()))
            room = st.est_s + st.kw.get("partner_s", 0)  # luatune's side keeps room for HF's right after it
            if needs_ok and t + room <= cap and used + CALL_OVERHEAD + t + room + waiting <= budget:
                call.append((st, float(st.est_s)))
                planned.add(st.name)
                t += st.est_s
            else:
                later.append(st)
                # Steps before this one that a later call can still take keep their time.
                if budget - (used + CALL_OVERHEAD + t) - CALL_OVERHEAD - waiting >= room and \
                        room <= call_limit - CALL_OVERHEAD:
                    waiting += room
        if not call:
            break
        calls.append(call)
        caps.append(cap)
        used += CALL_OVERHEAD + t
        todo = later
    for st in todo:
        missing = [n for n in st.kw.get("needs", ()) if n not in planned]
        left_out.append((st, "needs %s, which is not run" % ", ".join(missing)) if missing else
                        (st, "does not fit --budget %d: about %d s, %d s left" % (budget, st.est_s,
                                                                                   max(budget - used, 0))))
    for st in suite:  # the whole suite: what is left of the last call, or a call of its own
        room = caps[-1] - sum(e for _, e in calls[-1]) if calls else 0.0
        if room >= WHOLE_SUITE_MIN:
            calls[-1].append((st, room))
            used += room
        elif min(call_limit, budget - used) - CALL_OVERHEAD >= WHOLE_SUITE_MIN:
            room = min(call_limit, budget - used) - CALL_OVERHEAD
            calls.append([(st, room)])
            used += CALL_OVERHEAD + room
        else:
            left_out.append((st, "less than %d s of --budget %d left for it" % (WHOLE_SUITE_MIN, budget)))
    return calls, left_out, max(budget - used, 0.0)


def plan_text(steps, budget, call_limit):
    calls, left_out, slack = plan_calls(steps, budget, call_limit)
    lines = ["plan for --budget %d s in device calls of at most %d s (estimates: ESTIMATES in "
             "scripts/gpu_validate_plan.py):" % (budget, call_limit)]
    total = 0.0
    for i, call in enumerate(calls):
        t = CALL_OVERHEAD + sum(e for _, e in call)
        total += t
        flag = "" if i == 0 else " --continue"
        lines.append("  call %d (%d s; scripts/gpu-validate.sh --budget %d%s ...):" % (i + 1, t, budget, flag))
        lines.append("    %-36s %5d s" % ("(start: probe, checks)", CALL_OVERHEAD))
        for st, e in call:
            lines.append("    %-36s %5d s%s" % (st.name, e, "  (what is left)" if st.est_s is None else ""))
    for st, why in left_out:
        lines.append("  not run: %-27s %s" % (st.name, why))
    lines.append("planned: %d steps in %d call(s), about %d s of %d; %d left out" %
                 (sum(len(c) for c in calls), len(calls), total, budget, len(left_out)))
    return "\n".join(lines), calls, left_out, slack
