-- scripts/lua/run.lua: what the fine-tuning and alignment recipes do around their training loop: the
-- trainer built from the config's Hugging Face names, resume and the metrics log, one evaluation logged,
-- and the end of the run (weights saved, log closed, GGUF). The loop itself stays in each recipe.
--   local run = require("run")  -- scripts/lua/run.lua
--   local trainer = run.trainer(model, cfg, { schedule = "cosine" })
--   local start, log = run.start(cfg, trainer)
--   for step, batch in train_set:batches { size = ..., steps = cfg.max_steps, start = start } do
--     log:write(step, trainer:step(batch))
--     if step % cfg.eval_steps == 0 or step == cfg.max_steps then run.evaluate(log, step, trainer, eval_set, cfg) end
--     if log:stopped() then break end
--   end
--   run.save(cfg, model, tok, log, "adapter")  -- or "model"
local M = {}

-- train.new's options from the keys every training recipe's config has: learning_rate, warmup_steps,
-- max_steps, batch_size (the micro-batch), gradient_checkpointing, output_dir, save_steps, shard,
-- optimizer, optimizer_offload. `extra` adds to them or replaces them (schedule, hooks, weight_decay, ...).
function M.trainer(model, cfg, extra)
  local opts = { lr = cfg.learning_rate, warmup = cfg.warmup_steps, steps = cfg.max_steps,
                 micro_batch_size = cfg.batch_size, checkpoint_layers = cfg.gradient_checkpointing,
                 output_dir = cfg.output_dir, save_every = cfg.save_steps, shard = cfg.shard,
                 optimizer = cfg.optimizer, optimizer_offload = cfg.optimizer_offload }
  for k, v in pairs(extra or {}) do opts[k] = v end
  return train.new(model, opts)
end

-- Resumes from output_dir's newest checkpoint when cfg.resume, and opens the metrics log: console,
-- output_dir/metrics.jsonl, and W&B when cfg.wandb_project is set. Returns the step the run resumes
-- after (0 for a fresh run) and the log.
function M.start(cfg, trainer)
  local start = cfg.resume and trainer:resume() or 0
  local log = metrics.open { console = true, jsonl = cfg.output_dir .. "/metrics.jsonl", total_steps = cfg.max_steps,
                             config = cfg, resume = start, wandb = cfg.wandb_project }
  return start, log
end

-- Evaluates on eval_set in batches of cfg.batch_size and logs, at `step`, eval_loss and eval_perplexity
-- (or what fields(result) makes of the result). Returns trainer:evaluate's table.
function M.evaluate(log, step, trainer, eval_set, cfg, fields)
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
