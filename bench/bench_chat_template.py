#!/usr/bin/env python3
"""bench/bench_chat_template.py TOKENIZER_DIR DATA.jsonl [CHAT_TEMPLATE_FILE] [REPEAT]: transformers'
side of bench/bench_chat_template.sh. Renders and tokenizes every conversation of DATA.jsonl with
apply_chat_template(tokenize=True, return_dict=True) on one thread (return_assistant_tokens_mask=True
where the template has {% generation %} blocks, the only masks transformers gives), REPEAT times (default
3) after a warm-up pass, and prints the best pass in bench_chat_template's format."""
import json
import os
import re
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")

from transformers import AutoTokenizer  # noqa: E402


def main():
    tok_dir, data = sys.argv[1], sys.argv[2]
    template = open(sys.argv[3], encoding="utf-8").read() if len(sys.argv) > 3 and sys.argv[3] else None
    repeat = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    tok = AutoTokenizer.from_pretrained(tok_dir)
    source = template or tok.chat_template
    masks = bool(re.search(r"\{%-?\s*generation\s*-?%\}", source))
    conversations = [json.loads(line)["messages"] for line in open(data, encoding="utf-8") if line.strip()]
    best, tokens, targets = 1e30, 0, 0
    for rep in range(repeat + 1):
        t0 = time.perf_counter()
        tokens = targets = 0
        for messages in conversations:
            out = tok.apply_chat_template(messages, chat_template=template, tokenize=True, return_dict=True,
                                          return_assistant_tokens_mask=masks)
            tokens += len(out["input_ids"])
            if masks:
                targets += sum(out["assistant_masks"])
        s = time.perf_counter() - t0
        if rep > 0:
            best = min(best, s)
    print(f"conversations={len(conversations)} seconds={best:.4f} tokens={tokens} targets={targets} "
          f"masks={'generation' if masks else 'none'}")


if __name__ == "__main__":
    main()
