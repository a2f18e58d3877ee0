-- ORPO (Hong, Lee and Thorne, 2024): supervised fine-tuning and preference alignment in one stage, with no
-- reference model; LoRA by default. The loss: the chosen response's NLL plus beta times -log sigmoid of
-- the log odds ratio of chosen over rejected (docs/alignment.md). use_lora=false trains every weight.
-- runner orpo base_model=/models/Llama-3.1-8B data=data/prefs.jsonl [beta=0.1 learning_rate=8e-6 ...]
local keys = require("run_keys")  -- scripts/lua/run_keys.lua: shared keys, with docs (runner help lists all)
local cfg = config(keys.preference {  -- + eval_data, batch_size (pairs), eval_steps, resume, seed, ...
  base_model = "models/Llama-3.1-8B",  -- ORPO starts from a base model, no SFT stage: a local directory or org/name
  data = "data/example_preferences.jsonl",  -- preference pairs JSONL: {prompt, chosen, rejected} or chat-style pairs; default: the example pairs
  output_dir = "out/orpo",             -- adapter/ (or model/), checkpoints/ and metrics.jsonl go here
  gguf = "",                           -- also write output_dir/model.gguf: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
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
  max_steps = 500,                     -- optimizer steps in all
})
require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua: a bad outtype fails before training
local run = require("run")  -- scripts/lua/run.lua

local pref = require("preference")  -- scripts/lua/preference.lua
local tok, model = pref.load(cfg)  -- the base model, with LoRA adapters when use_lora
print(tostring(model))

local train_set, eval_set = pref.sets(cfg, tok)
local orpo = train.preference(model, { loss = "orpo", beta = cfg.beta })
-- pairs (2 rows each); a fresh run is evaluated before its first step, as step 0; to max_steps
local _, log = pref.train(model, cfg, train_set, eval_set, { schedule = "linear", hooks = { orpo } })
run.save(cfg, model, tok, log, cfg.use_lora and "adapter" or "model")
