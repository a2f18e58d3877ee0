-- scripts/lua/preference.lua: what the alignment recipes (dpo, orpo, reward_model) share: their
-- training and held-out pair sets, and evaluation statistics logged under an eval_ prefix.
--   local pref = require("preference")
--   local tok, model = pref.load(cfg)                  -- cfg.base_model, with LoRA when cfg.use_lora
--   local train_set, eval_set = pref.sets(cfg, tok)   -- cfg.data, cfg.eval_data, cfg.eval_fraction, ...
--   local trainer, log = pref.train(model, cfg, train_set, eval_set, { schedule = "cosine", hooks = { dpo } })
--   local trainer, start, log = pref.start(model, cfg, eval_set, { schedule = "cosine", hooks = { dpo } })
--   pref.evaluate(log, step, trainer, eval_set, cfg)   -- every eval_ statistic, batches of cfg.batch_size
local M = {}

-- The tokenizer and model of cfg.base_model (dtype, device, quantize), with cfg.lora's adapters when
-- cfg.use_lora.
function M.load(cfg)
  local tok = tokenizer.load(cfg.base_model)
  local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device, quantize = cfg.quantize })
  if cfg.use_lora then lora.apply(model, cfg.lora, { seed = cfg.seed }) end
  return tok, model
end

-- Pairs from cfg.data; held out: cfg.eval_data when given, else cfg.eval_fraction of cfg.data. When that
-- holds out no pair eval_set is nil and evaluation is off, with the warning run.sets gives for records.
function M.sets(cfg, tok)
  local opts = { tokenizer = tok, max_length = cfg.max_length, seed = cfg.seed, chat_template = cfg.chat_template }
  local train_set, eval_set = data.preferences(require("paths").resolve(cfg.data), opts), nil
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
  local opts = { batch_size = 2 * cfg.batch_size }  -- train.new's batch_size counts rows
  for k, v in pairs(extra or {}) do opts[k] = v end
  local trainer, start, log = require("run").start(model, cfg, opts)
  if start == 0 then M.evaluate(log, 0, trainer, eval_set, cfg) end
  return trainer, start, log
end

-- Trains on train_set to cfg.max_steps (or until stopped from the W&B UI), evaluating every
-- cfg.eval_steps and at the last step, then saves the final checkpoint. `extra` as for M.start.
function M.train(model, cfg, train_set, eval_set, extra)
  local run = require("run")
  local trainer, start, log = M.start(model, cfg, eval_set, extra)
  for step, batch in run.batches(train_set, cfg, start, log) do
    log:write(step, trainer:step(batch))
    if step % cfg.eval_steps == 0 or step == cfg.max_steps then M.evaluate(log, step, trainer, eval_set, cfg) end
  end
  trainer:save()
  return trainer, log
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
