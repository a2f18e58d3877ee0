#!/usr/bin/env python3
"""tests/real_model/smollm2_parity.py MODEL_DIR LUATUNE.json: transformers' side of smollm2_parity.sh. Loads
MODEL_DIR (float32, CPU) with transformers and computes what tests/real_model/smollm2_parity.lua computed
with luatune: the chat-template ids (apply_chat_template, add_generation_prompt), the last position's
logits and every position's argmax, perplexity over /usr/share/common-licenses/GPL-3's first 9000 bytes in windows of 512
tokens (each window's first token unscored, as luatune's Model:perplexity), and greedy answers. Prints
each comparison with its threshold; exit 1 when one fails."""
import json
import math
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

torch.manual_seed(0)
torch.set_num_threads(2)


def main():
    model_dir, ours_path = sys.argv[1], sys.argv[2]
    ours = json.load(open(ours_path, encoding="utf-8"))
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    fails = 0

    def check(name, ok, detail):
        nonlocal fails
        print(("ok   " if ok else "FAIL ") + name + ": " + detail)
        fails += 0 if ok else 1

    q = ours["questions"]
    ids = tok.apply_chat_template([{"role": "user", "content": q[0]}], add_generation_prompt=True, tokenize=True,
                                  return_dict=True)["input_ids"]
    check("chat-template ids equal apply_chat_template's", ids == ours["prompt_ids"], f"{len(ids)} ids")
    with torch.no_grad():
        logits = model(torch.tensor([ours["prompt_ids"]])).logits[0]
    diff = (logits[-1] - torch.tensor(ours["last_logits"])).abs().max().item()
    check("last position's logits within 1e-3", diff <= 1e-3, f"max |diff| {diff:.2e} over {logits.shape[-1]}")
    argmax = logits.argmax(-1).tolist()
    check("every position's argmax equal", argmax == ours["argmax"], f"{len(argmax)} positions")

    prose = open("/usr/share/common-licenses/GPL-3", "rb").read()[:9000].decode("utf-8")
    all_ids = tok(prose, add_special_tokens=False)["input_ids"]
    nll, n = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(all_ids), 512):
            w = all_ids[i:i + 512]
            if len(w) < 2:
                continue
            out = model(torch.tensor([w])).logits[0, :-1].log_softmax(-1)
            nll -= out.gather(1, torch.tensor(w[1:])[:, None]).sum().item()
            n += len(w) - 1
    ppl = math.exp(nll / n)
    rel = abs(ppl - ours["perplexity"]) / ppl
    check("perplexity on GPL-3's prose within 1e-4 (relative)", rel <= 1e-4 and n == ours["perplexity_tokens"],
          f"transformers {ppl:.4f} over {n} tokens, luatune {ours['perplexity']:.4f} over {ours['perplexity_tokens']}")

    for i, question in enumerate(q):
        p = tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True,
                                    return_dict=True)["input_ids"]
        with torch.no_grad():
            g = model.generate(torch.tensor([p]), max_new_tokens=24, do_sample=False,
                               eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)[0].tolist()
        new = g[len(p):]
        if new and new[-1] == tok.eos_token_id:
            new = new[:-1]
        text = tok.decode(new, skip_special_tokens=True)
        check(f"greedy answer {i + 1} equal", text == ours["answers"][i], f"{text!r} vs luatune {ours['answers'][i]!r}")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
