#!/usr/bin/env python3
"""bench/hf_qlora_peer.py MODEL_DIR lora|qlora LENGTH [DEVICE] [STEPS]: the peer for bench/qlora_vs_lora.sh.

HF transformers + peft (+ bitsandbytes for QLoRA: NF4, double quantization, bf16 compute) on the
same random model directory, LoRA r 16 / alpha 32 on all linear layers, gradient checkpointing,
AdamW, batch 1 x LENGTH, 2 warm-up steps then STEPS (6) timed ones. Prints one JSON line like
bench/qlora_step.lua: base weight GB, peak memory GB (CUDA: torch.cuda.max_memory_allocated; CPU:
the process's peak RSS, VmHWM, as qlora_step.lua measures it there), median tokens/s. DEVICE is cuda
(the default), cuda:N or cpu; QLoRA needs CUDA (bitsandbytes). On the GPU machine bitsandbytes comes from the
wheels scripts/device-wheels.sh downloads (docs/gpu.md); the GPU harness's own HF QLoRA side is
bench/gpu/hf_train_bench.py.
"""
import json
import sys
import time

import torch
import transformers
from packaging.version import Version
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM


def peak_rss_gb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / 1e9
    return 0.0


def main():
    model_dir, method, length = sys.argv[1], sys.argv[2], int(sys.argv[3])
    device = sys.argv[4] if len(sys.argv) > 4 else "cuda"
    steps = int(sys.argv[5]) if len(sys.argv) > 5 else 6
    cuda = device == "cuda" or device.startswith("cuda:")
    if not cuda and device != "cpu":
        sys.exit("hf_qlora_peer.py: DEVICE must be cuda, cuda:N or cpu, got " + device)
    if method == "qlora" and not cuda:
        sys.exit("hf_qlora_peer.py: qlora needs CUDA (bitsandbytes' 4-bit layers)")
    # transformers 4.56 renamed torch_dtype to dtype (the old name warns)
    dtype_kw = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"
    kwargs = {dtype_kw: torch.bfloat16}
    if cuda:
        kwargs["device_map"] = {"": int(device.split(":")[1]) if ":" in device else 0}
        torch.cuda.reset_peak_memory_stats()
    if method == "qlora":
        from transformers import BitsAndBytesConfig
        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_pretrained(model_dir, **kwargs)
    weights = model.get_memory_footprint() / 1e9
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                                             task_type="CAUSAL_LM"))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    torch.manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (1, length), device=device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    rates = []
    for step in range(2 + steps):
        sync()
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        if step >= 2:
            rates.append(length / (time.perf_counter() - t0))
    rates.sort()
    peak = torch.cuda.max_memory_allocated() / 1e9 if cuda else peak_rss_gb()
    print(json.dumps({"method": "hf-" + method, "shape": model_dir, "device": device, "weights_gb": weights,
                      "peak_gb": peak, "tokens_per_s": rates[(len(rates) - 1) // 2], "tokens_per_step": length}))


if __name__ == "__main__":
    main()
