-- Full fine-tuning (every weight) of a model on JSONL (chat, prompt/response, Alpaca or Guanaco records); writes a Hugging Face model.
-- runner full_finetune base_model=/models/Qwen2.5-0.5B-Instruct data=data/train.jsonl [learning_rate=1e-5 max_steps=500 ...]
local cfg = config {
  base_model = "models/Qwen2.5-0.5B-Instruct",  -- model to fine-tune: a local Hugging Face directory or a hub name (org/name)
  data = "data/train.jsonl",        -- training JSONL: chat, prompt/response, Alpaca or Guanaco records (docs/data.md)
  output_dir = "out/full",          -- model/, checkpoints/, metrics.jsonl and run.json go here
  gguf = "",                        -- also write output_dir/model.gguf: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
  dtype = "bf16",                   -- weight dtype: bf16, fp16, fp32 or "auto" (the checkpoint's torch_dtype)
  device = "auto",                  -- "auto" (cuda when there is one, else cpu), cuda, cuda:N or cpu
  master_weights = true,            -- true: fp32 master copies of bf16/fp16 weights for the optimizer's update
  learning_rate = 1e-5,             -- peak learning rate; cosine decay to 0 after warm-up
  weight_decay = 0.0,               -- AdamW's decoupled weight decay
  warmup_steps = 20,                -- steps of linear warm-up from 0 to learning_rate
  max_steps = 500,                  -- optimizer steps in all
  batch_size = 4,                   -- rows per forward/backward on each rank (the micro-batch)
  gradient_accumulation_steps = 4,  -- micro-batches per optimizer step: batch_size x this rows a step on each rank
  max_length = 2048,                -- tokens per row; records are packed into rows of at most this
  gradient_checkpointing = true,    -- recompute each layer in backward: less activation memory, more compute
  shard = "none",                   -- ZeRO over data-parallel ranks: none | optimizer | gradients | full (docs/zero.md)
  optimizer = "adamw",              -- adamw | adamw8bit (blockwise 8-bit moments) | sgd
  optimizer_offload = "none",       -- none | cpu (fp32 masters and optimizer states in host memory)
  eval_fraction = 0.02,             -- share of the rows held out for eval_loss and eval_perplexity
  eval_steps = 100,                 -- evaluate every N steps and after the last
  save_steps = 100,                 -- resumable checkpoint every N steps (output_dir/checkpoints); 0 = none
  resume = false,                   -- true: continue from the newest checkpoint in output_dir (docs/checkpoints.md)
  overwrite = false,                -- true: a fresh run moves an earlier run in output_dir to output_dir/previous-<time>/
  seed = 0,                         -- seeds the data order
  deterministic = false,            -- true: LibTorch's deterministic kernels (docs/reproducibility.md)
  wandb_project = "",               -- W&B project to log to; "" = none (docs/wandb.md)
}
require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua: a bad outtype fails before training
local run = require("run")  -- scripts/lua/run.lua

local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device })
print(tostring(model))

local all = data.jsonl(cfg.data, { tokenizer = tok, max_length = cfg.max_length, pack = true, seed = cfg.seed })
local train_set, eval_set = all:split(1 - cfg.eval_fraction)

local trainer = run.trainer(model, cfg, { schedule = "cosine", weight_decay = cfg.weight_decay,
                                          master_weights = cfg.master_weights })
local start, log = run.start(cfg, trainer)

for step, batch in train_set:batches { size = cfg.batch_size * cfg.gradient_accumulation_steps, steps = cfg.max_steps,
                                       start = start } do
  log:write(step, trainer:step(batch))
  if step % cfg.eval_steps == 0 or step == cfg.max_steps then run.evaluate(log, step, trainer, eval_set, cfg) end
  if log:stopped() then break end  -- stopped from the W&B UI: end here and save what there is
end

run.save(cfg, model, tok, log, "model")
