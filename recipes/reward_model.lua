-- Reward modelling: a scalar head on the last hidden state, trained on preference pairs with the
-- Bradley-Terry loss. The loss is -log sigmoid(r_chosen - r_rejected); held-out preference accuracy as it trains.
-- Saved as a Hugging Face <Family>ForSequenceClassification model (num_labels 1) that transformers
-- loads, and that recipes/rejection_sampling.lua scores with (docs/alignment.md).
-- runner reward_model base_model=/models/Llama-3.1-8B-Instruct data=data/prefs.jsonl [use_lora=false ...]
local cfg = config {
  base_model = "models/Llama-3.1-8B-Instruct",  -- usually the SFT model: a local directory or a hub name (org/name)
  data = "data/preferences.jsonl",  -- preference pairs JSONL: {prompt, chosen, rejected} or chat-style pairs
  eval_data = "",                   -- held-out pairs JSONL; "" = eval_fraction of data
  output_dir = "out/reward_model",  -- model/ (sequence classification), checkpoints/ and metrics.jsonl go here
  dtype = "bf16",                   -- weight dtype: bf16, fp16, fp32 or "auto" (the checkpoint's torch_dtype)
  device = "auto",                  -- "auto" (cuda when there is one, else cpu), cuda, cuda:N or cpu
  quantize = "",                    -- "nf4": QLoRA (merged projections are saved dense); "" = none
  use_lora = true,                  -- true: LoRA adapters, merged into the weights before saving; false: every weight
  lora = {                          -- the adapters when use_lora=true (docs/lora.md)
    r = 16,                         -- rank of each adapter
    alpha = 32,                     -- scaling: an adapter's update is multiplied by alpha / r
    dropout = 0.05,                 -- dropout on each adapter's input; 0 = none
    targets = "all-linear",         -- modules that get adapters: "all-linear" or a list of names
  },
  learning_rate = 1e-4,             -- peak learning rate; cosine decay to 0 after warm-up
  warmup_steps = 10,                -- steps of linear warm-up from 0 to learning_rate
  max_steps = 500,                  -- optimizer steps in all
  batch_size = 4,                   -- pairs per forward/backward on each rank (2 x this rows: chosen, rejected)
  gradient_accumulation_steps = 4,  -- micro-batches per optimizer step: batch_size x this pairs a step on each rank
  max_length = 1024,                -- tokens per prompt + response; a pair whose response it cuts away is dropped
  gradient_checkpointing = true,    -- recompute each layer in backward: less activation memory, more compute
  shard = "none",                   -- ZeRO over data-parallel ranks: none | optimizer | gradients | full (docs/zero.md)
  optimizer = "adamw",              -- adamw | adamw8bit (blockwise 8-bit moments) | sgd
  optimizer_offload = "none",       -- none | cpu (fp32 masters and optimizer states in host memory)
  pad_token_id = -1,                -- pad_token_id for config.json; -1 = the tokenizer's pad, else its last id
  eval_fraction = 0.05,             -- share of the pairs held out when eval_data is ""
  eval_steps = 50,                  -- evaluate every N steps, before the first and after the last
  save_steps = 100,                 -- resumable checkpoint every N steps (output_dir/checkpoints); 0 = only the final one
  resume = false,                   -- true: continue from the newest checkpoint in output_dir (docs/checkpoints.md)
  overwrite = false,                -- true: a fresh run moves an earlier run in output_dir to output_dir/previous-<time>/
  seed = 0,                         -- seeds the data order, the head's and adapters' init and dropout
  deterministic = false,            -- true: LibTorch's deterministic kernels (docs/reproducibility.md)
  wandb_project = "",               -- W&B project to log to; "" = none (docs/wandb.md)
}
local run = require("run")  -- scripts/lua/run.lua

local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device, quantize = cfg.quantize })
if cfg.use_lora then
  lora.apply(model, { r = cfg.lora.r, alpha = cfg.lora.alpha, dropout = cfg.lora.dropout, targets = cfg.lora.targets,
                      seed = cfg.seed })
end
local reward = train.reward_model(model, { seed = cfg.seed })  -- the score head trains with the model
print(tostring(model), tostring(reward))

local pref = require("preference")  -- scripts/lua/preference.lua
local train_set, eval_set = pref.sets(cfg, tok)
local trainer = run.trainer(model, cfg, { schedule = "cosine", hooks = { reward },
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
if cfg.use_lora then lora.merge(model) end
reward:save(cfg.output_dir .. "/model", { tokenizer = tok, pad_token_id = cfg.pad_token_id >= 0 and cfg.pad_token_id or nil })
log:close()
print("saved: " .. cfg.output_dir .. "/model (Hugging Face sequence classification)")
