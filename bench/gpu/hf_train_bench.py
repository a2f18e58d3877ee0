#!/usr/bin/env python3
"""bench/gpu/hf_train_bench.py: the HF transformers side of the training benchmark pair, and its peers.

The peer of bench/gpu/train_bench.lua (scripts/gpu_validate.py runs both, each in its own process):
a random model of a real shape from bench/gpu/shapes.json (AutoConfig from the same config.json
values, AutoModelForCausalLM.from_config, SDPA attention, non-reentrant gradient checkpointing),
full fine-tuning, LoRA r 16 / alpha 32 on the seven projections (peft), or QLoRA (bitsandbytes NF4,
double quantization, bf16 compute: from_config cannot quantize, so the random model is saved to a
temporary directory and loaded back 4-bit), torch.optim.AdamW, W warm-up then S timed steps on random
tokens. Writes one JSON object with the fields train_bench.lua writes (docs/gpu_bench.md).
--peer picks what runs the model, on the same shapes, data, optimizer and timing:
  hf       transformers + peft (+ bitsandbytes for QLoRA), as above (the default)
  liger    the same with Liger's Triton kernels patched into the Llama classes before the model is
           built (apply_liger_kernel_to_llama: RoPE, RMSNorm, SwiGLU, fused linear cross-entropy)
  unsloth  the random model saved and loaded back through Unsloth's FastLanguageModel (bf16, or 4-bit
           for QLoRA), its get_peft_model adapters and gradient checkpointing; LoRA and QLoRA only

  python3 bench/gpu/hf_train_bench.py --shape llama-3.2-1b --method lora --seq 2048 --batch 1 \\
      --steps 10 --warmup 2 --device cuda --dtype bf16 --out /tmp/hf-1b-lora.json [--peer liger]

Exit status 3, with one line on stderr, when the peer's package (liger_kernel, unsloth: imported first,
before transformers), torch, transformers, peft (LoRA/QLoRA) or bitsandbytes (QLoRA) cannot be imported,
or CUDA is missing where it is needed: the driver reports "skipped" with that line. Out of GPU memory
writes {"status": "oom", "error": ...} and exits 0.
"""
import argparse
import gc
import json
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SKIPPED = 3
# What luatune's targets = "all-linear" adapts in a Llama (host/hw/plan.cpp layer_projections); the
# explicit list is peft's "all-linear" on this architecture and means the same in every peft version.
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# --peer -> the result's "library"
PEERS = {"hf": "hf", "liger": "hf+liger", "unsloth": "unsloth"}
# Unsloth loads a tokenizer with the model: the in-tree byte-level one (the GPU machine has no network)
TOKENIZER = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "bytelevel")


# ---- shapes, counts, FLOPs: plain Python, importable without torch (tests/recipes/test_gpu_bench.sh) ----

def load_shape(name, path=None):
    with open(path or os.path.join(HERE, "shapes.json")) as f:
        shapes = json.load(f)["shapes"]
    if name not in shapes:
        raise SystemExit(f"hf_train_bench: unknown shape '{name}' (shapes.json has {', '.join(sorted(shapes))})")
    return shapes[name]


def projections(c):
    """(in, out) of the seven Linears of one layer."""
    C, I = c["hidden_size"], c["intermediate_size"]
    D = c.get("head_dim") or C // c["num_attention_heads"]
    HD, KVD = c["num_attention_heads"] * D, c.get("num_key_value_heads", c["num_attention_heads"]) * D
    return [(C, HD), (C, KVD), (C, KVD), (HD, C), (C, I), (C, I), (I, C)]


def param_count(c):
    """Dense parameters of a Llama config (no biases): embeddings, the untied head, projections, norms."""
    V, C, L = c["vocab_size"], c["hidden_size"], c["num_hidden_layers"]
    per_layer = sum(i * o for i, o in projections(c)) + 2 * C
    return V * C * (1 if c.get("tie_word_embeddings") else 2) + L * per_layer + C


def lora_param_count(c, r):
    return c["num_hidden_layers"] * sum(r * (i + o) for i, o in projections(c))


def flops_per_token(c, method, lora_params, seq):
    """luatune's MFU numerator (host/hw/profile.cpp, docs/hardware.md "MFU"): full 6N + 12LHQT, LoRA/QLoRA
    4N + 6N_lora + 12LHQT, N = the parameters in matmuls (all but the input embedding; a tied head counts)."""
    V, C = c["vocab_size"], c["hidden_size"]
    n_matmul = param_count(c) - (0 if c.get("tie_word_embeddings") else V * C)
    D = c.get("head_dim") or C // c["num_attention_heads"]
    lhqt = c["num_hidden_layers"] * c["num_attention_heads"] * D * seq
    if method == "full":
        return 6 * n_matmul + 12 * lhqt
    return 4 * n_matmul + 6 * lora_params + 12 * lhqt


def catalog_peak(device_name, path=None):
    """(catalog name, dense bf16 TFLOP/s) of the GPU whose name or alias occurs in device_name as a whole
    word, longest match first: host/hw/catalog.cpp hw_catalog_match. (None, 0) when none matches."""
    with open(path or os.path.join(ROOT, "data", "gpu_catalog.json")) as f:
        gpus = json.load(f)["gpus"]
    name, best, best_len = device_name.lower(), None, 0
    for g in gpus:
        for alias in g.get("aliases", []) + [g["name"]]:
            a = alias.lower()
            if len(a) > best_len and re.search(r"(?<![0-9a-z])" + re.escape(a) + r"(?![0-9a-z])", name):
                best, best_len = g, len(a)
    if best is None:
        return None, 0.0
    peak = best["bf16_tflops"] if best.get("bf16", True) and best["bf16_tflops"] > 0 else best["fp16_tflops"]
    return best["name"], float(peak)


def median(xs):
    s, n = sorted(xs), len(xs)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def write_json_atomic(path, obj):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, allow_nan=False)
        f.write("\n")
    os.replace(tmp, path)


def skip(reason):
    print(f"hf_train_bench: skipped: {reason}", file=sys.stderr)
    sys.exit(SKIPPED)


def one_line(e):
    """An exception as one short line: a skip reason is the last line of stderr."""
    return re.sub(r"\s+", " ", f"{type(e).__name__}: {e}").strip()[:400]


def dist_version(name):
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def import_peer(peer):
    """Imports the peer's own package first (Unsloth patches transformers while it is imported, so it
    must come before it) and returns the versions to record; exit 3 with the import error otherwise."""
    if peer == "liger":
        try:
            import liger_kernel.transformers  # noqa: F401
        except Exception as e:  # not only ImportError: a broken install raises anything
            skip(f"liger_kernel is not importable ({one_line(e)})")
        return {"liger_kernel": dist_version("liger-kernel"), "triton": dist_version("triton")}
    if peer == "unsloth":
        os.environ.setdefault("UNSLOTH_DISABLE_STATISTICS", "1")  # it would fetch a file from the Hub
        try:
            import unsloth  # noqa: F401
        except Exception as e:  # without a GPU it raises NotImplementedError, not ImportError
            skip(f"unsloth is not importable ({one_line(e)})")
        return {d: dist_version(d) for d in ("unsloth", "unsloth_zoo", "trl", "xformers", "bitsandbytes")}
    return {}


def save_tokenizer(path):
    """TOKENIZER into path, with a pad token distinct from eos: without one Unsloth adds a token and
    resizes the embeddings, which would change the shape."""
    shutil.copy(os.path.join(TOKENIZER, "tokenizer.json"), path)
    with open(os.path.join(TOKENIZER, "tokenizer_config.json")) as f:
        cfg = json.load(f)
    cfg["pad_token"] = cfg["bos_token"]
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f)


# ---- the run ----

def build_model(args, shape, torch, transformers, dtype):
    """The random model, its dense parameter count, and whether full fine-tuning runs under autocast."""
    from packaging.version import Version
    from transformers import AutoConfig, AutoModelForCausalLM

    # transformers 4.56 renamed from_config's / from_pretrained's torch_dtype to dtype (the old name warns).
    dtype_kw = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"
    config = AutoConfig.for_model(shape["arch"], **shape["config"])  # rope_scaling: v5 converts it to rope_parameters
    config.use_cache = False
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    want = shape["config"].get("rope_scaling", {}).get("rope_type", "default")
    if rope.get("rope_type", "default") != want:
        raise SystemExit(f"hf_train_bench: the config has RoPE {rope!r}, expected rope_type {want!r}")
    # Full fine-tuning pairs luatune's bf16 weights + fp32 masters and moments (16 bytes a parameter) with
    # fp32 weights under bf16 autocast (also 16 bytes: weights, gradients, two moments), the mixed precision
    # HF's Trainer runs for bf16=True on an fp32 model. LoRA/QLoRA: a bf16 base, adapters fp32 (peft's default).
    mixed = args.method == "full" and dtype == torch.bfloat16
    device = torch.device(args.device)
    if args.peer == "liger":
        from liger_kernel.transformers import apply_liger_kernel_to_llama
        # Before the model exists, so from_config and from_pretrained (QLoRA) both build the patched classes.
        apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True, fused_linear_cross_entropy=True)
    with torch.device(device):  # parameters created and initialised on the device
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa",
                                                 **{dtype_kw: torch.float32 if mixed else dtype})
    params = sum(p.numel() for p in model.parameters())  # tied embeddings count once
    if params != param_count(shape["config"]):
        raise SystemExit(f"hf_train_bench: the model has {params} parameters, the shape {param_count(shape['config'])}")
    if args.peer == "unsloth":
        from unsloth import FastLanguageModel
        with tempfile.TemporaryDirectory(prefix="hf_train_bench_") as tmp:
            model.save_pretrained(tmp)
            save_tokenizer(tmp)
            del model
            gc.collect()
            torch.cuda.empty_cache()
            model, _ = FastLanguageModel.from_pretrained(model_name=tmp, max_seq_length=args.seq, dtype=dtype,
                                                         load_in_4bit=args.method == "qlora")
        model.config.use_cache = False
        # Unsloth's own defaults beyond the shared settings: its gradient checkpointing ("unsloth": each
        # layer recomputed, its input kept in CPU memory) and its kernels.
        model = FastLanguageModel.get_peft_model(model, r=args.r, lora_alpha=args.alpha, lora_dropout=0.0,
                                                 target_modules=LORA_TARGETS, bias="none",
                                                 use_gradient_checkpointing="unsloth", random_state=args.seed)
        FastLanguageModel.for_training(model)
        return model, params, False
    if args.method == "qlora":
        from transformers import BitsAndBytesConfig
        bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                 bnb_4bit_compute_dtype=torch.bfloat16)
        with tempfile.TemporaryDirectory(prefix="hf_train_bench_") as tmp:
            model.save_pretrained(tmp)
            del model
            gc.collect()
            torch.cuda.empty_cache()
            model = AutoModelForCausalLM.from_pretrained(tmp, quantization_config=bnb, attn_implementation="sdpa",
                                                         device_map={"": device.index or 0},
                                                         **{dtype_kw: torch.bfloat16})
        model.config.use_cache = False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if args.method != "full":
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=args.r, lora_alpha=args.alpha, lora_dropout=0.0,
                                                 target_modules=LORA_TARGETS, task_type="CAUSAL_LM"))
    return model, params, mixed


def run(args, shape, result, torch, transformers):
    dtype = {"bf16": torch.bfloat16, "float32": torch.float32}[args.dtype]
    device = torch.device(args.device)
    on_cuda = device.type == "cuda"
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    model, result["params"], mixed = build_model(args, shape, torch, transformers, dtype)
    trainable = [p for p in model.parameters() if p.requires_grad]
    result["trainable_params"] = sum(p.numel() for p in trainable)
    opt = torch.optim.AdamW(trainable, lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    model.train()
    ids = torch.randint(0, shape["config"]["vocab_size"], (args.batch, args.seq), device=device)
    if on_cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()  # luatune's trainer resets at each step: the training peak only
    result["setup_s"] = time.perf_counter() - t0

    times = []
    # --profile: the timed steps traced by torch.profiler with the same ranges as luatune's
    # profile=DIR ("step N", "forward", "backward", "optimizer"), so scripts/gpu/trace_summary.py
    # counts both sides alike.
    prof = None
    rf = torch.profiler.record_function
    for i in range(args.warmup + args.steps):
        if args.profile and i == args.warmup:
            acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if on_cuda else [])
            prof = torch.profiler.profile(activities=acts)
            prof.__enter__()
        t = time.perf_counter()
        with rf("step %d" % (i + 1)):
            with rf("forward"), torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=mixed):
                loss = model(input_ids=ids, labels=ids).loss
            with rf("backward"):
                loss.backward()
            with rf("optimizer"):
                torch.nn.utils.clip_grad_norm_(trainable, 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
            result["loss"] = loss.item() if torch.isfinite(loss) else None
            if on_cuda:
                torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - t)
    if prof is not None:
        prof.__exit__(None, None, None)
        os.makedirs(args.profile, exist_ok=True)
        tmp = os.path.join(args.profile, "trace.json.tmp")
        prof.export_chrome_trace(tmp)
        os.replace(tmp, os.path.join(args.profile, "trace.json"))
    result["step_time_s"] = median(times)
    result["tokens_per_s"] = args.batch * args.seq / result["step_time_s"]
    if on_cuda:
        result["peak_memory_gb"] = torch.cuda.max_memory_allocated(device) / 1e9
        result["peak_memory_kind"] = "cuda_max_allocated"
    else:
        import resource
        result["peak_memory_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # Linux: KiB
        result["peak_memory_kind"] = "process_max_rss"

    lora_params = 0 if args.method == "full" else result["trainable_params"]
    result["flops_per_token"] = flops_per_token(shape["config"], args.method, lora_params, args.seq)
    result["flops_convention"] = "6N+12LHQT" if args.method == "full" else "4N+6N_lora+12LHQT"
    peak = args.peak_tflops
    if on_cuda:
        result["gpu"] = torch.cuda.get_device_name(device)
        if peak <= 0:
            _, peak = catalog_peak(result["gpu"])
    result["peak_tflops"] = peak if peak > 0 else None
    result["mfu"] = result["tokens_per_s"] * result["flops_per_token"] / (peak * 1e12) if peak > 0 else None
    result["status"] = "ok"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="tiny")
    ap.add_argument("--method", choices=["full", "lora", "qlora"], default="full")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=["bf16", "float32"], default="bf16")
    ap.add_argument("--out", required=True)
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="dense peak for MFU; 0 = the catalog's")
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--alpha", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peer", choices=sorted(PEERS), default="hf", help="what runs the model (see above)")
    ap.add_argument("--profile", default="", help="trace the timed steps into DIR/trace.json (torch.profiler)")
    args = ap.parse_args()
    shape = load_shape(args.shape)
    if args.peer == "unsloth" and args.method == "full":
        raise SystemExit("hf_train_bench: --peer unsloth runs lora and qlora only")
    if args.peer != "hf" and shape["arch"] != "llama":
        raise SystemExit(f"hf_train_bench: --peer {args.peer} is wired for Llama shapes only")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is random and local: never ask the Hub

    peer_versions = import_peer(args.peer)
    try:
        import torch
    except ImportError as e:
        skip(f"torch is not importable ({e})")
    try:
        import transformers
    except ImportError as e:
        skip(f"transformers is not importable ({e})")
    versions = dict({"torch": torch.__version__, "transformers": transformers.__version__}, **peer_versions)
    if args.method != "full":
        try:
            import peft
        except ImportError as e:
            skip(f"peft is not importable ({e})")
        versions["peft"] = peft.__version__
    if args.method == "qlora":
        if not torch.cuda.is_available():
            skip("QLoRA needs CUDA (bitsandbytes 4-bit)")
        try:
            import bitsandbytes
        except ImportError as e:
            skip(f"bitsandbytes is not importable ({e})")
        versions["bitsandbytes"] = bitsandbytes.__version__
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        skip("CUDA is not available to torch")
    if args.peer != "hf" and not args.device.startswith("cuda"):
        skip(f"--peer {args.peer} needs CUDA (Triton kernels)")

    result = {"library": PEERS[args.peer], "shape": args.shape, "method": args.method, "seq": args.seq,
              "batch": args.batch, "steps": args.steps, "warmup": args.warmup, "device": args.device,
              "dtype": args.dtype, "versions": versions}
    try:
        run(args, shape, result, torch, transformers)
    except (torch.cuda.OutOfMemoryError, RuntimeError) as e:
        msg = str(e)
        if not isinstance(e, torch.cuda.OutOfMemoryError) and "out of memory" not in msg.lower():
            raise
        result["status"] = "oom"
        result["error"] = msg.splitlines()[0][:400] if msg else type(e).__name__
    write_json_atomic(args.out, result)
    print(f"hf_train_bench {PEERS[args.peer]} {args.shape} {args.method}: {result['status']}, "
          f"{result.get('tokens_per_s', 0):.1f} tokens/s, peak {result.get('peak_memory_gb', 0):.3f} GB -> {args.out}")


if __name__ == "__main__":
    main()
