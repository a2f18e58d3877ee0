#!/usr/bin/env python3
"""test_harness.py [WORKDIR]: proves the llama.cpp reference harness (generate.mjs) on a tiny random
Llama written by make_tiny_gguf.py, before luatune's own GGUF writer is involved:
  - the generator is deterministic (same bytes twice);
  - --info reports what llama.cpp itself read (architecture, n_layer, vocabulary, tokenizer);
  - llama.cpp's tokenization of ASCII texts equals make_tiny_gguf.py's independent BPE;
  - greedy generation from token ids, text (add_bos) and the chat template (both renderers) runs,
    never errors, and gives the same ids within a process and across two processes.
Run by tests/reference/test_llama_ref.sh (CTest llama_cpp_reference)."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(args, stdin=None):
    r = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "LLAMA_THREADS": os.environ.get("LLAMA_THREADS", "1")})
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)} exited {r.returncode}\n{r.stderr[-2000:]}")
    return r.stdout


def main():
    work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="llama_ref_")
    os.makedirs(work, exist_ok=True)
    gen = [sys.executable, os.path.join(HERE, "make_tiny_gguf.py")]
    node = ["node", os.path.join(HERE, "generate.mjs")]
    model = os.path.join(work, "tiny.gguf")

    run(gen + [model])
    run(gen + [model + ".2"])
    with open(model, "rb") as a, open(model + ".2", "rb") as b:
        check(a.read() == b.read(), "make_tiny_gguf.py writes the same bytes twice")
    os.remove(model + ".2")

    info = json.loads(run(node + [model, "--info"]))
    lc, g = info["llama_cpp"], info["gguf"]
    check(g["architecture"] == "llama", f"--info architecture llama (got {g['architecture']})")
    check(g["n_layer"] == 2 and g["embedding_length"] == 64, "--info n_layer 2, hidden 64")
    check(g["tokenizer_model"] == "gpt2" and g["tokenizer_pre"] == "default", "--info tokenizer gpt2/default")
    check(lc["n_vocab"] == g["vocab_size"] and lc["n_vocab"] > 300, f"llama.cpp's n_vocab {lc['n_vocab']} = the file's {g['vocab_size']}")
    check(lc["vocab_type"] == "bpe" and lc["n_embd"] == 64, "llama.cpp: BPE vocabulary, n_embd 64")
    log = "\n".join(lc["log"])
    for needle in ("print_info: arch                  = llama", "print_info: n_layer               = 2",
                   "print_info: n_head_kv             = 2", "print_info: vocab type            = BPE"):
        check(needle in log, f"llama.cpp's log has '{needle}'")
    if not all(n in log for n in ("print_info: arch", "print_info: n_layer")):
        print("llama.cpp's log as --info kept it (first 40 lines):\n  " + "\n  ".join(lc["log"][:40]), file=sys.stderr)
    check(not lc["warnings"], f"no model warnings ({lc['warnings']})")
    bos, eos = g["bos_token_id"], g["eos_token_id"]
    check(lc["bos"] == bos and lc["eos"] == eos, "llama.cpp's BOS/EOS are the file's")

    for text in ["Hello world! Three plus four is seven. The 2024 model, 12 numbers",
                 "What is (3+4)?  The answer: seven... it's 7!", "x = 12345; y=6 -- done.\nok"]:
        want = json.loads(run(gen + ["-", "--encode", text]))
        got = json.loads(run(node + [model, "--tokenize", text]))["ids"]
        check(got == want, f"llama.cpp tokenizes {text!r} as the generator's BPE: {got} vs {want}")

    reqs = [
        {"id": "ids1", "prompt_ids": [326, 416, 33, 406, 291], "max_new_tokens": 16, "ignore_eos": True},
        {"id": "ids2", "prompt_ids": [bos, 87, 104, 264, 265, 340, 291, 279, 63], "max_new_tokens": 16, "ignore_eos": True},
        {"id": "ids3", "prompt_ids": [10], "max_new_tokens": 24, "ignore_eos": True},
        {"id": "stop", "prompt_ids": [326, 416, 33], "max_new_tokens": 40},
        {"id": "text", "prompt": "Three plus four is", "add_bos": True, "max_new_tokens": 8, "ignore_eos": True},
        {"id": "chat", "prompt": "What is three plus four?", "chat": True, "max_new_tokens": 8, "ignore_eos": True},
        {"id": "chat_nlc", "prompt": "What is three plus four?", "chat": True, "chat_renderer": "node-llama-cpp",
         "max_new_tokens": 8, "ignore_eos": True},
        {"id": "ids1", "prompt_ids": [326, 416, 33, 406, 291], "max_new_tokens": 16, "ignore_eos": True},
    ]
    stdin = "".join(json.dumps(r) + "\n" for r in reqs)
    outs = []
    for _ in range(2):
        lines = [json.loads(l) for l in run(node + [model], stdin).splitlines() if l.strip()]
        check(len(lines) == len(reqs), f"one answer per request ({len(lines)} for {len(reqs)})")
        for o in lines:
            o.pop("seconds", None)
        outs.append(lines)
    a = {o.get("id"): o for o in outs[0]}
    for o in outs[0]:
        check("error" not in o, f"request {o.get('id')} answered without error: {o.get('error')}")
    check(outs[0] == outs[1], "two processes give the same answers")
    check(outs[0][0] == outs[0][-1], "the same request twice in one process gives the same ids")
    n_vocab = lc["n_vocab"]
    for o in outs[0]:
        check(all(0 <= t < n_vocab for t in o.get("ids", [])), f"{o.get('id')}: ids in the vocabulary")
    for k in ("ids1", "ids2", "ids3", "text", "chat"):
        want = next(r["max_new_tokens"] for r in reqs if r["id"] == k)
        check(len(a[k]["ids"]) == want and a[k]["finish_reason"] == "length", f"{k}: {want} tokens with ignore_eos")
    check(a["stop"]["finish_reason"] in ("eos", "length"), "stop: a finish reason")
    if a["stop"]["finish_reason"] == "eos":
        check(not set(a["stop"]["ids"]) & {bos, eos}, "stop: the EOG token is not in ids")
    check(len(set(map(tuple, (a[k]["ids"] for k in ("ids1", "ids2", "ids3"))))) == 3, "different prompts, different ids")
    check(a["text"]["prompt_ids"][0] == bos, "add_bos prepends the BOS id")
    check(a["chat"]["prompt_text"] == "<|im_start|>user\nWhat is three plus four?<|im_end|>\n<|im_start|>assistant\n",
          f"the chat template renders as written: {a['chat']['prompt_text']!r}")
    check(a["chat"]["prompt_ids"][0] == n_vocab - 2 and a["chat"]["prompt_ids"].count(n_vocab - 1) == 1,
          "the chat prompt's <|im_start|>/<|im_end|> are parsed as special tokens")
    check(a["chat"]["prompt_ids"] == a["chat_nlc"]["prompt_ids"] and a["chat"]["ids"] == a["chat_nlc"]["ids"],
          "llama.cpp's Jinja and node-llama-cpp's chat wrapper give the same prompt and ids")

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print(f"llama_cpp_reference: all checks passed ({work}); ids1 -> {a['ids1']['ids']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
