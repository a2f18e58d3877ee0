#!/usr/bin/env python3
"""tests/tools/gguf_hostile.py OUT_DIR: writes small GGUF files that are truncated or hostile (bad
counts, string lengths, types, offsets, dimensions, alignment), built byte by byte from the GGUF v3
layout (docs/gguf.md, "File layout"), plus the valid file they are made from (base.gguf). Prints one
line per file: NAME<TAB>what the reader must say (a substring of its one-line error). Used by
tests/cli/test_limits.sh, which runs `runner convert` on each."""
import os
import struct
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)

U32, U64, STR, ARR = 4, 10, 8, 9


def s(text):  # a GGUF string: u64 length, bytes
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, vtype, payload):
    return s(key) + struct.pack("<I", vtype) + payload


def tensor_info(name, dims, ttype, offset):
    return s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<II", ttype, 0)[:4] + struct.pack("<Q", offset)


def build(n_tensors=None, n_kv=None, kvs=None, infos=None, data=None, version=3, magic=b"GGUF", align=32):
    kvs = kvs if kvs is not None else base_kvs()
    infos = infos if infos is not None else base_infos()
    head = magic + struct.pack("<I", version)
    head += struct.pack("<QQ", len(infos) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(infos)
    body += b"\0" * ((-len(body)) % align)
    return body + (data if data is not None else base_data())


def base_kvs():
    return [kv("general.architecture", STR, s("llama")),
            kv("llama.block_count", U32, struct.pack("<I", 1)),
            kv("tokenizer.ggml.tokens", ARR, struct.pack("<IQ", STR, 2) + s("a") + s("b"))]


# token_embd.weight: F32 (type 0), 4 x 2 = 32 bytes at offset 0; blk.0.attn_q.weight: Q8_0 (type 8),
# one block of 32 = 34 bytes at offset 32.
def base_infos(q_offset=32, q_type=8, q_dims=(32, 1), embd_dims=(4, 2)):
    return [tensor_info("token_embd.weight", list(embd_dims), 0, 0),
            tensor_info("blk.0.attn_q.weight", list(q_dims), q_type, q_offset)]


def base_data():
    return struct.pack("<8f", *range(8)) + struct.pack("<e", 0.5) + bytes(range(32))


cases = {}
base = build()
cases["base"] = (base, "no metadata key 'llama.embedding_length'")  # valid, but no model in it
for cut in (3, 12, 30, 60, 100, len(base) - 40, len(base) - 1):
    cases["truncated_%d" % cut] = (base[:cut], "bad GGUF file")
cases["magic"] = (build(magic=b"GGJT"), "no GGUF magic")
cases["version_2"] = (build(version=2), "no metadata key")  # v2 has v3's layout: read, as llama.cpp does
cases["n_tensors_huge"] = (build(n_tensors=1 << 62), "bad GGUF file")
cases["n_kv_huge"] = (build(n_kv=1 << 61), "bad GGUF file")
cases["key_length_huge"] = (build(kvs=[struct.pack("<Q", 1 << 62) + b"general"]), "bad GGUF file")
cases["string_length_huge"] = (build(kvs=[kv("general.architecture", STR, struct.pack("<Q", 1 << 62) + b"llama")]),
                               "bad GGUF file")
cases["array_count_huge"] = (build(kvs=[kv("tokenizer.ggml.tokens", ARR, struct.pack("<IQ", STR, 1 << 60) + s("a"))]),
                             "bad GGUF file")
cases["array_of_arrays_deep"] = (build(kvs=[kv("x", ARR, struct.pack("<IQ", ARR, 1) * 4000)]), "bad GGUF file")
cases["value_type_99"] = (build(kvs=[kv("general.architecture", 99, s("llama"))]), "bad GGUF file")
cases["array_type_99"] = (build(kvs=[kv("x", ARR, struct.pack("<IQ", 99, 1) + b"\0" * 8)]), "bad GGUF file")
cases["tensor_type_999"] = (build(infos=base_infos(q_type=999)), "bad GGUF file")
cases["tensor_dims_9"] = (build(infos=[tensor_info("t", [1] * 9, 0, 0)], data=b"\0" * 4), "bad GGUF file")
cases["tensor_dim_huge"] = (build(infos=base_infos(embd_dims=(1 << 40, 1 << 40))), "bad GGUF file")
cases["tensor_dim_zero"] = (build(infos=base_infos(embd_dims=(4, 0))), "no metadata key")  # empty: legal
cases["tensor_offset_past_end"] = (build(infos=base_infos(q_offset=1 << 40)), "bad GGUF file")
cases["tensor_offset_misaligned"] = (build(infos=base_infos(q_offset=33)), "bad GGUF file")
cases["tensor_q8_not_whole_blocks"] = (build(infos=base_infos(q_dims=(31, 1))), "bad GGUF file")
cases["tensor_name_length_huge"] = (build(infos=[struct.pack("<Q", 1 << 62) + b"t"]), "bad GGUF file")
cases["tensor_count_past_infos"] = (build(n_tensors=3), "bad GGUF file")
cases["tensor_name_duplicate"] = (build(infos=[tensor_info("t", [8], 0, 0), tensor_info("t", [8], 0, 32)],
                                        data=b"\0" * 64), "bad GGUF file")
cases["alignment_zero"] = (build(kvs=base_kvs() + [kv("general.alignment", U32, struct.pack("<I", 0))]), "bad GGUF file")
cases["alignment_not_power_of_two"] = (build(kvs=base_kvs() + [kv("general.alignment", U32, struct.pack("<I", 48))]),
                                       "bad GGUF file")
for name, (data, expect) in cases.items():
    with open(os.path.join(out, name + ".gguf"), "wb") as f:
        f.write(data)
    print(name + "\t" + expect)
