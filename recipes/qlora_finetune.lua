-- QLoRA: LoRA adapters trained on a 4-bit NF4 base (double-quantized scales, bf16 compute), so an 8B model
-- fine-tunes on a 16 GB GPU. Writes a PEFT adapter and, with merge=true, a bf16 Hugging Face model.
-- runner qlora_finetune base_model=/models/Llama-3.1-8B-Instruct data=data/train.jsonl [steps=2000 merge=true ...]
local cfg = config {
  base_model = "models/Llama-3.1-8B-Instruct",  -- a local Hugging Face model directory (bf16, or already 4-bit)
  data = "data/train.jsonl",
  output_dir = "out/qlora",
  gguf = "",  -- also write output_dir/model.gguf for llama.cpp/Ollama: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
  dtype = "bf16", device = "auto",
  quantize = "nf4",  -- or "fp4"
  double_quant = true, blocksize = 64,
  lora = { r = 16, alpha = 32, dropout = 0.05,
           targets = { "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj" } },
  lr = 2e-4, warmup = 20, steps = 1000, batch_size = 4, grad_accum = 4, max_length = 2048,
  checkpoint_layers = true,
  shard = "none",              -- ZeRO over data-parallel ranks: none | optimizer | gradients | full
  optimizer = "adamw",         -- adamw | adamw8bit (blockwise 8-bit moments) | sgd
  optimizer_offload = "none",  -- none | cpu (fp32 masters and optimizer states in host memory)
  eval_fraction = 0.02, eval_every = 100, save_every = 200, resume = false,
  overwrite = false,  -- true: a fresh run moves an earlier run in output_dir to output_dir/previous-<time>/
  merge = false,  -- also write output_dir/merged: the adapters folded into the dequantized base, bf16
  seed = 0, deterministic = false,  -- true: LibTorch's deterministic kernels (docs/reproducibility.md)
  wandb_project = "",
}
local gguf_out = require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua

local tok = tokenizer.load(cfg.base_model)
-- Each Linear is converted, moved and quantized on its own: the bf16 model never sits on the GPU whole.
local model = models.load(cfg.base_model, {
  dtype = cfg.dtype, device = cfg.device,
  quantize = { quant_type = cfg.quantize, double_quant = cfg.double_quant, blocksize = cfg.blocksize } })
lora.apply(model, { r = cfg.lora.r, alpha = cfg.lora.alpha, dropout = cfg.lora.dropout, targets = cfg.lora.targets,
                    seed = cfg.seed })
local q = qlora.info(model)
print(string.format("%s\n4-bit base: %d Linears %s, %.1f MB (%.1f MB in %s)", tostring(model), q.linears, q.quant_type,
                    q.bytes / 1e6, q.dense_bytes / 1e6, cfg.dtype))

local all = data.jsonl(cfg.data, { tokenizer = tok, max_length = cfg.max_length, pack = true, seed = cfg.seed })
local train_set, eval_set = all:split(1 - cfg.eval_fraction)

local trainer = train.new(model, { lr = cfg.lr, warmup = cfg.warmup, schedule = "cosine", steps = cfg.steps,
                                   micro_batch_size = cfg.batch_size, checkpoint_layers = cfg.checkpoint_layers,
                                   output_dir = cfg.output_dir, save_every = cfg.save_every, shard = cfg.shard,
                                   optimizer = cfg.optimizer, optimizer_offload = cfg.optimizer_offload })
local start = cfg.resume and trainer:resume() or 0
local log = metrics.open { console = true, jsonl = cfg.output_dir .. "/metrics.jsonl", total_steps = cfg.steps,
                           config = cfg, resume = start, wandb = cfg.wandb_project }

local last_eval
for step, batch in train_set:batches { size = cfg.batch_size * cfg.grad_accum, steps = cfg.steps, start = start } do
  log:write(step, trainer:step(batch))
  if step % cfg.eval_every == 0 or step == cfg.steps then
    last_eval = trainer:evaluate(eval_set, { batch_size = cfg.batch_size })
    log:write(step, { eval_loss = last_eval.loss, eval_perplexity = last_eval.perplexity })
  end
  if log:stopped() then break end  -- stopped from the W&B UI: end here and save what there is
end

trainer:save()
lora.save(model, cfg.output_dir .. "/adapter", { base_model = cfg.base_model })
print("adapter (PEFT format): " .. cfg.output_dir .. "/adapter")
if cfg.merge then
  lora.merge(model)       -- each 4-bit Linear dequantized, the adapter added, kept dense (bf16)
  qlora.dequantize(model) -- any Linear the adapters did not target
  model:save(cfg.output_dir .. "/merged", { tokenizer = tok })
  print("merged model (bf16, Hugging Face): " .. cfg.output_dir .. "/merged")
end
log:close()
-- GGUF: from the merged model (the dequantized NF4 base the adapters trained on); without merge=true,
-- from base_model with the adapter merged in float32.
if cfg.merge then gguf_out.write(cfg.gguf, cfg.output_dir, cfg.output_dir .. "/merged")
else gguf_out.write(cfg.gguf, cfg.output_dir, cfg.base_model, cfg.output_dir .. "/adapter") end
