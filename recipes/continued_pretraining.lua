-- Continued pretraining on plain text JSONL ({"text": ...}, loss on every token) in packed rows, of every weight or of LoRA adapters.
-- runner continued_pretraining base_model=/models/Llama-3.2-1B data=corpus.jsonl [use_lora=true max_steps=2000 ...]
local keys = require("run_keys")  -- scripts/lua/run_keys.lua: shared keys, with docs (runner help lists all)
local cfg = config(keys.training {  -- + batch_size, eval_steps, save_steps, resume, seed, device, ...
  base_model = "models/Llama-3.2-1B",  -- model to train on: a local Hugging Face directory or a hub name (org/name)
  data = "data/example_text.jsonl",    -- plain text JSONL, {"text": ...} per line; default: the example text the build writes
  output_dir = "out/cpt",              -- model/ (or adapter/), checkpoints/ and metrics.jsonl go here
  gguf = "",                           -- also write output_dir/model.gguf: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
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
  eval_fraction = 0.01,                -- share of the rows held out for eval_loss and eval_perplexity
  eval_steps = 200,                    -- evaluate every N steps and after the last
  save_steps = 200,                    -- resumable checkpoint every N steps (output_dir/checkpoints); 0 = none
})
require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua: a bad outtype fails before training
local run = require("run")  -- scripts/lua/run.lua

local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device })
if cfg.use_lora then
  lora.apply(model, cfg.lora, { seed = cfg.seed })
end
print(tostring(model))

local train_set, eval_set = run.sets(cfg, tok, { format = "text" })  -- packed rows; eval_fraction held out

local trainer, start, log = run.start(model, cfg, { schedule = "cosine" })  -- + min_lr_ratio

for step, batch in run.batches(train_set, cfg, start, log) do  -- to max_steps, or until stopped from the W&B UI
  log:write(step, trainer:step(batch))
  if step % cfg.eval_steps == 0 or step == cfg.max_steps then run.evaluate(log, step, trainer, eval_set, cfg) end
end

run.save(cfg, model, tok, log, cfg.use_lora and "adapter" or "model")
