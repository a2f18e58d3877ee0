-- scripts/lua/run.lua: what the fine-tuning and alignment recipes do around their training loop: the
-- training and held-out rows, the trainer built from the config's Hugging Face names with resume and the
-- metrics log, the loop's batches, one evaluation logged, and the end of the run (weights saved, log
-- closed, GGUF). The loop itself stays in each fine-tuning recipe, where users change it (the alignment
-- recipes share theirs: scripts/lua/preference.lua).
--   local run = require("run")  -- scripts/lua/run.lua
--   local train_set, eval_set = run.sets(cfg, tok)
--   local trainer, start, log = run.start(model, cfg, { schedule = "cosine" })
--   for step, batch in run.batches(train_set, cfg, start, log) do
--     log:write(step, trainer:step(batch))
--     if step % cfg.eval_steps == 0 or step == cfg.max_steps then run.evaluate(log, step, trainer, eval_set, cfg) end
--   end
--   run.save(cfg, model, tok, log, "adapter")  -- or "model"
-- The config keys these read are the sets of scripts/lua/run_keys.lua.
local M = {}

-- A trainer over the config's keys that train.new takes under the same names (learning_rate, warmup_steps,
-- max_steps, batch_size (the micro-batch), gradient_checkpointing, output_dir, save_steps, weight_decay,
-- shard, optimizer, profile, ...), `extra` over them (schedule, hooks, ...). `phase` names the profile's
-- subdirectory in a recipe with several trainers (pruning, recovery, ...), so each phase keeps its trace.
function M.trainer(model, cfg, extra, phase)
  local opts = config.pick(cfg, "train.new", extra)
  if phase and opts.profile and opts.profile ~= "" then opts.profile = opts.profile .. "/" .. phase end
  return train.new(model, opts)
end

-- Packed rows of cfg.data (records of up to cfg.max_length tokens, shuffled by cfg.seed), split into
-- the training set and cfg.eval_fraction held out. `opts` adds data.jsonl options (format = "text"). A
-- relative cfg.data is also looked for in the checkout and beside the runner (scripts/lua/paths.lua): the
-- recipes' default, data/example_chat.jsonl, is built there.
-- The held-out split is decided here, before the first step: when eval_fraction holds out no record
-- (eval_fraction = 0, or too few records) eval_set is nil and run.evaluate does nothing, with a warning
-- that says how to hold one out (data.eval_split_warning, the line `runner validate` prints too).
function M.sets(cfg, tok, opts)
  local o = { tokenizer = tok, max_length = cfg.max_length, pack = true, seed = cfg.seed,
              chat_template = cfg.chat_template }
  for k, v in pairs(opts or {}) do o[k] = v end
  local train_set, eval_set = data.jsonl(require("paths").resolve(cfg.data), o):split(1 - cfg.eval_fraction)
  if #eval_set > 0 then return train_set, eval_set end
  local why = data.eval_split_warning(train_set:stats().records, cfg.eval_fraction)
  if why then print("warning: " .. why) end
  return train_set, nil
end

-- The trainer (M.trainer), resumed from output_dir's newest checkpoint when cfg.resume, and the metrics
-- log: console, output_dir/metrics.jsonl, and W&B when cfg.wandb_project is set. Returns the trainer,
-- the step the run resumes after (0 for a fresh run) and the log.
function M.start(model, cfg, extra)
  local trainer = M.trainer(model, cfg, extra)
  local start = cfg.resume and trainer:resume() or 0
  local log = metrics.open { console = true, jsonl = cfg.output_dir .. "/metrics.jsonl", config = cfg, resume = start,
                             wandb = cfg.wandb_project }  -- the progress bar's length: cfg.max_steps
  return trainer, start, log
end

-- The loop's batches, (step, batch) from step start + 1 to cfg.max_steps: each batch_size x
-- gradient_accumulation_steps rows (pairs in a preference set), one optimizer step on this rank. Ends
-- early once log:stopped() (the run was stopped from the W&B UI), so the recipe saves what there is.
function M.batches(set, cfg, start, log)
  local next_batch = set:batches(config.pick(cfg, "BatchesOpts", {  -- to cfg.max_steps
    size = cfg.batch_size * cfg.gradient_accumulation_steps, start = start }))
  return function()
    if log:stopped() then return nil end
    return next_batch()
  end
end

-- Evaluates on eval_set in batches of cfg.batch_size and logs, at `step`, eval_loss and eval_perplexity
-- (or what fields(result) makes of the result). Returns trainer:evaluate's table; nil, doing nothing, when
-- eval_set is nil (M.sets held nothing out). At the last step (cfg.max_steps) the trainer's checkpoint is
-- saved first, so a failing evaluation never costs the finished training: resume=true then writes the weights.
function M.evaluate(log, step, trainer, eval_set, cfg, fields)
  if eval_set == nil then return nil end
  local dir = rawget(cfg, "output_dir")  -- rawget: a caller's config may lack the keys
  if step == rawget(cfg, "max_steps") and dir and dir ~= "" then trainer:save() end
  local e = trainer:evaluate(eval_set, { batch_size = cfg.batch_size })
  log:write(step, fields and fields(e) or { eval_loss = e.loss, eval_perplexity = e.perplexity })
  return e
end

-- The end of a run: the weights to output_dir/adapter (what = "adapter": a PEFT adapter that names
-- cfg.base_model) or to output_dir/model ("model": Hugging Face, with the tokenizer); the log closed;
-- "<label>: <dir>" printed; then output_dir/model.gguf when the config has a gguf key that is not ""
-- (an adapter is merged into base_model in float32). Returns the directory written.
function M.save(cfg, model, tok, log, what, label)
  assert(what == "adapter" or what == "model", "run.save: what must be \"adapter\" or \"model\"")
  local dir = cfg.output_dir .. "/" .. what
  if what == "adapter" then lora.save(model, dir, { base_model = cfg.base_model })
  else model:save(dir, { tokenizer = tok }) end
  log:close()
  print((label or (what == "adapter" and "adapter (PEFT format)" or "model (Hugging Face format)")) .. ": " .. dir)
  local outtype = rawget(cfg, "gguf")  -- cfg raises on a key it lacks; not every recipe has gguf
  local gguf_out = require("gguf_out")  -- scripts/lua/gguf_out.lua
  if what == "adapter" then gguf_out.write(outtype, cfg.output_dir, cfg.base_model, dir)
  else gguf_out.write(outtype, cfg.output_dir, dir) end
  return dir
end

return M
