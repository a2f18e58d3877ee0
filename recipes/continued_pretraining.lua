-- Continued pretraining on plain text JSONL ({"text": ...}, loss on every token) in packed rows, of every weight or of LoRA adapters.
-- runner continued_pretraining base_model=/models/Llama-3.2-1B data=corpus.jsonl [use_lora=true max_steps=2000 ...]
local cfg = config {
  base_model = "models/Llama-3.2-1B",  -- model to train on: a local Hugging Face directory or a hub name (org/name)
  data = "data/corpus.jsonl",          -- plain text JSONL, {"text": ...} per line
  output_dir = "out/cpt",              -- model/ (or adapter/), checkpoints/ and metrics.jsonl go here
  gguf = "",                           -- also write output_dir/model.gguf: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
  dtype = "bf16",                      -- weight dtype: bf16, fp16, fp32 or "auto" (the checkpoint's torch_dtype)
  device = "auto",                     -- "auto" (cuda when there is one, else cpu), cuda, cuda:N or cpu
  use_lora = false,                    -- true: train LoRA adapters (lora below) instead of every weight
  lora = {                             -- the adapters when use_lora=true (docs/lora.md)
    r = 64,                            -- rank of each adapter
    alpha = 128,                       -- scaling: an adapter's update is multiplied by alpha / r
    dropout = 0.0,                     -- dropout on each adapter's input; 0 = none
    targets = { "q_proj", "k_proj", "v_proj", "o_proj",
                "gate_proj", "up_proj", "down_proj" },  -- modules that get adapters: names, or "all-linear"
  },
  learning_rate = 5e-5,                -- peak learning rate; cosine decay to min_lr_ratio x it after warm-up
  warmup_steps = 50,                   -- steps of linear warm-up from 0 to learning_rate
  max_steps = 2000,                    -- optimizer steps in all
  min_lr_ratio = 0.1,                  -- where the cosine ends, as a share of learning_rate
  batch_size = 4,                      -- rows per forward/backward on each rank (the micro-batch)
  gradient_accumulation_steps = 8,     -- micro-batches per optimizer step: batch_size x this rows a step on each rank
  max_length = 2048,                   -- tokens per row; records are packed into rows of at most this
  gradient_checkpointing = true,       -- recompute each layer in backward: less activation memory, more compute
  shard = "none",                      -- ZeRO over data-parallel ranks: none | optimizer | gradients | full (docs/zero.md)
  optimizer = "adamw",                 -- adamw | adamw8bit (blockwise 8-bit moments) | sgd
  optimizer_offload = "none",          -- none | cpu (fp32 masters and optimizer states in host memory)
  eval_fraction = 0.01,                -- share of the rows held out for eval_loss and eval_perplexity
  eval_steps = 200,                    -- evaluate every N steps and after the last
  save_steps = 200,                    -- resumable checkpoint every N steps (output_dir/checkpoints); 0 = none
  resume = false,                      -- true: continue from the newest checkpoint in output_dir (docs/checkpoints.md)
  overwrite = false,                   -- true: a fresh run moves an earlier run in output_dir to output_dir/previous-<time>/
  seed = 0,                            -- seeds the data order (and the adapters' init)
  deterministic = false,               -- true: LibTorch's deterministic kernels (docs/reproducibility.md)
  wandb_project = "",                  -- W&B project to log to; "" = none (docs/wandb.md)
}
require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua: a bad outtype fails before training
local run = require("run")  -- scripts/lua/run.lua

local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device })
if cfg.use_lora then
  lora.apply(model, { r = cfg.lora.r, alpha = cfg.lora.alpha, dropout = cfg.lora.dropout, targets = cfg.lora.targets,
                      seed = cfg.seed })
end
print(tostring(model))

local all = data.jsonl(cfg.data, { tokenizer = tok, format = "text", max_length = cfg.max_length, pack = true,
                                   seed = cfg.seed })
local train_set, eval_set = all:split(1 - cfg.eval_fraction)

local trainer = run.trainer(model, cfg, { schedule = "cosine", min_lr_ratio = cfg.min_lr_ratio })
local start, log = run.start(cfg, trainer)

for step, batch in train_set:batches { size = cfg.batch_size * cfg.gradient_accumulation_steps, steps = cfg.max_steps,
                                       start = start } do
  log:write(step, trainer:step(batch))
  if step % cfg.eval_steps == 0 or step == cfg.max_steps then run.evaluate(log, step, trainer, eval_set, cfg) end
  if log:stopped() then break end  -- stopped from the W&B UI: end here and save what there is
end

run.save(cfg, model, tok, log, cfg.use_lora and "adapter" or "model")
