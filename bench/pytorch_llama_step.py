#!/usr/bin/env python3
"""bench/pytorch_llama_step.py METHOD VOCAB [STEPS WARMUP] [--paced] [--rows=4] [--length=256]: the
PyTorch eager peer of bench/llama_step.lua.

Plain PyTorch (the environment's torch 2.11: the LibTorch luatune links) on the same random fp32
Llama: hidden 512, 4 layers, GQA 8 query / 2 KV heads (head_dim 64), intermediate 1408, untied LM
head, batch 4 x 256 tokens (--rows, --length: another batch, as llama_step.lua's rows=, length=). The maths follow host/model/transformer.cpp: RMSNorm in fp32,
rotate-half RoPE, KV heads repeated, causal scaled_dot_product_attention (what
host/model/attention.h calls without a softcap), SwiGLU MLP.
Loss: F.cross_entropy on the full (B*T, V) logits, next-token targets, last position ignored.
Step: backward, clip_grad_norm_(1.0), torch.optim.AdamW (weight decay 0, as luatune's default),
zero_grad(set_to_none=True). METHOD full trains every weight; lora freezes them and adds LoRA r 16,
alpha 32 on every linear layer of the decoder (q, k, v, o, gate, up, down; not the LM head), as
PEFT's "all-linear" and luatune's lora.apply do.
--model=DIR: a real Hugging Face model directory instead (SmolLM2-135M-Instruct in CI's bench
figures): transformers' AutoModelForCausalLM in float32 with SDPA attention, LoRA by peft
(r 16, alpha 32, "all-linear"), the loss as transformers computes it from labels; VOCAB is then the
model's (0 reads it from the config); the same optimizer step.
Prints one line: RESULT side=pytorch ... step_s=<median of the timed steps>. --paced: after the
warm-up, READY, then one timed step (a STEP line) per line read from stdin, until end of input.
"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HIDDEN, LAYERS, HEADS, KV_HEADS, INTERMEDIATE = 512, 4, 8, 2, 1408
ROWS, LENGTH, EPS, THETA = 4, 256, 1e-6, 10000.0


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)


class LoRALinear(nn.Module):
    """A frozen nn.Linear plus scale * B(A(x)); B starts at zero, A as nn.Linear's default init."""

    def __init__(self, base, r=16, alpha=32):
        super().__init__()
        self.base = base
        self.base.weight.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.scale = alpha / r

    def forward(self, x):
        return self.base(x) + F.linear(F.linear(x, self.lora_A), self.lora_B) * self.scale


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = HIDDEN // HEADS
        self.q_proj = nn.Linear(HIDDEN, HEADS * self.head_dim, bias=False)
        self.k_proj = nn.Linear(HIDDEN, KV_HEADS * self.head_dim, bias=False)
        self.v_proj = nn.Linear(HIDDEN, KV_HEADS * self.head_dim, bias=False)
        self.o_proj = nn.Linear(HEADS * self.head_dim, HIDDEN, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        D = self.head_dim
        q = self.q_proj(x).view(B, T, HEADS, D).transpose(1, 2)     # (B, H, T, D)
        k = self.k_proj(x).view(B, T, KV_HEADS, D).transpose(1, 2)  # (B, KV, T, D)
        v = self.v_proj(x).view(B, T, KV_HEADS, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)  # (B, H, T, D)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(D))  # (B, H, T, D)
        return self.o_proj(a.transpose(1, 2).reshape(B, T, HEADS * D))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.up_proj = nn.Linear(HIDDEN, INTERMEDIATE, bias=False)
        self.down_proj = nn.Linear(INTERMEDIATE, HIDDEN, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = RMSNorm(HIDDEN)
        self.self_attn = Attention()
        self.post_attention_layernorm = RMSNorm(HIDDEN)
        self.mlp = MLP()

    def forward(self, h, cos, sin):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin)
        return h + self.mlp(self.post_attention_layernorm(h))


class Llama(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, HIDDEN)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = RMSNorm(HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, vocab, bias=False)
        for mod in self.modules():  # HF's initialisation: N(0, 0.02)
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, std=0.02)
        D = HIDDEN // HEADS
        inv_freq = 1.0 / THETA ** (torch.arange(0, D, 2).float() / D)
        freqs = torch.arange(LENGTH).float()[:, None] * inv_freq[None, :]  # (T, D/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, ids):
        T = ids.shape[1]
        cos, sin = self.cos[:T], self.sin[:T]
        h = self.embed_tokens(ids)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.lm_head(self.norm(h))  # (B, T, V)


def add_lora(model):
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.layers:
        for parent, names in ((layer.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
                              (layer.mlp, ("gate_proj", "up_proj", "down_proj"))):
            for name in names:
                setattr(parent, name, LoRALinear(getattr(parent, name)))


def main():
    global ROWS, LENGTH
    args = []
    paced = False
    model_dir = ""
    for a in sys.argv[1:]:
        if a == "--paced":
            paced = True
        elif a.startswith("--model="):
            model_dir = a.split("=", 1)[1]
        elif a.startswith("--rows="):
            ROWS = int(a.split("=", 1)[1])
        elif a.startswith("--length="):
            LENGTH = int(a.split("=", 1)[1])
        else:
            args.append(a)
    method, vocab = args[0], int(args[1])
    steps = int(args[2]) if len(args) > 2 else 3
    warmup = int(args[3]) if len(args) > 3 else 1
    if method not in ("full", "lora"):
        sys.exit("pytorch_llama_step.py: METHOD must be full or lora, got " + method)
    torch.set_num_threads(2)
    torch.manual_seed(0)
    if model_dir:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa")
        model.train()
        vocab = model.config.vocab_size
        if method == "lora":
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                                                     target_modules="all-linear"))
    else:
        model = Llama(vocab)
        if method == "lora":
            add_lora(model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
    ids = torch.randint(0, vocab, (ROWS, LENGTH))
    labels = torch.cat((ids[:, 1:], torch.full((ROWS, 1), -100)), dim=1)

    def timed_step():
        t0 = time.perf_counter()
        if model_dir:  # transformers shifts the labels itself
            loss = model(input_ids=ids, labels=ids).loss
        else:
            logits = model(ids)
            loss = F.cross_entropy(logits.view(-1, vocab), labels.view(-1), ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    tag = f"side=pytorch method={method} vocab={vocab}"
    for _ in range(warmup):
        timed_step()
    if paced:  # one timed step per line on stdin, as bench/llama_step.lua paced=true
        print("READY " + tag, flush=True)
        for _ in sys.stdin:
            print(f"STEP {tag} step_s={timed_step():.4f}", flush=True)
        return
    times = sorted(timed_step() for _ in range(steps))
    n = len(times)
    median = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
    trainable = sum(p.numel() for p in params)
    print(f"RESULT {tag} step_s={median:.4f} tokens_per_s={ROWS * LENGTH / median:.1f} trainable={trainable}",
          flush=True)


if __name__ == "__main__":
    main()
