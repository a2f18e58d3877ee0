#!/usr/bin/env python3
"""make_tiny_gguf.py OUT.gguf [--seed N] [--layers N] [--hidden N] [--encode TEXT]

Writes a tiny random Llama as a GGUF v3 file, with the standard library only, so the llama.cpp
harness (generate.mjs) can be proved without luatune's own writer. It is written straight from the
GGUF v3 layout (ggml's docs/gguf.md):

  header     magic "GGUF", u32 version 3, u64 tensor count, u64 metadata kv count
  metadata   per kv: string key, u32 value type, value (arrays: u32 element type, u64 count, items)
  tensors    per tensor: string name, u32 n_dims, u64 ne[n_dims] (ne[0] = the contiguous dimension,
             so a PyTorch [out, in] weight is ne = [in, out]), u32 ggml type, u64 offset into the
             data section (a multiple of general.alignment, default 32)
  padding    zeros up to general.alignment, then the tensor data
  strings    u64 byte length + UTF-8 bytes, no terminator; everything little-endian

The tokenizer is a byte-level BPE ("gpt2" in llama.cpp's terms) trained here on a short inline
text: the 256 byte symbols of GPT-2's bytes_to_unicode, then the merges, then special tokens.
Everything is deterministic for a given --seed: the same arguments give the same bytes.
"""
import argparse
import json
import math
import random
import re
import struct
import sys
from array import array

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# gguf_type
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, \
    T_UINT64, T_INT64, T_FLOAT64 = range(13)
# ggml_type
GGML_F32 = 0
# llama_token_type (tokenizer.ggml.token_type)
TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL, TOK_USER_DEFINED, TOK_UNUSED, TOK_BYTE = 1, 2, 3, 4, 5, 6

CORPUS = """\
The quick brown fox jumps over the lazy dog. A tiny model learns to count: one, two, three, four,
five, six, seven, eight, nine, ten. Three plus four is seven and two plus two is four. What is
three plus four? The answer is seven. The cat sat on the mat, and the dog sat on the log. We train
the model, then we prune the model, then we export the model and run it in llama.cpp. Hello world!
Hello there, how are you? I am fine, thank you. The weather is nice today and the sun is shining.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 100 2024. Questions and answers, statements and stories.
"""

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode character map (the byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def train_bpe(text, n_merges):
    """A plain BPE trainer: split into GPT-2-like words, then merge the most frequent pair (ties
    broken by the pair itself, so the result is deterministic) until n_merges or no pair is left."""
    b2u = bytes_to_unicode()
    words = {}
    for w in re.findall(r" ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+", text):
        key = tuple(b2u[b] for b in w.encode("utf-8"))
        words[key] = words.get(key, 0) + 1
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        a, b = best[0]
        merges.append((a, b))
        new_words = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] = new_words.get(tuple(out), 0) + c
        words = new_words
    return merges


def build_tokenizer(n_merges):
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    merges = train_bpe(CORPUS, n_merges)
    seen = set(tokens)
    for a, b in merges:
        if a + b not in seen:
            tokens.append(a + b)
            seen.add(a + b)
    types = [TOK_NORMAL] * len(tokens)
    for s in SPECIALS:
        tokens.append(s)
        types.append(TOK_CONTROL)
    return tokens, types, [f"{a} {b}" for a, b in merges]


# llama.cpp's pre-tokenizer "default" (LLAMA_VOCAB_PRE_TYPE_DEFAULT): these regexes applied in turn,
# each splitting every fragment left by the one before (the text between matches is kept as its own
# fragment). Written here for ASCII: \p{P} is ASCII punctuation, \p{L} letters, \p{N} digits.
_PUNCT = re.escape("!\"#%&'()*,-./:;?@[\\]_{}") + re.escape("$+<=>^~|")
DEFAULT_PRE = [
    r"[" + _PUNCT + r"]+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)",
    r"[0-9]+",
    r"[0-9][0-9][0-9]",
]


def pre_split(text):
    frags = [text]
    for rx in DEFAULT_PRE:
        out = []
        for f in frags:
            pos = 0
            for m in re.finditer(rx, f):
                if m.start() > pos:
                    out.append(f[pos:m.start()])
                if m.end() > m.start():
                    out.append(m.group())
                pos = m.end()
            if pos < len(f):
                out.append(f[pos:])
        frags = out
    return frags


def encode(text, n_merges):
    """The ids llama.cpp's "gpt2" BPE with pre-tokenizer "default" should give for ASCII text: an
    independent check that the exported vocabulary and merges are read as meant."""
    tokens, _, merges = build_tokenizer(n_merges)
    rank = {tuple(m.split(" ")): i for i, m in enumerate(merges)}
    index = {t: i for i, t in enumerate(tokens)}
    b2u = bytes_to_unicode()
    ids = []
    for w in pre_split(text):
        sym = [b2u[b] for b in w.encode("utf-8")]
        while len(sym) > 1:
            r, i = min((rank.get((a, b), math.inf), i) for i, (a, b) in enumerate(zip(sym, sym[1:])))
            if r == math.inf:
                break
            sym[i:i + 2] = [sym[i] + sym[i + 1]]
        ids += [index[s] for s in sym]
    return ids


class Writer:
    def __init__(self):
        self.kv = []        # (key, bytes of type+value)
        self.tensors = []   # (name, ne, bytes)

    @staticmethod
    def _str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def _scalar(self, t, v):
        fmt = {T_UINT8: "B", T_INT8: "b", T_UINT16: "H", T_INT16: "h", T_UINT32: "I", T_INT32: "i",
               T_FLOAT32: "f", T_BOOL: "?", T_UINT64: "Q", T_INT64: "q", T_FLOAT64: "d"}
        if t == T_STRING:
            return self._str(v)
        return struct.pack("<" + fmt[t], v)

    def add(self, key, t, v):
        self.kv.append((key, struct.pack("<I", t) + self._scalar(t, v)))

    def add_array(self, key, t, values):
        body = b"".join(self._scalar(t, v) for v in values)
        self.kv.append((key, struct.pack("<IIQ", T_ARRAY, t, len(values)) + body))

    def add_tensor(self, name, ne, values):
        assert len(values) == math.prod(ne), name
        data = array("f", values)
        if sys.byteorder != "little":
            data.byteswap()
        self.tensors.append((name, ne, data.tobytes()))

    def write(self, path):
        out = bytearray()
        out += GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv))
        for key, val in self.kv:
            out += self._str(key) + val
        offset = 0
        for name, ne, data in self.tensors:
            out += self._str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
            out += struct.pack("<IQ", GGML_F32, offset)
            offset += (len(data) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        out += b"\0" * (-len(out) % ALIGNMENT)
        for _, _, data in self.tensors:
            out += data + b"\0" * (-len(data) % ALIGNMENT)
        with open(path + ".tmp", "wb") as f:
            f.write(out)
        import os
        os.replace(path + ".tmp", path)
        return len(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ffn", type=int, default=128)
    ap.add_argument("--merges", type=int, default=300)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--encode", metavar="TEXT", help="print the ids this tokenizer gives TEXT (JSON), write nothing")
    args = ap.parse_args()
    if args.encode is not None:
        print(json.dumps(encode(args.encode, args.merges)))
        return

    tokens, types, merges = build_tokenizer(args.merges)
    n_vocab = len(tokens)
    bos = tokens.index("<|endoftext|>")
    eos = tokens.index("<|im_end|>")
    d, nh, nkv, ff = args.hidden, args.heads, args.kv_heads, args.ffn
    hd = d // nh
    assert hd * nh == d and nh % nkv == 0

    w = Writer()
    w.add("general.architecture", T_STRING, "llama")
    w.add("general.name", T_STRING, "luatune tiny random llama")
    w.add("general.alignment", T_UINT32, ALIGNMENT)
    w.add("general.file_type", T_UINT32, 0)  # LLAMA_FTYPE_ALL_F32
    w.add("llama.context_length", T_UINT32, args.ctx)
    w.add("llama.embedding_length", T_UINT32, d)
    w.add("llama.block_count", T_UINT32, args.layers)
    w.add("llama.feed_forward_length", T_UINT32, ff)
    w.add("llama.attention.head_count", T_UINT32, nh)
    w.add("llama.attention.head_count_kv", T_UINT32, nkv)
    w.add("llama.rope.dimension_count", T_UINT32, hd)
    w.add("llama.rope.freq_base", T_FLOAT32, 10000.0)
    w.add("llama.attention.layer_norm_rms_epsilon", T_FLOAT32, 1e-5)
    w.add("llama.vocab_size", T_UINT32, n_vocab)
    w.add("tokenizer.ggml.model", T_STRING, "gpt2")
    w.add("tokenizer.ggml.pre", T_STRING, "default")
    w.add_array("tokenizer.ggml.tokens", T_STRING, tokens)
    w.add_array("tokenizer.ggml.token_type", T_INT32, types)
    w.add_array("tokenizer.ggml.merges", T_STRING, merges)
    w.add("tokenizer.ggml.bos_token_id", T_UINT32, bos)
    w.add("tokenizer.ggml.eos_token_id", T_UINT32, eos)
    w.add("tokenizer.ggml.add_bos_token", T_BOOL, False)
    w.add("tokenizer.chat_template", T_STRING, CHAT_TEMPLATE)

    rng = random.Random(args.seed)

    def rand(n_in, n_out):  # a PyTorch [n_out, n_in] weight, row-major == ggml ne [n_in, n_out]
        s = 1.0 / math.sqrt(n_in)
        return [rng.gauss(0.0, s) for _ in range(n_in * n_out)]

    def norm(n):
        return [1.0 + rng.uniform(-0.1, 0.1) for _ in range(n)]

    w.add_tensor("token_embd.weight", [d, n_vocab], [rng.gauss(0.0, 1.0) for _ in range(d * n_vocab)])
    for i in range(args.layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", [d], norm(d))
        w.add_tensor(p + "attn_q.weight", [d, nh * hd], rand(d, nh * hd))
        w.add_tensor(p + "attn_k.weight", [d, nkv * hd], rand(d, nkv * hd))
        w.add_tensor(p + "attn_v.weight", [d, nkv * hd], rand(d, nkv * hd))
        w.add_tensor(p + "attn_output.weight", [nh * hd, d], rand(nh * hd, d))
        w.add_tensor(p + "ffn_norm.weight", [d], norm(d))
        w.add_tensor(p + "ffn_gate.weight", [d, ff], rand(d, ff))
        w.add_tensor(p + "ffn_up.weight", [d, ff], rand(d, ff))
        w.add_tensor(p + "ffn_down.weight", [ff, d], rand(ff, d))
    w.add_tensor("output_norm.weight", [d], norm(d))
    w.add_tensor("output.weight", [d, n_vocab], rand(d, n_vocab))
    size = w.write(args.out)
    print(f"wrote {args.out}: {size} bytes, {len(w.tensors)} tensors, vocab {n_vocab} "
          f"({len(merges)} merges), {args.layers} layers, hidden {d}", file=sys.stderr)


if __name__ == "__main__":
    main()
