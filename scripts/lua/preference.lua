-- scripts/lua/preference.lua: what the alignment recipes (dpo, orpo, reward_model) share: their
-- training and held-out pair sets, and evaluation statistics logged under an eval_ prefix.
--   local pref = require("preference")
--   local train_set, eval_set = pref.sets(cfg, tok)   -- cfg.data, cfg.eval_data, cfg.eval_fraction, ...
--   local trainer, start, log = pref.start(model, cfg, eval_set, { schedule = "cosine", hooks = { dpo } })
--   pref.evaluate(log, step, trainer, eval_set, cfg)   -- every eval_ statistic, batches of cfg.batch_size
local M = {}

-- Pairs from cfg.data; held out: cfg.eval_data when given, else cfg.eval_fraction of cfg.data. When that
-- holds out no pair eval_set is nil and evaluation is off, with the warning run.sets gives for records.
function M.sets(cfg, tok)
  local opts = { tokenizer = tok, max_length = cfg.max_length, seed = cfg.seed }
  local train_set, eval_set = data.preferences(cfg.data, opts), nil
  if cfg.eval_data ~= "" then eval_set = data.preferences(cfg.eval_data, opts)
  else train_set, eval_set = train_set:split(1 - cfg.eval_fraction) end
  print(string.format("preference pairs: %d train, %d held out", #train_set, #eval_set))
  if cfg.eval_data == "" and #eval_set == 0 then
    local why = data.eval_split_warning(#train_set, cfg.eval_fraction, "pairs")
    if why then print("warning: " .. why) end
    eval_set = nil
  end
  return train_set, eval_set
end

-- run.start for pairs (scripts/lua/run.lua): a micro-batch of cfg.batch_size pairs is 2 x that many rows
-- (chosen, rejected). A fresh run is evaluated on eval_set before its first step, as step 0.
function M.start(model, cfg, eval_set, extra)
  local opts = { micro_batch_size = 2 * cfg.batch_size }
  for k, v in pairs(extra or {}) do opts[k] = v end
  local trainer, start, log = require("run").start(model, cfg, opts)
  if start == 0 then M.evaluate(log, 0, trainer, eval_set, cfg) end
  return trainer, start, log
end

-- trainer:evaluate's table -> {eval_loss = ..., eval_preference_accuracy = ..., ...}
function M.eval_fields(e)
  local out = {}
  for k, v in pairs(e) do
    if type(v) == "number" and k ~= "tokens" then out["eval_" .. k] = v end
  end
  return out
end

-- Evaluates on the held-out pairs (cfg.batch_size pairs a batch) and logs eval_fields of the result at
-- `step` (scripts/lua/run.lua).
function M.evaluate(log, step, trainer, eval_set, cfg)
  return require("run").evaluate(log, step, trainer, eval_set, cfg, M.eval_fields)
end

return M
