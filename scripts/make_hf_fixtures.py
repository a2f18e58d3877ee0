#!/usr/bin/env python3
"""Fixtures for luatune's logits parity test (tests/cpp/test_hf_parity.cpp), made by the real library.

Builds one tiny random model per supported architecture with Hugging Face transformers, saves it
as a normal HF directory, and stores HF's own logits for fixed token ids (float32, and bfloat16 from
the same weights, both on the CPU) in expected.safetensors beside it:

    python3 scripts/make_hf_fixtures.py OUT_DIR          # OUT_DIR/<arch>/{config.json,model.safetensors,...}

CTest runs it first (the test hf_fixtures, with the pinned environment's python, LUATUNE_PYTHON) into
build/tmp/hf_fixtures, and HFParity.* reads them from there: the fixtures are made by the transformers
version the environment pins on every run, never committed. About 5 s on 2 CPU cores.

The sizes match nothing real on purpose: GQA (4 query heads, 2 KV heads), a Mistral window shorter
than the inputs, Gemma 2 softcaps and alternating windows, Qwen3 q/k norms, Qwen2 biases, Llama 3
RoPE scaling with a small original context so all three frequency bands occur.
Exit status: 0 written; 1 when torch or transformers is not importable (one line saying so) or a
model fails.
"""
import os
import shutil
import sys

try:
    import torch
    import transformers
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM
except Exception as e:  # ImportError, or a broken install raising something else
    sys.exit(f"make_hf_fixtures.py: {sys.executable} cannot import torch, transformers and safetensors "
             f"({type(e).__name__}: {e}); scripts/setup.sh installs them in .venv")

COMMON = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
ARCHS = {
    "llama": dict(rope_theta=500000.0, tie_word_embeddings=True,
                  rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                    high_freq_factor=4.0, original_max_position_embeddings=16)),
    "mistral": dict(sliding_window=5),
    "qwen2": dict(),
    "qwen3": dict(head_dim=8),
    "gemma2": dict(head_dim=16, query_pre_attn_scalar=16, sliding_window=4,
                   attn_logit_softcapping=50.0, final_logit_softcapping=30.0),
}


def main(out_root):
    # transformers 4.56 renamed torch_dtype to dtype (v5 warns on the old name).
    version = tuple(int(x) for x in transformers.__version__.split(".")[:2] if x.isdigit())
    dtype_kw = "dtype" if version >= (4, 56) else "torch_dtype"
    transformers.utils.logging.disable_progress_bar()  # no "Writing model shards" bars in the test log
    ids = torch.randint(COMMON["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(1))
    for arch, extra in ARCHS.items():
        torch.manual_seed(0)
        config = AutoConfig.for_model(arch, **COMMON, **extra)
        config._attn_implementation = "eager"  # the reference maths, softcaps and windows included
        model = AutoModelForCausalLM.from_config(config, **{dtype_kw: torch.float32}).eval()
        with torch.no_grad():  # norms init to 1 (Gemma: 0) and biases to 0: make them matter
            for _, p in model.named_parameters():
                if p.dim() == 1:
                    p.add_(torch.randn_like(p) * 0.1)
        out = os.path.join(out_root, arch)
        shutil.rmtree(out, ignore_errors=True)  # an earlier run's files must not pass for this run's
        model.save_pretrained(out, safe_serialization=True)
        with torch.no_grad():
            f32 = model(ids).logits.float()
            bf16 = model.to(torch.bfloat16)(ids).logits.float()
        # Written last: its presence says the directory is complete.
        save_file({"ids": ids.contiguous(), "logits_float32": f32.contiguous(),
                   "logits_bfloat16": bf16.contiguous()},
                  os.path.join(out, "expected.safetensors"),
                  metadata={"format": "pt", "transformers": transformers.__version__,
                            "torch": torch.__version__})
        print(f"{arch}: {out} logits {tuple(f32.shape)}, transformers {transformers.__version__}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python3 scripts/make_hf_fixtures.py OUT_DIR")
    main(sys.argv[1])
