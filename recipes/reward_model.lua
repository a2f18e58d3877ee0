-- Reward modelling: a scalar head on the model's last hidden state, trained on preference pairs
-- with the Bradley-Terry loss -log sigmoid(r_chosen - r_rejected); held-out preference accuracy as
-- it trains; saved as a Hugging Face <Family>ForSequenceClassification model (num_labels 1) that
-- transformers loads, and that recipes/rejection_sampling.lua scores with (docs/alignment.md).
-- runner reward_model base_model=/models/Llama-3.1-8B-Instruct data=data/prefs.jsonl [use_lora=false ...]
local cfg = config {
  base_model = "models/Llama-3.1-8B-Instruct",  -- usually the SFT model
  data = "data/preferences.jsonl",               -- {prompt, chosen, rejected} or chat-style pairs
  eval_data = "",                                -- held-out pairs; "" = eval_fraction of data
  output_dir = "out/reward_model",
  dtype = "bf16", device = "auto", quantize = "",  -- quantize=nf4: QLoRA (merged projections are saved dense)
  use_lora = true,                               -- merged into the weights before saving
  lora = { r = 16, alpha = 32, dropout = 0.05, targets = "all-linear" },
  lr = 1e-4, warmup = 10, steps = 500, batch_size = 4, grad_accum = 4, max_length = 1024,
  checkpoint_layers = true,
  shard = "none",                                -- ZeRO over data-parallel ranks: none | optimizer | gradients | full
  optimizer = "adamw",                           -- adamw | adamw8bit (blockwise 8-bit moments) | sgd
  optimizer_offload = "none",                    -- none | cpu (fp32 masters and optimizer states in host memory)
  pad_token_id = -1,                             -- for config.json; -1: the tokenizer's pad, else the last id
  eval_fraction = 0.05, eval_every = 50, save_every = 100, resume = false,
  overwrite = false,  -- true: a fresh run moves an earlier run in output_dir to output_dir/previous-<time>/
  seed = 0, deterministic = false,  -- true: LibTorch's deterministic kernels (docs/reproducibility.md)
  wandb_project = "",
}

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
local trainer = train.new(model, { lr = cfg.lr, warmup = cfg.warmup, schedule = "cosine", steps = cfg.steps,
                                   micro_batch_size = 2 * cfg.batch_size, checkpoint_layers = cfg.checkpoint_layers,
                                   output_dir = cfg.output_dir, save_every = cfg.save_every, shard = cfg.shard,
                                   optimizer = cfg.optimizer, optimizer_offload = cfg.optimizer_offload,
                                   hooks = { reward } })
local start = cfg.resume and trainer:resume() or 0
local log = metrics.open { console = true, jsonl = cfg.output_dir .. "/metrics.jsonl", total_steps = cfg.steps,
                           config = cfg, resume = start, wandb = cfg.wandb_project }

local function evaluate(step)
  log:write(step, pref.eval_fields(trainer:evaluate(eval_set, { batch_size = cfg.batch_size })))
end
if start == 0 then evaluate(0) end
for step, batch in train_set:batches { size = cfg.batch_size * cfg.grad_accum, steps = cfg.steps, start = start } do
  log:write(step, trainer:step(batch))
  if step % cfg.eval_every == 0 or step == cfg.steps then evaluate(step) end
  if log:stopped() then break end
end

trainer:save()
if cfg.use_lora then lora.merge(model) end
reward:save(cfg.output_dir .. "/model", { tokenizer = tok, pad_token_id = cfg.pad_token_id >= 0 and cfg.pad_token_id or nil })
log:close()
print("saved: " .. cfg.output_dir .. "/model (Hugging Face sequence classification)")
