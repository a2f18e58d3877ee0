-- scripts/lua/pruning.lua: what the pruning recipes share.
--   local P = require("pruning")
--   local batches, rows = P.calibration(dataset, 128, 8)   -- the first 128 rows, 8 per Batch
--   local ppl = P.perplexity(model, eval_set, { batch_size = 8, max_batches = 0 })
--   for step, batch in P.batches(train_set or dyn, rows_per_step, steps) do ... end
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

-- Held-out perplexity of the model as it is now. The trainer is made fresh (pruning replaces the
-- weights a trainer holds) and only evaluates, so it allocates no optimizer state.
function M.perplexity(model, eval_set, opts)
  return train.new(model, { schedule = "constant" }):evaluate(eval_set, opts).perplexity
end

-- (step, Batch) for `steps` steps of `size` rows: from a Dataset (epochs cycled, seeded shuffle), or
-- from a dynamic_batches loader (each row's domain drawn from the current proportions).
function M.batches(source, size, steps)
  if source.batches then return source:batches { size = size, steps = steps } end
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
end

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
