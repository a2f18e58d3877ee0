-- Reward modelling: a scalar head on the last hidden state, trained on preference pairs with the
-- Bradley-Terry loss. The loss is -log sigmoid(r_chosen - r_rejected); held-out preference accuracy as it trains.
-- Saved as a Hugging Face <Family>ForSequenceClassification model (num_labels 1) that transformers
-- loads, and that recipes/rejection_sampling.lua scores with (docs/alignment.md).
-- runner reward_model base_model=/models/Llama-3.1-8B-Instruct data=data/prefs.jsonl [use_lora=false ...]
local keys = require("run_keys")  -- scripts/lua/run_keys.lua: shared keys, with docs (runner help lists all)
local cfg = config(keys.preference {  -- + eval_data, batch_size (pairs), eval_steps, resume, seed, ...
  base_model = "models/Llama-3.1-8B-Instruct",  -- usually the SFT model: a local directory or a hub name (org/name)
  data = "data/example_preferences.jsonl",  -- preference pairs JSONL: {prompt, chosen, rejected} or chat-style pairs; default: the example pairs
  output_dir = "out/reward_model",  -- model/ (sequence classification), checkpoints/ and metrics.jsonl go here
  quantize = "",                    -- "nf4": QLoRA (merged projections are saved dense); "" = none
  use_lora = true,                  -- true: LoRA adapters, merged into the weights before saving; false: every weight
  lora = {                          -- the adapters when use_lora=true (docs/lora.md)
    r = 16,                         -- rank of each adapter
    alpha = 32,                     -- scaling: an adapter's update is multiplied by alpha / r
    dropout = 0.05,                 -- dropout on each adapter's input; 0 = none
    targets = "all-linear",         -- modules that get adapters: "all-linear" or a list of names
  },
  learning_rate = 1e-4,             -- peak learning rate; cosine decay to 0 after warm-up
  max_steps = 500,                  -- optimizer steps in all
  batch_size = 4,                   -- pairs per forward/backward on each rank (2 x this rows: chosen, rejected)
  gradient_accumulation_steps = 4,  -- micro-batches per optimizer step: batch_size x this pairs a step on each rank
  pad_token_id = -1,                -- pad_token_id for config.json; -1 = the tokenizer's pad, else its last id
})
local pref = require("preference")  -- scripts/lua/preference.lua
local tok, model = pref.load(cfg)  -- the base model, with LoRA adapters when use_lora
local reward = train.reward_model(model, { seed = cfg.seed })  -- the score head trains with the model
print(tostring(model), tostring(reward))

local train_set, eval_set = pref.sets(cfg, tok)
-- pairs (2 rows each); a fresh run is evaluated before its first step, as step 0; to max_steps
local _, log = pref.train(model, cfg, train_set, eval_set, { schedule = "cosine", hooks = { reward } })
if cfg.use_lora then lora.merge(model) end
reward:save(cfg.output_dir .. "/model", { tokenizer = tok, pad_token_id = cfg.pad_token_id >= 0 and cfg.pad_token_id or nil })
log:close()
print("saved: " .. cfg.output_dir .. "/model (Hugging Face sequence classification)")
