-- LLaMA-Adapter fine-tuning (PEFT's adaption prompt) of a chat model on JSONL (chat, prompt/response, Alpaca or
-- Guanaco records): a learnable prompt with a zero-init gate in each of the top adapter_layers layers, about 1.2M
-- trainable parameters on an 8B model. Writes a PEFT adapter (peft_type ADAPTION_PROMPT). docs/lora.md.
-- runner adapter_finetune base_model=/models/Llama-3.1-8B-Instruct data=data/train.jsonl [adapter.adapter_len=20 ...]
local cfg = config {
  base_model = "models/Llama-3.1-8B-Instruct",  -- a local Hugging Face model directory (llama, mistral or qwen2)
  data = "data/train.jsonl",
  output_dir = "out/adapter",
  dtype = "bf16", device = "auto",
  -- The paper's LLaMA-7B settings: 10 prompt vectors in the top 30 of 32 layers.
  adapter = { adapter_len = 10, adapter_layers = 30 },
  -- The paper's optimizer: AdamW, lr 9e-3 (the prompts start from N(0, 1) and the gates from 0, so they need a
  -- much larger step than LoRA's 2e-4), weight decay 0.02, warmup then cosine.
  lr = 9e-3, weight_decay = 0.02, warmup = 20, steps = 1000, batch_size = 4, grad_accum = 8, max_length = 512,
  checkpoint_layers = true,
  shard = "none",              -- ZeRO over data-parallel ranks: none | optimizer | gradients | full
  optimizer = "adamw",         -- adamw | adamw8bit (blockwise 8-bit moments) | sgd
  optimizer_offload = "none",  -- none | cpu (fp32 masters and optimizer states in host memory)
  eval_fraction = 0.02, eval_every = 100, save_every = 200, resume = false,
  overwrite = false,  -- true: a fresh run moves an earlier run in output_dir to output_dir/previous-<time>/
  seed = 0, deterministic = false,  -- true: LibTorch's deterministic kernels (docs/reproducibility.md)
  wandb_project = "",
}

local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device })
lora.adaption_prompt(model, { adapter_len = cfg.adapter.adapter_len, adapter_layers = cfg.adapter.adapter_layers,
                              seed = cfg.seed })
print(tostring(model))

local all = data.jsonl(cfg.data, { tokenizer = tok, max_length = cfg.max_length, pack = true, seed = cfg.seed })
local train_set, eval_set = all:split(1 - cfg.eval_fraction)

local trainer = train.new(model, { lr = cfg.lr, weight_decay = cfg.weight_decay, warmup = cfg.warmup,
                                   schedule = "cosine", steps = cfg.steps, micro_batch_size = cfg.batch_size,
                                   checkpoint_layers = cfg.checkpoint_layers, output_dir = cfg.output_dir,
                                   save_every = cfg.save_every, shard = cfg.shard, optimizer = cfg.optimizer,
                                   optimizer_offload = cfg.optimizer_offload })
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
print("adapter (PEFT format, ADAPTION_PROMPT): " .. cfg.output_dir .. "/adapter")
