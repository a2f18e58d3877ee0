-- ORPO (Hong, Lee and Thorne, 2024): supervised fine-tuning and preference alignment in one stage, with no
-- reference model; LoRA by default. The loss: the chosen response's NLL plus beta times -log sigmoid of
-- the log odds ratio of chosen over rejected (docs/alignment.md). use_lora=false trains every weight.
-- runner orpo base_model=/models/Llama-3.1-8B data=data/prefs.jsonl [beta=0.1 learning_rate=8e-6 ...]
local cfg = config {
  base_model = "models/Llama-3.1-8B",  -- ORPO starts from a base model, no SFT stage: a local directory or org/name
  data = "data/preferences.jsonl",     -- preference pairs JSONL: {prompt, chosen, rejected} or chat-style pairs
  eval_data = "",                      -- held-out pairs JSONL; "" = eval_fraction of data
  output_dir = "out/orpo",             -- adapter/ (or model/), checkpoints/ and metrics.jsonl go here
  gguf = "",                           -- also write output_dir/model.gguf: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
  dtype = "bf16",                      -- weight dtype: bf16, fp16, fp32 or "auto" (the checkpoint's torch_dtype)
  device = "auto",                     -- "auto" (cuda when there is one, else cpu), cuda, cuda:N or cpu
  quantize = "",                       -- "nf4": QLoRA, the base in 4 bits under the adapters; "" = none
  use_lora = true,                     -- true: train LoRA adapters; false: every weight
  lora = {                             -- the adapters when use_lora=true (docs/lora.md)
    r = 16,                            -- rank of each adapter
    alpha = 32,                        -- scaling: an adapter's update is multiplied by alpha / r
    dropout = 0.05,                    -- dropout on each adapter's input; 0 = none
    targets = "all-linear",            -- modules that get adapters: "all-linear" or a list of names
  },
  beta = 0.1,                          -- the paper's lambda: weight of the odds-ratio term
  learning_rate = 8e-6,                -- peak learning rate; linear decay to 0 after warm-up
  warmup_steps = 10,                   -- steps of linear warm-up from 0 to learning_rate
  max_steps = 500,                     -- optimizer steps in all
  batch_size = 2,                      -- pairs per forward/backward on each rank (2 x this rows: chosen, rejected)
  gradient_accumulation_steps = 8,     -- micro-batches per optimizer step: batch_size x this pairs a step on each rank
  max_length = 1024,                   -- tokens per prompt + response; a pair whose response it cuts away is dropped
  gradient_checkpointing = true,       -- recompute each layer in backward: less activation memory, more compute
  shard = "none",                      -- ZeRO over data-parallel ranks: none | optimizer | gradients | full (docs/zero.md)
  optimizer = "adamw",                 -- adamw | adamw8bit (blockwise 8-bit moments) | sgd
  optimizer_offload = "none",          -- none | cpu (fp32 masters and optimizer states in host memory)
  eval_fraction = 0.05,                -- share of the pairs held out when eval_data is ""
  eval_steps = 50,                     -- evaluate every N steps, before the first and after the last
  save_steps = 100,                    -- resumable checkpoint every N steps (output_dir/checkpoints); 0 = only the final one
  resume = false,                      -- true: continue from the newest checkpoint in output_dir (docs/checkpoints.md)
  overwrite = false,                   -- true: a fresh run moves an earlier run in output_dir to output_dir/previous-<time>/
  seed = 0,                            -- seeds the data order, the adapters' init and dropout
  deterministic = false,               -- true: LibTorch's deterministic kernels (docs/reproducibility.md)
  wandb_project = "",                  -- W&B project to log to; "" = none (docs/wandb.md)
}
require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua: a bad outtype fails before training
local run = require("run")  -- scripts/lua/run.lua

local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device, quantize = cfg.quantize })
if cfg.use_lora then
  lora.apply(model, { r = cfg.lora.r, alpha = cfg.lora.alpha, dropout = cfg.lora.dropout, targets = cfg.lora.targets,
                      seed = cfg.seed })
end
print(tostring(model))

local pref = require("preference")  -- scripts/lua/preference.lua
local train_set, eval_set = pref.sets(cfg, tok)
local orpo = train.preference(model, { loss = "orpo", beta = cfg.beta })
local trainer = run.trainer(model, cfg, { schedule = "linear", hooks = { orpo },
                                          micro_batch_size = 2 * cfg.batch_size })  -- a pair: 2 rows
local start, log = run.start(cfg, trainer)

if start == 0 then pref.evaluate(log, 0, trainer, eval_set, cfg) end
for step, batch in train_set:batches { size = cfg.batch_size * cfg.gradient_accumulation_steps, steps = cfg.max_steps,
                                       start = start } do
  log:write(step, trainer:step(batch))
  if step % cfg.eval_steps == 0 or step == cfg.max_steps then pref.evaluate(log, step, trainer, eval_set, cfg) end
  if log:stopped() then break end
end

trainer:save()
run.save(cfg, model, tok, log, cfg.use_lora and "adapter" or "model")
