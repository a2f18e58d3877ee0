#!/usr/bin/env python3
"""tests/recipes/gguf_check.py: compare luatune's greedy ids (gguf_greedy.lua's JSON lines) with
llama.cpp's on an exported GGUF file (tests/reference/llama/generate.mjs).

usage: gguf_check.py LUATUNE.jsonl MODEL.gguf [--first N]

Each luatune line is replayed twice: by prompt ids (the model alone) and by text (llama.cpp
tokenizes it from the file's vocabulary; a "chat" line is rendered by llama.cpp's own Jinja engine
from the file's chat template), and both must give luatune's prompt ids and generated ids. With
--first N only the first N generated ids must agree (f16 / q8_0 files). Prints one line per check;
exits 1 on any difference.
"""
import json
import subprocess
import sys

args = sys.argv[1:]
first = None
if "--first" in args:
    i = args.index("--first")
    first = int(args[i + 1])
    del args[i:i + 2]
lua_path, gguf = args
rows = [json.loads(l) for l in open(lua_path) if l.startswith('{"kind"')]
assert rows, f"{lua_path}: no luatune rows"

requests = []
for k, r in enumerate(rows):
    n = len(r["ids"]) if r["finish_reason"] != "eos" else len(r["ids"]) + 1
    n = max(n, 1)
    requests.append({"id": f"{k}:ids", "prompt_ids": r["prompt_ids"], "max_new_tokens": n})
    if r["kind"] == "chat":
        requests.append({"id": f"{k}:chat", "prompt": r["prompt"], "chat": True, "max_new_tokens": n})
    else:
        requests.append({"id": f"{k}:text", "prompt": r["prompt"], "add_bos": r["add_bos"], "max_new_tokens": n})

out = subprocess.run(["node", "tests/reference/llama/generate.mjs", gguf], input="".join(json.dumps(q) + "\n" for q in requests),
                     capture_output=True, text=True, timeout=600)
if out.returncode != 0:
    sys.exit(f"generate.mjs failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
answers = {a.get("id"): a for a in (json.loads(l) for l in out.stdout.splitlines() if l.startswith("{"))}

bad = 0
for k, r in enumerate(rows):
    for how in ("ids", "chat" if r["kind"] == "chat" else "text"):
        a = answers.get(f"{k}:{how}")
        label = f"{gguf.split('/')[-1]} {r['kind']} {json.dumps(r['prompt'])[:40]} by {how}"
        if a is None or "error" in a:
            print(f"FAIL {label}: {a}")
            bad += 1
            continue
        want, got = r["ids"], a["ids"]
        if first is not None:
            want, got = want[:first], got[:first]
        ok_prompt = a["prompt_ids"] == r["prompt_ids"]
        ok_ids = got[:len(want)] == want
        if ok_prompt and ok_ids:
            print(f"ok   {label}: {got}")
        else:
            bad += 1
            print(f"FAIL {label}: prompt ids luatune {r['prompt_ids']} llama.cpp {a['prompt_ids']}; "
                  f"generated luatune {want} llama.cpp {got}")
sys.exit(1 if bad else 0)
