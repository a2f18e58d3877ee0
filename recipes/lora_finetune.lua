-- LoRA fine-tuning of a chat model on JSONL (chat, prompt/response, Alpaca or Guanaco records); writes a PEFT adapter.
-- runner lora_finetune base_model=/models/Llama-3.1-8B-Instruct data=data/train.jsonl [lora.r=32 steps=2000 ...]
-- quantize=nf4 makes it QLoRA (a 4-bit base); recipes/qlora_finetune.lua has QLoRA's defaults and merging.
local cfg = config {
  base_model = "models/Llama-3.1-8B-Instruct",  -- a local Hugging Face model directory
  data = "data/train.jsonl",
  output_dir = "out/lora",
  gguf = "",  -- also write output_dir/model.gguf for llama.cpp/Ollama: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
  dtype = "bf16", device = "auto",
  quantize = "",  -- "nf4" (QLoRA) or "fp4": the base's Linears 4-bit, quantized while loading
  lora = { r = 16, alpha = 32, dropout = 0.05, rslora = false, dora = false,
           targets = { "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj" } },
  lr = 2e-4, warmup = 20, steps = 1000, batch_size = 4, grad_accum = 8, max_length = 2048,
  checkpoint_layers = true,
  shard = "none",              -- ZeRO over data-parallel ranks: none | optimizer | gradients | full
  optimizer = "adamw",         -- adamw | adamw8bit (blockwise 8-bit moments) | sgd
  optimizer_offload = "none",  -- none | cpu (fp32 masters and optimizer states in host memory)
  eval_fraction = 0.02, eval_every = 100, save_every = 200, resume = false,
  overwrite = false,  -- true: a fresh run moves an earlier run in output_dir to output_dir/previous-<time>/
  seed = 0, deterministic = false,  -- true: LibTorch's deterministic kernels (docs/reproducibility.md)
  wandb_project = "",
}
local gguf_out = require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua

local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device, quantize = cfg.quantize })
lora.apply(model, { r = cfg.lora.r, alpha = cfg.lora.alpha, dropout = cfg.lora.dropout, targets = cfg.lora.targets,
                    rslora = cfg.lora.rslora, dora = cfg.lora.dora, seed = cfg.seed })
print(tostring(model))

local all = data.jsonl(cfg.data, { tokenizer = tok, max_length = cfg.max_length, pack = true, seed = cfg.seed })
local train_set, eval_set = all:split(1 - cfg.eval_fraction)

local trainer = train.new(model, { lr = cfg.lr, warmup = cfg.warmup, schedule = "cosine", steps = cfg.steps,
                                   micro_batch_size = cfg.batch_size, checkpoint_layers = cfg.checkpoint_layers,
                                   output_dir = cfg.output_dir, save_every = cfg.save_every, shard = cfg.shard,
                                   optimizer = cfg.optimizer, optimizer_offload = cfg.optimizer_offload })
local start = cfg.resume and trainer:resume() or 0
local log = metrics.open { console = true, jsonl = cfg.output_dir .. "/metrics.jsonl", total_steps = cfg.steps,
                           config = cfg, resume = start, wandb = cfg.wandb_project }

for step, batch in train_set:batches { size = cfg.batch_size * cfg.grad_accum, steps = cfg.steps, start = start } do
  log:write(step, trainer:step(batch))
  if step % cfg.eval_every == 0 or step == cfg.steps then
    local e = trainer:evaluate(eval_set, { batch_size = cfg.batch_size })
    log:write(step, { eval_loss = e.loss, eval_perplexity = e.perplexity })
  end
  if log:stopped() then break end  -- stopped from the W&B UI: end here and save what there is
end

trainer:save()
lora.save(model, cfg.output_dir .. "/adapter", { base_model = cfg.base_model })
log:close()
print("adapter (PEFT format): " .. cfg.output_dir .. "/adapter")
gguf_out.write(cfg.gguf, cfg.output_dir, cfg.base_model, cfg.output_dir .. "/adapter")  -- merged in float32
