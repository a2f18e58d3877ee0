-- scripts/lua/pruning.lua: what the pruning recipes share.
--   local P = require("pruning")
--   local batches, rows = P.calibration(dataset, 128, 8)   -- the first 128 rows, 8 per Batch
--   local train_set, eval_set, calibration = P.text_sets(cfg, tok)  -- cfg.data, eval_fraction, calibration_rows
--   local ppl = P.perplexity(model, eval_set, { batch_size = 8, max_batches = 0 })
--   for step, batch in P.batches(train_set or dyn, rows_per_step, steps) do ... end
--   local steps = P.sheared_steps(cfg, rows)           -- llama31_sheared: {rows_per_step, total, pruning, recovery}
local M = {}

-- The first `rows` rows of a dataset (in its seeded order) as a list of Batches of at most
-- `batch_size` rows: the calibration set every one-shot method sees. Returns the list and the rows.
function M.calibration(dataset, rows, batch_size)
  local out, n = {}, 0
  for _, batch in dataset:batches { size = math.min(batch_size, rows) } do
    if n >= rows then break end
    out[#out + 1] = batch
    n = n + batch:ids():shape()[1]
  end
  return out, n
end

-- A pruning run's result is its held-out perplexity, so a split that holds out nothing is an error
-- before anything is pruned (run.sets's warning-and-go-on is for fine-tuning).
local function need_eval_rows(eval_set, rows, cfg)
  if #eval_set > 0 then return end
  error(("data: eval_fraction = %s holds out none of the %d packed rows of %s, and this recipe reports held-out "
    .. "perplexity; hint: raise eval_fraction (%s holds out about one) or give more data")
    :format(tostring(cfg.eval_fraction), rows, cfg.data, rows > 1 and ("%.2g"):format(1.5 / rows) or "1"), 0)
end

-- The one-shot pruning recipes' data: cfg.data as plain text in packed rows of at most cfg.max_length
-- tokens (seeded order), split by cfg.eval_fraction, and the first cfg.calibration_rows training rows
-- as calibration batches of cfg.batch_size rows. Prints the counts; returns train_set, eval_set and
-- the calibration list.
function M.text_sets(cfg, tok)
  local all = data.jsonl(require("paths").resolve(cfg.data), { tokenizer = tok, format = "text", pack = true,
                                                                max_length = cfg.max_length, seed = cfg.seed })
  local train_set, eval_set = all:split(1 - cfg.eval_fraction)
  need_eval_rows(eval_set, #all, cfg)
  local calibration, rows = M.calibration(train_set, cfg.calibration_rows, cfg.batch_size)
  print(("calibration: %d rows of up to %d tokens; evaluation: %d held-out rows"):format(rows, cfg.max_length,
                                                                                        #eval_set))
  return train_set, eval_set, calibration
end

-- Held-out perplexity of the model as it is now. The trainer is made fresh (pruning replaces the
-- weights a trainer holds) and only evaluates, so it allocates no optimizer state.
function M.perplexity(model, eval_set, opts)
  return train.new(model, { schedule = "constant" }):evaluate(eval_set, opts).perplexity
end

-- (step, Batch) for `steps` steps of `size` rows: from a Dataset (epochs cycled, seeded shuffle), or
-- from a dynamic_batches loader (each row's domain drawn from the current proportions).
function M.batches(source, size, steps)
  if source.batches then return source:batches { size = size, max_steps = steps } end
  local step = 0
  return function()
    if step >= steps then return nil end
    step = step + 1
    return step, (source:batch(size))
  end
end

-- Checks a saved model directory: its shape equals `target` (prune.shape keys), and it reloads and
-- generates. Fails naming the first difference.
function M.check_saved(dir, target, tok)
  local back = models.load(dir, { dtype = "float32" })
  local got = prune.shape(back)
  for _, k in ipairs { "layers", "heads", "kv_heads", "hidden", "intermediate", "head_dim" } do
    assert(got[k] == target[k], string.format("check: %s is %d, the target %d", k, got[k], target[k]))
  end
  local _, info = back:generate(tok, "The", { max_new_tokens = 4 })
  assert(info.new_tokens > 0, "check: the pruned model generated nothing")
  print("check: the saved model has the target shape, reloads and generates")
end

-- ---------------------------------------------------------------------------------------------
-- llama31_sheared

-- The steps of a Sheared-LLaMA run: num_train_epochs over `rows` training rows, batch_size x
-- gradient_accumulation_steps rows a step (at most max_steps when it is > 0); the first prune_fraction
-- of them (at least 1) learn masks, the rest recover. Returns {rows_per_step, total, pruning, recovery}.
function M.sheared_steps(cfg, rows)
  local rows_per_step = cfg.batch_size * cfg.gradient_accumulation_steps
  local total = cfg.num_train_epochs * math.max(1, math.ceil(rows / rows_per_step))
  if cfg.max_steps > 0 then total = math.min(total, cfg.max_steps) end
  local pruning = math.max(1, math.floor(total * cfg.prune_fraction + 0.5))
  return { rows_per_step = rows_per_step, total = total, pruning = pruning, recovery = math.max(0, total - pruning) }
end

-- A phase's trainer (pruning or recovery) over `steps` steps (run.trainer: the config's train.new keys):
-- its own warm-up (warmup_ratio of them) and cosine decay to 0.1 x learning_rate, AdamW betas (0.9, 0.95)
-- as in Sheared-LLaMA. No checkpoints (output_dir = ""): a phase is not resumable.
function M.sheared_trainer(model, cfg, steps, hooks, phase)
  return require("run").trainer(model, cfg, { betas = { 0.9, 0.95 }, schedule = "cosine", max_steps = steps,
                                              warmup_steps = math.floor(cfg.warmup_ratio * steps), min_lr_ratio = 0.1,
                                              hooks = hooks, output_dir = "" }, phase)
end

-- The distillation hook of llama31_sheared's recovery phase and the live teacher it holds (nil when
-- cached): the unpruned base_model as the teacher, in teacher_dtype on teacher_device, sharded over
-- the ranks with teacher_shard; or, with teacher_cache=DIR, its top-k logits over train_set written
-- there first (rank 0; the others wait) and the recovery distilled from them with no teacher loaded
-- (docs/distill.md). The cache is keyed by train_set's rows, so it needs one data file, not domains.
function M.recovery_hooks(model, cfg, train_set, domains)
  local function load_teacher()
    return models.load(cfg.base_model, { dtype = cfg.teacher_dtype ~= "" and cfg.teacher_dtype or cfg.dtype,
                                         device = cfg.teacher_device ~= "" and cfg.teacher_device or cfg.device })
  end
  if cfg.teacher_cache == "" then
    local teacher = load_teacher()
    return { distill.new(teacher, model, { loss = cfg.distill_loss, alpha = cfg.distill_alpha,
                                           temperature = cfg.distill_temperature,
                                           shard_teacher = cfg.teacher_shard }) }, teacher
  end
  assert(not domains, "llama31_sheared: teacher_cache needs one data file (the cache is keyed by its rows), not domains")
  if dist.is_main() then
    local t = load_teacher()
    local w = distill.write_cache(t, train_set, { path = cfg.teacher_cache, k = cfg.teacher_cache_k,
                                                  dtype = cfg.teacher_cache_dtype, temperature = cfg.distill_temperature,
                                                  batch_size = cfg.batch_size })
    t:release()
    print(string.format("teacher cache: %d rows, %d tokens, top-%d %s, %.1f MB in %s", w.rows, w.entries, w.k, w.dtype,
                        w.bytes / 1e6, cfg.teacher_cache))
  end
  dist.barrier()
  return { distill.cached(model, { path = cfg.teacher_cache, loss = cfg.distill_loss, alpha = cfg.distill_alpha,
                                   temperature = cfg.distill_temperature }) }, nil
end

-- The training rows (nil with domains) and the held-out rows of a Sheared-LLaMA run: cfg.data split by
-- eval_fraction, or with cfg.domains (see M.domains) the first domain's held-out rows (each domain's
-- loss is logged too). Returns domains (nil without), train_set, eval_set.
function M.sheared_data(cfg, tok)
  local load_opts = { tokenizer = tok, max_length = cfg.max_length, pack = true, seed = cfg.seed,
                      chat_template = cfg.chat_template }
  if cfg.format ~= "" then load_opts.format = cfg.format end
  local domains = M.domains(cfg.domains, load_opts, cfg.eval_fraction)
  if domains then return domains, nil, domains.sets[domains.names[1]].eval end
  local all = data.jsonl(require("paths").resolve(cfg.data), load_opts)
  local train_set, eval_set = all:split(1 - cfg.eval_fraction)
  need_eval_rows(eval_set, #all, cfg)
  return nil, train_set, eval_set
end

-- The end of a Sheared-LLaMA run, once output_dir/model is saved: output_dir/summary.json, the run's
-- summary line, the log closed and one line printed. `r` holds what the recipe measured:
-- shape_before, shape_after, parameters_before, perplexity {before, after_pruning, after_recovery},
-- steps (M.sheared_steps), tokens {pruning, recovery}, seconds {pruning, recovery, total} and
-- domain_proportions (nil without domains). Returns the summary.
function M.sheared_summary(cfg, model, log, r)
  local params_after, ppl = model:num_params().total, r.perplexity
  local summary = {
    base_model = cfg.base_model,
    target_sparsity = { layers = cfg.target_layer_sparsity, heads = cfg.target_head_sparsity,
                        hidden = cfg.target_hidden_sparsity, intermediate = cfg.target_intermediate_sparsity },
    shape_before = r.shape_before, shape_after = r.shape_after,
    parameters_before = r.parameters_before, parameters_after = params_after,
    parameters_kept = params_after / r.parameters_before,
    perplexity = { before = ppl.before, after_pruning = ppl.after_pruning, after_recovery = ppl.after_recovery },
    steps = { pruning = r.steps.pruning, recovery = r.steps.recovery },
    tokens = { pruning = r.tokens.pruning, recovery = r.tokens.recovery },
    distilled = cfg.distill and r.steps.recovery > 0,
    seconds = { pruning = r.seconds.pruning, recovery = r.seconds.recovery, total = r.seconds.total },
    model_dir = cfg.output_dir .. "/model",
    domain_proportions = r.domain_proportions,
  }
  metrics.write_json(cfg.output_dir .. "/summary.json", summary)
  log:summary { parameters_kept = summary.parameters_kept, perplexity_before = ppl.before,
                perplexity_after = ppl.after_recovery }
  log:close()
  print(string.format("%.1fM -> %.1fM parameters (%.0f%%); perplexity %.3f -> %.3f (pruned) -> %.3f; wrote %s",
                      r.parameters_before / 1e6, params_after / 1e6, 100 * summary.parameters_kept, ppl.before,
                      ppl.after_pruning, ppl.after_recovery, cfg.output_dir))
  return summary
end

-- ---------------------------------------------------------------------------------------------
-- Data domains

-- "name:value" strings (what a command line can give: domains=web:web.jsonl,code:code.jsonl) or a
-- {name = value} table -> {name = value}; `number` converts the values.
local function named(list, what, number)
  local out = {}
  for k, v in pairs(list) do
    local name, value = k, v
    if type(k) == "number" then
      name, value = tostring(v):match("^([^:=]+)[:=](.+)$")
      assert(name, string.format("%s: entry %q must be name:value", what, tostring(v)))
    end
    out[name] = number and assert(tonumber(value), what .. ": " .. name .. " is not a number") or value
  end
  return out
end

-- Data domains for Sheared-LLaMA's dynamic batch loading: "name:file.jsonl" entries (or a {name =
-- file} table) loaded with `load_opts`, each split into train and eval rows. Returns nil when
-- `paths` is empty, else
--   d.names (sorted), d.sets[name] = {train=, eval=}, d:rows() (training rows in all),
--   d:start(model, reference_loss, seed, eval_opts): the dynamic_batches loader (reference losses
--     default to the model's own eval loss per domain), kept as d.loader and returned;
--   d:update(trainer, step, log, eval_opts): evaluates each domain, moves the proportions, logs both.
function M.domains(paths, load_opts, eval_fraction)
  local d = { names = {}, sets = {} }
  paths = named(paths, "domains")
  for name in pairs(paths) do d.names[#d.names + 1] = name end
  if #d.names == 0 then return nil end
  table.sort(d.names)
  for _, name in ipairs(d.names) do
    local tr, ev = data.jsonl(paths[name], load_opts):split(1 - eval_fraction)
    d.sets[name] = { train = tr, eval = ev }
  end
  function d:rows()
    local n = 0
    for _, s in pairs(self.sets) do n = n + #s.train end
    return n
  end
  function d:start(model, reference_loss, seed, eval_opts)
    local ref = named(reference_loss, "domain_reference_loss", true)
    if next(ref) == nil then
      ref = {}
      for _, name in ipairs(self.names) do
        ref[name] = train.new(model, { schedule = "constant" }):evaluate(self.sets[name].eval, eval_opts).loss
      end
    end
    local train_sets = {}
    for _, name in ipairs(self.names) do train_sets[name] = self.sets[name].train end
    self.loader = require("dynamic_batches").new { domains = train_sets, reference_loss = ref, seed = seed }
    return self.loader
  end
  function d:update(trainer, step, log, eval_opts)
    local losses, line = {}, {}
    for _, name in ipairs(self.names) do
      losses[name] = trainer:evaluate(self.sets[name].eval, eval_opts).loss
      line["eval_loss_" .. name] = losses[name]
    end
    self.loader:update(losses)
    for name, p in pairs(self.loader:proportions()) do line["proportion_" .. name] = p end
    log:write(step, line)
  end
  return d
end

return M
