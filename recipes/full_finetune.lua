-- Full fine-tuning (every weight) of a model on JSONL (chat, prompt/response, Alpaca or Guanaco records); writes a Hugging Face model.
-- runner full_finetune base_model=/models/Qwen2.5-0.5B-Instruct [data=FILE.jsonl] [learning_rate=1e-5 max_steps=500 ...]
local keys = require("run_keys")  -- scripts/lua/run_keys.lua: shared keys, with docs (runner help lists all)
local cfg = config(keys.training {  -- + batch_size, eval_steps, save_steps, resume, seed, device, ...
  base_model = "models/Qwen2.5-0.5B-Instruct",  -- model to fine-tune: a local Hugging Face directory or a hub name (org/name)
  data = "data/example_chat.jsonl", -- training JSONL: chat, prompt/response, Alpaca, Guanaco (docs/data.md); default: the example set the build writes
  output_dir = "out/full",          -- model/, checkpoints/, metrics.jsonl and run.json go here
  gguf = "",                        -- also write output_dir/model.gguf: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
  master_weights = true,            -- true: fp32 master copies of bf16/fp16 weights for the optimizer's update
  learning_rate = 1e-5,             -- peak learning rate; cosine decay to 0 after warm-up
  weight_decay = 0.0,               -- AdamW's decoupled weight decay
  max_steps = 500,                  -- optimizer steps in all
  gradient_accumulation_steps = 4,  -- micro-batches per optimizer step: batch_size x this rows a step on each rank
  save_steps = 100,                 -- resumable checkpoint every N steps (output_dir/checkpoints); 0 = none
})
require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua: a bad outtype fails before training
local run = require("run")  -- scripts/lua/run.lua

local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device })
print(tostring(model))

local train_set, eval_set = run.sets(cfg, tok)  -- packed rows of data; eval_fraction of them held out

local trainer, start, log = run.start(model, cfg, { schedule = "cosine" })  -- + weight_decay, master_weights

for step, batch in run.batches(train_set, cfg, start, log) do  -- to max_steps, or until stopped from the W&B UI
  log:write(step, trainer:step(batch))
  if step % cfg.eval_steps == 0 or step == cfg.max_steps then run.evaluate(log, step, trainer, eval_set, cfg) end
end

run.save(cfg, model, tok, log, "model")
