-- LLaMA-Adapter fine-tuning (PEFT's adaption prompt) of a chat model on JSONL (chat, prompt/response, Alpaca or
-- Guanaco records); writes a PEFT adapter. A learnable prompt with a zero-init gate in each of the top
-- adapter_layers layers: about 1.2M trainable parameters on an 8B model (peft_type ADAPTION_PROMPT, docs/lora.md).
-- runner adapter_finetune base_model=/models/Llama-3.1-8B-Instruct data=data/train.jsonl [adapter.adapter_len=20 ...]
local cfg = config {
  base_model = "models/Llama-3.1-8B-Instruct",  -- model to fine-tune (llama, mistral or qwen2): a local directory or org/name
  data = "data/train.jsonl",        -- training JSONL: chat, prompt/response, Alpaca or Guanaco records (docs/data.md)
  output_dir = "out/adapter",       -- adapter/, checkpoints/, metrics.jsonl and run.json go here
  dtype = "bf16",                   -- weight dtype: bf16, fp16, fp32 or "auto" (the checkpoint's torch_dtype)
  device = "auto",                  -- "auto" (cuda when there is one, else cpu), cuda, cuda:N or cpu
  adapter = {                       -- the adaption prompts; defaults: the paper's LLaMA-7B settings
    adapter_len = 10,               -- learnable prompt vectors in each adapted layer
    adapter_layers = 30,            -- layers adapted, counted from the top (the paper: 30 of 32)
  },
  learning_rate = 9e-3,             -- the paper's peak: prompts start at N(0, 1), gates at 0, so far above LoRA's 2e-4
  weight_decay = 0.02,              -- AdamW's decoupled weight decay (the paper's)
  warmup_steps = 20,                -- steps of linear warm-up from 0 to learning_rate
  max_steps = 1000,                 -- optimizer steps in all (cosine decay to 0 after warm-up)
  batch_size = 4,                   -- rows per forward/backward on each rank (the micro-batch)
  gradient_accumulation_steps = 8,  -- micro-batches per optimizer step: batch_size x this rows a step on each rank
  max_length = 512,                 -- tokens per row; records are packed into rows of at most this
  gradient_checkpointing = true,    -- recompute each layer in backward: less activation memory, more compute
  shard = "none",                   -- ZeRO over data-parallel ranks: none | optimizer | gradients | full (docs/zero.md)
  optimizer = "adamw",              -- adamw | adamw8bit (blockwise 8-bit moments) | sgd
  optimizer_offload = "none",       -- none | cpu (fp32 masters and optimizer states in host memory)
  eval_fraction = 0.02,             -- share of the rows held out for eval_loss and eval_perplexity
  eval_steps = 100,                 -- evaluate every N steps and after the last
  save_steps = 200,                 -- resumable checkpoint every N steps (output_dir/checkpoints); 0 = only the final one
  resume = false,                   -- true: continue from the newest checkpoint in output_dir (docs/checkpoints.md)
  overwrite = false,                -- true: a fresh run moves an earlier run in output_dir to output_dir/previous-<time>/
  seed = 0,                         -- seeds the data order and the prompts' init
  deterministic = false,            -- true: LibTorch's deterministic kernels (docs/reproducibility.md)
  wandb_project = "",               -- W&B project to log to; "" = none (docs/wandb.md)
}
local run = require("run")  -- scripts/lua/run.lua

local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device })
lora.adaption_prompt(model, { adapter_len = cfg.adapter.adapter_len, adapter_layers = cfg.adapter.adapter_layers,
                              seed = cfg.seed })
print(tostring(model))

local all = data.jsonl(cfg.data, { tokenizer = tok, max_length = cfg.max_length, pack = true, seed = cfg.seed })
local train_set, eval_set = all:split(1 - cfg.eval_fraction)

local trainer = run.trainer(model, cfg, { schedule = "cosine", weight_decay = cfg.weight_decay })
local start, log = run.start(cfg, trainer)

for step, batch in train_set:batches { size = cfg.batch_size * cfg.gradient_accumulation_steps, steps = cfg.max_steps,
                                       start = start } do
  log:write(step, trainer:step(batch))
  if step % cfg.eval_steps == 0 or step == cfg.max_steps then run.evaluate(log, step, trainer, eval_set, cfg) end
  if log:stopped() then break end  -- stopped from the W&B UI: end here and save what there is
end

trainer:save()
run.save(cfg, model, tok, log, "adapter", "adapter (PEFT format, ADAPTION_PROMPT)")
