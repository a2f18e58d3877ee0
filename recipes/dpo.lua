-- DPO (or IPO / hinge) on preference pairs, LoRA by default, whose reference is the base model with its
-- adapters switched off (no second copy). use_lora=false trains every weight against a frozen copy;
-- precompute_reference=true computes the reference log-probs once, caches them
-- (output_dir/reference_logps.safetensors) and frees the reference.
-- runner dpo base_model=/models/Llama-3.1-8B-Instruct data=data/prefs.jsonl [beta=0.1 loss=ipo ...]
local keys = require("run_keys")  -- scripts/lua/run_keys.lua: shared keys, with docs (runner help lists all)
local cfg = config(keys.preference {  -- + eval_data, batch_size (pairs), eval_steps, resume, seed, ...
  base_model = "models/Llama-3.1-8B-Instruct",  -- usually the SFT model: a local directory or a hub name (org/name)
  data = "data/example_preferences.jsonl",  -- preference pairs JSONL: {prompt, chosen, rejected} or chat-style (docs/alignment.md); default: the example pairs the build writes
  output_dir = "out/dpo",           -- adapter/ (or model/), checkpoints/ and metrics.jsonl go here
  gguf = "",                        -- also write output_dir/model.gguf: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
  quantize = "",                    -- "nf4": QLoRA, the base in 4 bits under the adapters; "" = none
  use_lora = true,                  -- true: train LoRA adapters; false: every weight, against a frozen copy
  lora = {                          -- the adapters when use_lora=true (docs/lora.md)
    r = 16,                         -- rank of each adapter
    alpha = 32,                     -- scaling: an adapter's update is multiplied by alpha / r
    dropout = 0.05,                 -- dropout on each adapter's input; 0 = none
    targets = "all-linear",         -- modules that get adapters: "all-linear" or a list of names
  },
  loss = "sigmoid",                 -- "sigmoid" (DPO), "ipo" or "hinge"
  beta = 0.1,                       -- scale of the implicit reward: higher keeps the policy closer to the reference
  label_smoothing = 0,              -- the share of preference labels assumed flipped (conservative DPO); 0 = none
  precompute_reference = false,     -- true: reference log-probs computed once, cached, the reference freed
  learning_rate = 5e-6,             -- peak learning rate; cosine decay to 0 after warm-up
  max_steps = 500,                  -- optimizer steps in all
})
require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua: a bad outtype fails before training
local run = require("run")  -- scripts/lua/run.lua

local pref = require("preference")  -- scripts/lua/preference.lua
local tok, model = pref.load(cfg)  -- the base model, with LoRA adapters when use_lora
print(tostring(model))

local train_set, eval_set = pref.sets(cfg, tok)

-- The reference: the base with adapters off (LoRA), or a frozen copy (full fine-tuning); or their
-- log-probs computed once and read from disk.
local reference = cfg.use_lora and "adapters_off"
  or models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device })
if cfg.precompute_reference then  -- one file for both sets: pairs are keyed by their tokens
  reference = cfg.output_dir .. "/reference_logps.safetensors"
  metrics.mkdir(cfg.output_dir)
  if not (cfg.resume and io.open(reference)) then
    train.reference_logprobs(cfg.use_lora and model or reference, { train_set, eval_set },
                             { path = reference, adapters_off = cfg.use_lora, batch_size = cfg.batch_size })
  end
end
local dpo = train.preference(model, { loss = cfg.loss, beta = cfg.beta, label_smoothing = cfg.label_smoothing,
                                      reference = reference })

-- pairs (2 rows each); a fresh run is evaluated before its first step, as step 0; to max_steps
local _, log = pref.train(model, cfg, train_set, eval_set, { schedule = "cosine", hooks = { dpo } })
run.save(cfg, model, tok, log, cfg.use_lora and "adapter" or "model")
