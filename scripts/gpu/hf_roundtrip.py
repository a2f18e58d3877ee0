#!/usr/bin/env python3
"""luatune's files in Hugging Face transformers and peft, and peft's files in luatune (issue 19, step 2).

    python3 scripts/gpu/hf_roundtrip.py --runner build/runner --work DIR --out FILE.json [--device cuda|cpu]
                                        [--luatune-only | --strict]

The luatune half is scripts/gpu/roundtrip_export.lua, run by the runner: tiny random models of every
architecture, a pruned Llama, merged LoRA and DoRA Llamas, LoRA and DoRA adapters in PEFT's format,
each with luatune's logits for fixed ids (torch.save). This script then checks, in transformers/peft:
  1. hf_load_<arch>, hf_load_<arch>_bf16: AutoModelForCausalLM.from_pretrained(dir) gives luatune's
     logits (float32 within 1e-4; the same weights in bfloat16 within 2e-2);
  2. hf_load_llama_pruned: so does the pruned model (every shape changed, hidden != heads * head_dim);
  3. hf_load_llama_merged_{lora,dora}: so do the merged models, against luatune's merged model and
     against its adapted forward before the merge;
  4. peft_load_luatune_{lora,dora}: PeftModel.from_pretrained(HF base, luatune adapter) gives luatune's
     adapted logits;
  5. luatune_load_peft_{lora,dora}: an adapter made and saved by peft (lora_B and DoRA's magnitude
     perturbed) loads in luatune (lora.load) with peft's logits.
Plus luatune_export / luatune_load: the Lua side ran and wrote every file it lists.

FILE.json (written atomically): {"checks": [{"name", "status": "ok|failed|skipped", "max_abs_diff",
"detail"}], "versions": {...}, "device": ...}.
Exit status: 0 when the HF checks ran (failed checks included: the statuses say); 3 when transformers
(or torch) is not importable or --luatune-only is given: the luatune side still runs, every file it
writes is checked to exist and be non-empty, luatune's own adapters go through the load phase (bit-exact
against their saved logits), the HF checks are reported "skipped" and stderr has one line saying why;
1 when, in that mode, the luatune side itself failed. peft missing alone skips checks 4 and 5 only (exit 0).
--strict (the CTest test hf_roundtrip, on the CPU with the pinned environment's transformers and peft):
exit 1 unless every check ran and is ok: a failed or skipped check, or transformers or peft not
importable, fails the run, and the last line names the checks that did not pass.
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

EXIT_SKIPPED = 3
ARCHS = ["llama", "mistral", "qwen2", "qwen3", "gemma2"]  # roundtrip_export.lua saves each in float32
TOL_FLOAT32 = 1e-4  # absolute, on logits of magnitude ~1: only summation order differs
TOL_BFLOAT16 = 2e-2  # as tests/cpp/test_hf_parity.cpp: both round at the same points
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORT_LUA = os.path.join(ROOT, "scripts", "gpu", "roundtrip_export.lua")
OWNED = ["models", "adapters", "peft", "logits", "manifest.json", "manifest_load_adapters.json",
         "manifest_load_peft.json"]

# Adapters peft makes for check 5 (on the luatune-saved Llama): every linear, and DoRA on a subset of
# kinds in one layer (layers_to_transform), so lora.load reads both target lists and the magnitude.
PEFT_ADAPTERS = {
    "lora": dict(r=8, lora_alpha=16, lora_dropout=0.1,
                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
    "dora": dict(r=4, lora_alpha=8, lora_dropout=0.0, use_dora=True, target_modules=["q_proj", "v_proj", "o_proj"],
                 layers_to_transform=[0]),
}


# ==== results =====================================================================================

class Report:
    def __init__(self):
        self.checks = []

    def add(self, name, status, max_abs_diff=None, detail=""):
        self.checks.append({"name": name, "status": status, "max_abs_diff": max_abs_diff, "detail": detail})
        diff = "" if max_abs_diff is None else f" max|diff| {max_abs_diff:.3g}"
        print(f"{status:8s} {name}{diff}{' - ' + detail if detail else ''}", flush=True)

    def run(self, name, fn):
        """fn() -> (max_abs_diff, tolerance, detail); an exception fails the check with its last line."""
        try:
            diff, tol, detail = fn()
        except Exception as e:  # each check stands alone: record it and go on
            frames = [ln.strip() for ln in traceback.format_exc().splitlines() if ln.strip().startswith("File ")]
            where = f" ({frames[-1][:200]})" if frames else ""
            self.add(name, "failed", None, f"{type(e).__name__}: {e}"[:400] + where)
            return
        ok = diff is not None and diff <= tol
        self.add(name, "ok" if ok else "failed", diff, detail if ok else f"over the tolerance {tol:g}; {detail}")


def write_json_atomic(path, value):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".hf_roundtrip.", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ==== the luatune side ============================================================================

def run_lua(runner, work, device, *overrides):
    cmd = [runner, EXPORT_LUA, f"work_dir={work}", f"device={device}", *overrides]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:  # the runner's "error: FILE:LINE: message" line, else the output's end
        lines = (p.stderr + p.stdout).strip().splitlines()
        why = next((ln for ln in lines if ln.startswith("error:")), " | ".join(lines[-3:]))
        raise RuntimeError(f"runner {os.path.basename(EXPORT_LUA)} {' '.join(cmd[2:])} exited {p.returncode}: {why}"[:600])
    return time.time() - t0


def check_files(work, manifest_name):
    """The manifest's items, after checking every file they name exists and is not empty."""
    with open(os.path.join(work, manifest_name)) as f:
        manifest = json.load(f)
    bad = []
    for item in manifest["items"]:
        for key in ("model", "adapter", "logits"):
            if key not in item:
                continue
            p = os.path.join(work, item[key])
            files = [os.path.join(p, n) for n in os.listdir(p)] if os.path.isdir(p) else [p]
            if not files or any(not os.path.isfile(x) or os.path.getsize(x) == 0 for x in files):
                bad.append(item[key])
    if bad:
        raise RuntimeError(f"{manifest_name}: missing or empty: {', '.join(bad)}")
    return manifest


def luatune_export(report, args):
    try:
        secs = run_lua(args.runner, args.work, args.device, "phase=export")
        manifest = check_files(args.work, "manifest.json")
    except Exception as e:
        report.add("luatune_export", "failed", None, str(e))
        return None
    report.add("luatune_export", "ok", None, f"{len(manifest['items'])} items in {secs:.1f} s")
    return manifest


def luatune_load(args, root, names):
    """phase=load on WORK/<root>/<name>...: ({name: manifest item}, seconds); raises on a failed run."""
    secs = run_lua(args.runner, args.work, args.device, "phase=load", f"adapter_root={root}",
                   "adapters=" + ",".join(names))
    items = check_files(args.work, f"manifest_load_{root}.json")["items"]
    return {i["name"]: i for i in items}, secs


def luatune_load_own(report, args):
    """Without peft: luatune's own adapters through the load phase, bit-exact against their export."""
    try:
        items, secs = luatune_load(args, "adapters", ["lora", "dora"])
    except Exception as e:
        report.add("luatune_load_adapters", "failed", None, str(e))
        return False
    diff = max(i["max_abs_diff"] for i in items.values())
    ok = diff == 0
    report.add("luatune_load_adapters", "ok" if ok else "failed", diff,
               f"{len(items)} adapters in {secs:.1f} s" if ok else "luatune's own adapters reloaded differ")
    return ok


# ==== the Hugging Face side =======================================================================

def import_hf():
    """(modules, None) or (None, why); peft may be None on its own."""
    # Local directories only: the device machine has no network, so never let the hub client try.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import torch
        import transformers
    except Exception as e:  # ImportError, or a broken install raising something else
        return None, f"transformers not importable ({type(e).__name__}: {e})"
    try:
        import peft
    except Exception:
        peft = None
    return (torch, transformers, peft), None


class HF:
    def __init__(self, torch, transformers, peft, work, device):
        self.torch, self.transformers, self.peft = torch, transformers, peft
        self.work, self.device = work, device
        # transformers 4.56 renamed from_pretrained's torch_dtype to dtype (torch_dtype still works there
        # with a warning); before it, an unknown dtype= would be ignored and the config's dtype used.
        version = tuple(int(x) for x in transformers.__version__.split(".")[:2] if x.isdigit())
        self.dtype_kw = "dtype" if version >= (4, 56) else "torch_dtype"
        # Full float32 matmuls (no TF32), as LibTorch's default on luatune's side.
        torch.set_float32_matmul_precision("highest")
        transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bar per model in the log

    def path(self, rel):
        return os.path.join(self.work, rel)

    def load_logits(self, rel):
        """A luatune torch.save dict. LibTorch's pickler tags typed dicts with torch.jit._pickle.
        restore_type_tag, which weights_only loading must be told is safe."""
        torch = self.torch
        from torch.jit._pickle import restore_type_tag
        try:
            with torch.serialization.safe_globals([restore_type_tag]):
                return torch.load(self.path(rel), map_location="cpu", weights_only=True)
        except Exception:  # another global in a later LibTorch: the file is our own, read it plainly
            return torch.load(self.path(rel), map_location="cpu", weights_only=False)

    def model(self, rel, dtype):
        """A luatune-saved directory in transformers, the reference maths (eager attention, as
        scripts/make_hf_fixtures.py uses), failing on any weight not read as written."""
        m, info = self.transformers.AutoModelForCausalLM.from_pretrained(
            self.path(rel), **{self.dtype_kw: dtype}, attn_implementation="eager", output_loading_info=True)
        tied = getattr(m.config, "tie_word_embeddings", False)
        problems = {}
        for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
            names = info.get(key) if isinstance(info, dict) else getattr(info, key, None)
            names = [str(x) for x in (names or []) if not (tied and "lm_head" in str(x))]
            if names:
                problems[key] = sorted(names)
        if problems:
            raise RuntimeError(f"{rel}: weights not read as written: {problems}")
        got = next(m.parameters()).dtype
        if got != dtype:
            raise RuntimeError(f"{rel}: loaded as {got}, asked for {dtype}")
        return m.to(self.device).eval()

    def logits(self, model, ids):
        with self.torch.no_grad():
            return model(input_ids=ids.to(self.device)).logits.float().cpu()

    def diff(self, a, b):
        if tuple(a.shape) != tuple(b.shape):
            raise RuntimeError(f"logits shape {tuple(a.shape)} vs {tuple(b.shape)}")
        return (a.float() - b.float()).abs().max().item()

    # 1-3: luatune-saved models in transformers.
    def check_model(self, item, dtype_name):
        torch = self.torch
        saved = self.load_logits(item["logits"])
        m = self.model(item["model"], getattr(torch, dtype_name))
        got = self.logits(m, saved["ids"])
        d = self.diff(got, saved["logits_" + dtype_name])
        detail = f"{type(m).__name__} {dtype_name}"
        if "logits_adapted" in saved:  # merged: also against the adapted forward before the merge
            d2 = self.diff(got, saved["logits_adapted"])
            detail += f"; vs luatune before the merge {d2:.3g}"
            d = max(d, d2)
        return d, TOL_FLOAT32 if dtype_name == "float32" else TOL_BFLOAT16, detail

    # 4: luatune adapters in peft.
    def check_peft_load(self, item):
        saved = self.load_logits(item["logits"])
        base = self.model(item["base"], self.torch.float32)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pm = self.peft.PeftModel.from_pretrained(base, self.path(item["adapter"]))
        keys = [str(w.message) for w in caught
                if any(k in str(w.message).lower() for k in ("missing adapter keys", "unexpected keys"))]
        if keys:
            raise RuntimeError("; ".join(keys)[:400])
        pm = pm.to(self.device).eval()
        n = sum(1 for name, _ in pm.named_parameters() if "lora_A" in name)
        got = self.logits(pm, saved["ids"])
        base_diff = self.diff(got, self.load_logits("logits/llama.pt")["logits_float32"])
        if base_diff == 0:
            raise RuntimeError("peft's output equals the base model's: the adapter did nothing")
        return self.diff(got, saved["logits_float32"]), TOL_FLOAT32, f"{n} adapted Linears in peft"

    # 5: peft adapters in luatune; this half makes them, the runner's phase=load reads them.
    def make_peft_adapter(self, name, ids):
        torch, peft = self.torch, self.peft
        base = self.model("models/llama", torch.float32)
        pm = peft.get_peft_model(base, peft.LoraConfig(task_type="CAUSAL_LM", **PEFT_ADAPTERS[name]))
        gen = torch.Generator().manual_seed(11)
        with torch.no_grad():  # B = 0 and m = ||W|| are identities: make the adapter matter
            for pname, p in pm.named_parameters():
                if "lora_B" in pname:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
                elif "lora_magnitude_vector" in pname:
                    p.mul_(1 + 0.1 * torch.randn(p.shape, generator=gen).to(p.device))
        pm.eval()
        out = self.path(f"peft/{name}")
        pm.save_pretrained(out)
        if not os.path.isfile(os.path.join(out, "adapter_model.safetensors")):
            raise RuntimeError(f"peft wrote {sorted(os.listdir(out))}, no adapter_model.safetensors")
        return self.logits(pm, ids)


def check_luatune_load_peft(h, args, name):
    """5: peft makes and saves the adapter, the runner's phase=load reads it with lora.load."""
    want = h.make_peft_adapter(name, h.load_logits("logits/llama.pt")["ids"])
    items, _ = luatune_load(args, "peft", [name])
    item = items[name]
    got = h.load_logits(item["logits"])["logits_float32"]
    return h.diff(got, want), TOL_FLOAT32, f"lora.load read r {item['r']}, dora {str(item['dora']).lower()}"


# ==== main ========================================================================================

def versions(runner, hf):
    v = {"python": platform.python_version(), "platform": platform.platform()}
    try:
        out = subprocess.run([runner, "--version"], capture_output=True, text=True, timeout=60).stdout
        v["luatune"] = "; ".join(out.strip().splitlines()[:4])
    except Exception as e:
        v["luatune"] = f"unknown ({e})"
    mods = {"torch": "torch", "transformers": "transformers", "peft": "peft", "safetensors": "safetensors"}
    for key, mod in mods.items():
        try:
            v[key] = __import__(mod).__version__
        except Exception:
            v[key] = None
    if hf and hf[0].cuda.is_available():
        v["cuda_device"] = hf[0].cuda.get_device_name(0)
    return v


def hf_check_names():
    """Every HF check, in the order they run (the export's items in roundtrip_export.lua's order)."""
    names = []
    for arch in ARCHS:
        names += ["hf_load_" + arch, "hf_load_" + arch + "_bf16"]
    names += ["hf_load_llama_pruned", "hf_load_llama_merged_lora", "hf_load_llama_merged_dora"]
    names += ["peft_load_luatune_lora", "peft_load_luatune_dora"]
    return names + ["luatune_load_peft_" + n for n in PEFT_ADAPTERS]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runner", required=True, help="the luatune runner (build/runner)")
    ap.add_argument("--work", required=True, help="directory for the models, adapters and logits")
    ap.add_argument("--out", required=True, help="the JSON report")
    ap.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when torch sees one, else cpu")
    ap.add_argument("--luatune-only", action="store_true", help="run the luatune side only; exit 3")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 unless every check is ok (failed or skipped checks, a missing transformers or peft)")
    args = ap.parse_args()
    if args.strict and args.luatune_only:
        ap.error("--strict and --luatune-only exclude each other")
    args.runner = os.path.abspath(args.runner)
    args.work = os.path.abspath(args.work)
    os.makedirs(args.work, exist_ok=True)
    for name in OWNED:  # stale files from an earlier run must not pass for this run's
        p = os.path.join(args.work, name)
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.remove(p)

    hf, why = (None, "--luatune-only") if args.luatune_only else import_hf()
    if args.device is None:
        args.device = "cuda" if hf and hf[0].cuda.is_available() else "cpu"
    report = Report()
    print(f"hf_roundtrip: device {args.device}, work {args.work}", flush=True)
    manifest = luatune_export(report, args)

    if hf is None:
        loaded = luatune_load_own(report, args) if manifest else False
        for name in hf_check_names():
            report.add(name, "skipped", None, f"skipped: {why}")
        write_json_atomic(args.out, {"checks": report.checks, "versions": versions(args.runner, None),
                                     "device": args.device})
        if manifest is None or not loaded:
            print("hf_roundtrip: the luatune side failed (see luatune_export / luatune_load in the report)",
                  file=sys.stderr)
            return 1
        if args.strict:
            print(f"hf_roundtrip: --strict: the HF checks cannot run: {why} (with {sys.executable})",
                  file=sys.stderr)
            return 1
        print(f"hf_roundtrip: HF checks skipped: {why}; luatune side ok", file=sys.stderr)
        return EXIT_SKIPPED

    torch, transformers, peft = hf
    h = HF(torch, transformers, peft, args.work, args.device)
    items = (manifest or {}).get("items", [])
    if manifest is None:
        for name in hf_check_names():
            report.add(name, "failed", None, "no luatune export to check")
    for item in items:
        if item["kind"] in ("model", "merged"):
            report.run("hf_load_" + item["name"], lambda i=item: h.check_model(i, "float32"))
        if item["name"] in ARCHS:
            report.run("hf_load_" + item["name"] + "_bf16", lambda i=item: h.check_model(i, "bfloat16"))
    for item in items:
        if item["kind"] == "adapter":
            if peft is None:
                report.add("peft_load_luatune_" + item["name"], "skipped", None, "skipped: peft not importable")
            else:
                report.run("peft_load_luatune_" + item["name"], lambda i=item: h.check_peft_load(i))

    if manifest is not None and peft is None:
        for name in PEFT_ADAPTERS:
            report.add("luatune_load_peft_" + name, "skipped", None, "skipped: peft not importable")
    elif manifest is not None:
        for name in PEFT_ADAPTERS:  # one runner call each, so one refused adapter fails alone
            report.run("luatune_load_peft_" + name, lambda n=name: check_luatune_load_peft(h, args, n))

    write_json_atomic(args.out, {"checks": report.checks, "versions": versions(args.runner, hf),
                                 "device": args.device})
    failed = [c["name"] for c in report.checks if c["status"] == "failed"]
    counts = {s: sum(c["status"] == s for c in report.checks) for s in ("ok", "failed", "skipped")}
    print(f"hf_roundtrip: {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped"
          + (f" ({', '.join(failed)})" if failed else ""), flush=True)
    if args.strict:
        missing = [n for n in hf_check_names() if n not in {c["name"] for c in report.checks}]
        not_ok = [c["name"] for c in report.checks if c["status"] != "ok"] + [n + " (never ran)" for n in missing]
        if not_ok:
            print(f"hf_roundtrip: --strict: not ok: {', '.join(not_ok)}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
