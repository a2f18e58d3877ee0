#!/usr/bin/env python3
"""bench/gpu/hf_decode.py: the HF transformers side of the generation pair (bench/gpu/decode_bench.lua is
luatune's). A random model of a real shape from bench/gpu/shapes.json (AutoConfig, from_config, SDPA)
generates --new tokens greedily after a --prompt-token prompt with a static KV cache
(cache_implementation="static", as transformers documents for fast decoding; on CUDA the decode step is
compiled with torch.compile when --compile is given); decode tokens/s = (new - 1) / (t_new - t_1), the
prefill timed apart, median of --reps after a warm-up. Writes the JSON decode_bench.lua writes.
Exit status 3, with one line on stderr, when torch or transformers cannot be imported or CUDA is
missing where it is needed.
  python3 bench/gpu/hf_decode.py --shape llama-3.2-1b --device cuda --dtype bf16 --out /tmp/hf-decode.json
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="tiny")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    try:
        import torch
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError as e:
        print("hf_decode: %s" % e, file=sys.stderr)
        return 3
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("hf_decode: needs CUDA", file=sys.stderr)
        return 3
    with open(os.path.join(HERE, "shapes.json")) as f:
        shape = json.load(f)["shapes"][a.shape]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.dtype]
    torch.manual_seed(0)
    config = AutoConfig.for_model(shape["arch"], **shape["config"])
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=dtype).to(a.device).eval()
    if a.compile:
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    ids = torch.randint(3, min(config.vocab_size, 1000), (1, a.prompt), device=a.device)

    def run(n):
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                                 do_sample=False, cache_implementation="static", pad_token_id=0)
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - t0, out.shape[1] - ids.shape[1]

    run(a.new)  # warm-up (and compilation)
    rates, firsts = [], []
    for _ in range(a.reps):
        t1, _ = run(1)
        tn, n = run(a.new)
        rates.append((n - 1) / max(tn - t1, 1e-9))
        firsts.append(t1)
    result = {"library": "hf", "engine": "transformers %s, static cache%s" % (transformers.__version__,
                                                                               ", torch.compile" if a.compile else ""),
              "shape": a.shape, "device": a.device, "dtype": a.dtype, "prompt_tokens": a.prompt, "new_tokens": a.new,
              "tokens_per_s": statistics.median(rates), "prefill_s": statistics.median(firsts), "runs": rates}
    with open(a.out + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(a.out + ".tmp", a.out)
    print("hf_decode: %s on %s: %.1f tokens/s" % (a.shape, a.device, result["tokens_per_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
