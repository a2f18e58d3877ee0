-- scripts/lua/run_keys.lua: the config keys that training recipes share, each with its default and its doc,
-- written once. A recipe's config{} takes one set and adds its own keys; a key the recipe gives itself keeps
-- the recipe's default (and its doc). `runner help RECIPE` lists the set's keys with the docs below
-- (host/cli/recipe_docs.cpp reads this file), so the help still shows every key the recipe accepts.
--   local keys = require("run_keys")  -- scripts/lua/run_keys.lua
--   local cfg = config(keys.training {  -- + the keys every fine-tuning run shares
--     base_model = "models/...",        -- the recipe's own keys, each with its -- doc
--   })
-- Each set includes the one it names first. Values are plain (no tables), so a copy per recipe is enough.
local M = {}

local keys_of = {}  -- set function -> every key of the set, the included set's too

-- A set: a function that returns the recipe's table with the set's keys added where it has none.
local function set(included, keys)
  local all = {}
  for k, v in pairs(included and keys_of[included] or {}) do all[k] = v end
  for k, v in pairs(keys) do all[k] = v end
  local function with(own)
    local cfg = {}
    for k, v in pairs(all) do cfg[k] = v end
    for k, v in pairs(own) do cfg[k] = v end
    return cfg
  end
  keys_of[with] = all
  return with
end

-- Where and how a model trains: every recipe that runs an optimizer (fine-tuning, alignment, pruning).
M.compute = set(nil, {
  dtype = "bf16",                   -- weight dtype: bf16, fp16, fp32 or "auto" (the checkpoint's torch_dtype)
  device = "auto",                  -- "auto" (cuda when there is one, else cpu), cuda, cuda:N or cpu
  gradient_checkpointing = true,    -- recompute each layer in backward: less activation memory, more compute
  shard = "none",                   -- ZeRO over data-parallel ranks: none | optimizer | gradients | full (docs/zero.md)
  optimizer = "adamw",              -- adamw | adamw8bit (blockwise 8-bit moments) | sgd
  optimizer_offload = "none",       -- none | cpu (fp32 masters and optimizer states in host memory)
  seed = 0,                         -- seeds the data order and held-out rows, new weights' init, dropout and mask sampling
  deterministic = false,            -- true: LibTorch's deterministic kernels (docs/reproducibility.md)
  wandb_project = "",               -- W&B project to log to; "" = none (docs/wandb.md)
  profile = "",                     -- trace profile_steps steps into this dir + a summary (docs/profiling.md); "" = off
                                    -- (a recipe with several training phases traces each into DIR/PHASE)
  profile_steps = 2,                -- optimizer steps traced when profile is set (a positive integer)
  profile_skip = 1,                 -- steps run untraced before the trace starts (warm-up)
})

-- A fine-tuning run on packed JSONL rows: its batches, held-out evaluation and resumable checkpoints.
M.training = set(M.compute, {
  warmup_steps = 20,                -- steps of linear warm-up from 0 to learning_rate
  batch_size = 4,                   -- rows per forward/backward on each rank (the micro-batch)
  gradient_accumulation_steps = 8,  -- micro-batches per optimizer step: batch_size x this rows a step on each rank
  max_length = 2048,                -- tokens per row; records are packed into rows of at most this
  chat_template = "",               -- how conversations render: "" = the model's own; a .jinja file or a name (docs/chat_formats.md)
  eval_fraction = 0.02,             -- share of the rows held out for eval_loss and eval_perplexity
  eval_steps = 100,                 -- evaluate every N steps and after the last
  save_steps = 200,                 -- resumable checkpoint every N steps (output_dir/checkpoints); 0 = only the final one
  resume = false,                   -- true: continue from the newest checkpoint in output_dir (docs/checkpoints.md)
  overwrite = false,                -- true: a fresh run moves an earlier run in output_dir to output_dir/previous-<time>/
})

-- The same on preference pairs (dpo, orpo, reward_model; scripts/lua/preference.lua): a batch counts pairs.
M.preference = set(M.training, {
  eval_data = "",                   -- held-out pairs JSONL; "" = eval_fraction of data
  warmup_steps = 10,                -- steps of linear warm-up from 0 to learning_rate
  batch_size = 2,                   -- pairs per forward/backward on each rank (2 x this rows: chosen, rejected)
  gradient_accumulation_steps = 8,  -- micro-batches per optimizer step: batch_size x this pairs a step on each rank
  max_length = 1024,                -- tokens per prompt + response; a pair whose response it cuts away is dropped
  eval_fraction = 0.05,             -- share of the pairs held out when eval_data is ""
  eval_steps = 50,                  -- evaluate every N steps, before the first and after the last
  save_steps = 100,                 -- resumable checkpoint every N steps (output_dir/checkpoints); 0 = only the final one
})

return M
