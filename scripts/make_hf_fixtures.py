#!/usr/bin/env python3
"""Golden fixtures for luatune's logits parity test (tests/cpp/test_hf_parity.cpp).

Builds one tiny random model per supported architecture with Hugging Face transformers, saves it
as a normal HF directory, and stores HF's own logits for fixed token ids (float32, and bfloat16 from
the same weights) in expected.safetensors beside it. Run where torch + transformers are installed
(the CUDA machine), then commit the output (a few hundred KB):

    python3 scripts/make_hf_fixtures.py tests/fixtures/hf

The sizes match nothing real on purpose: GQA (4 query heads, 2 KV heads), a Mistral window shorter
than the inputs, Gemma 2 softcaps and alternating windows, Qwen3 q/k norms, Qwen2 biases, Llama 3
RoPE scaling with a small original context so all three frequency bands occur.
"""
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

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
    ids = torch.randint(COMMON["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(1))
    for arch, extra in ARCHS.items():
        torch.manual_seed(0)
        config = AutoConfig.for_model(arch, **COMMON, **extra)
        config._attn_implementation = "eager"  # the reference maths, softcaps and windows included
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
        with torch.no_grad():  # norms init to 1 (Gemma: 0) and biases to 0: make them matter
            for _, p in model.named_parameters():
                if p.dim() == 1:
                    p.add_(torch.randn_like(p) * 0.1)
        out = os.path.join(out_root, arch)
        model.save_pretrained(out, safe_serialization=True)
        with torch.no_grad():
            f32 = model(ids).logits.float()
            bf16 = model.to(torch.bfloat16)(ids).logits.float()
        save_file({"ids": ids.contiguous(), "logits_float32": f32.contiguous(),
                   "logits_bfloat16": bf16.contiguous()},
                  os.path.join(out, "expected.safetensors"),
                  metadata={"format": "pt", "transformers": transformers.__version__,
                            "torch": torch.__version__})
        print(f"{arch}: {out} logits {tuple(f32.shape)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/hf")
