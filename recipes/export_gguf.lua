-- Export a Hugging Face model directory as one GGUF file that llama.cpp, Ollama and LM Studio run.
-- runner export_gguf model=out/my_finetune/model output=out/model.gguf [outtype=q8_0]
-- runner export_gguf model=models/Llama-3.2-1B adapter=out/lora/adapter output=out/model.gguf (a LoRA run's adapter)
-- Which tensors stay in higher precision follows llama.cpp (docs/gguf.md).
local cfg = config {
  model = "models/Llama-3.2-1B",  -- the model to export: a local Hugging Face directory (tokenizer.json included)
  output = "out/model.gguf",      -- the GGUF file to write
  outtype = "f16",                -- f32, f16, bf16, q8_0, q4_0 or q4_k (llama.cpp's Q4_K_M mix)
  adapter = "",                   -- a PEFT LoRA directory merged in first (a LoRA run's OUTPUT_DIR/adapter); "" = none
}

local r = export.gguf(cfg.model, cfg.output, { outtype = cfg.outtype, adapter = cfg.adapter })
print(string.format("wrote %s (%s, %d tensors, %.1f MiB)", r.path, r.outtype, r.tensors, r.bytes / 2 ^ 20))
