#!/usr/bin/env python3
"""tests/real_model/adapter_logits.py MODEL_DIR ADAPTER_DIR LUATUNE.json: peft's side of the PEFT check in
tests/recipes/test_smollm2_chat.sh. Loads the base model (transformers, float32) and luatune's adapter
with peft's PeftModel.from_pretrained, then compares the logits of the same ids with luatune's: the last
position within 1e-3 and every position's argmax equal, and the adapter moving them (> 1e-4 from the base).
Exit 1 otherwise."""
import json
import sys

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

model_dir, adapter_dir, ours_path = sys.argv[1:4]
ours = json.load(open(ours_path))
base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
model = PeftModel.from_pretrained(base, adapter_dir).eval()
with torch.no_grad():
    logits = model(torch.tensor([ours["ids"]])).logits[0]
    with model.disable_adapter():
        plain = model(torch.tensor([ours["ids"]])).logits[0]
diff = (logits[-1] - torch.tensor(ours["last_logits"])).abs().max().item()
moved = (logits[-1] - plain[-1]).abs().max().item()  # the adapter must matter, or the check proves nothing
same = logits.argmax(-1).tolist() == ours["argmax"]
print(f"peft vs luatune with the adapter: last logits max |diff| {diff:.2e}, argmax equal: {same}; "
      f"the adapter moves them by up to {moved:.2e}")
sys.exit(0 if diff <= 1e-3 and same and moved > 1e-4 else 1)
