#!/usr/bin/env python3
"""bench/hf_generate.py MODEL_DIR [--threads T] [--new-tokens N] [--prompt-tokens P] [--reps R]: transformers'
generate on the CPU in float32, greedy with its dynamic KV cache, as bench/decode.sh's peer. The prompt is the
text bench/gguf_generate.lua repeats, cut to P tokens. Decode tok/s = (N - 1) / (t_N - t_1) (prefill not
counted), median of R runs after a warm-up; prefill_plus_one_s = t_1. One JSON line on stdout."""
import argparse
import json
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        print("hf_generate: %s" % e, file=sys.stderr)
        return 3
    torch.set_num_threads(a.threads)
    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, torch_dtype=torch.float32).eval()
    sentence = "The quick brown fox jumps over the lazy dog. Three plus four is seven. "
    text = sentence
    while len(tok(text)["input_ids"]) < a.prompt_tokens:
        text += sentence
    ids = torch.tensor([tok(text)["input_ids"][:a.prompt_tokens]])

    def run(n):
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                                 do_sample=False, pad_token_id=tok.eos_token_id)
        return time.perf_counter() - t0, out.shape[1] - ids.shape[1]

    run(a.new_tokens)  # warm-up
    rates, t1s = [], []
    for _ in range(a.reps):
        t1, _ = run(1)
        tn, n = run(a.new_tokens)
        rates.append((n - 1) / (tn - t1))
        t1s.append(t1)
    import transformers
    print(json.dumps({"engine": "transformers %s" % transformers.__version__, "threads": a.threads,
                      "prompt_tokens": int(ids.shape[1]), "new_tokens": a.new_tokens,
                      "gen_tok_s": statistics.median(rates), "prefill_plus_one_s": statistics.median(t1s),
                      "runs": [round(r, 2) for r in rates]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
