-- tests/lua/test_recipe_helpers.lua: the helpers recipes share from scripts/lua: run.lua (trainer from
-- the config's names, resume and log, the loop's batches, evaluation, the end of a run), run_keys.lua
-- (the shared config keys), preference.evaluate, and
-- pruning.sheared_steps / sheared_summary. The recipes themselves run in tests/recipes.
-- Run: build/runner tests/lua/test_recipe_helpers.lua
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises
local T = require "tiny"  -- tests/lua/tiny.lua
local run = require "run"
local P = require "pruning"

local TMP = os.tmpname()
os.remove(TMP)
os.execute("mkdir -p '" .. TMP .. "'")

local function lines_of(path)
  local out = {}
  for line in io.lines(path) do out[#out + 1] = line end
  return out
end

-- A config as config{} returns it: reading a key it lacks raises.
local function strict(t)
  return setmetatable(t, { __index = function(_, k) error("config: no key '" .. tostring(k) .. "'", 2) end })
end

-- The keys every training recipe's config has, in `dir`.
local function training_cfg(dir, extra)
  local cfg = { learning_rate = 0.1, warmup_steps = 2, max_steps = 10, batch_size = 2, gradient_checkpointing = false,
                output_dir = dir, save_steps = 0, shard = "none", optimizer = "sgd", optimizer_offload = "none",
                resume = false, wandb_project = "", base_model = "org/tiny", profile = "",
                profile_steps = 2, profile_skip = 1 }
  for k, v in pairs(extra or {}) do cfg[k] = v end
  return strict(cfg)
end

-- ---------------------------------------------------------------------------------------------
-- run.lua

test("run.trainer: learning_rate, warmup_steps and max_steps make the schedule; extra adds and replaces", function()
  local cfg = training_cfg(TMP .. "/trainer")
  local t = run.trainer(T.model(), cfg, { schedule = "cosine" })
  ok(tostring(t):find("^Trainer%(sgd, lr 0.100000, cosine, step 0"), tostring(t))
  eq(t:lr(1), 0.05, 1e-12)  -- warm-up: 1 of 2 steps
  eq(t:lr(2), 0.1, 1e-12)
  eq(t:lr(10), 0, 1e-12)  -- cosine to 0 at max_steps
  local floor = run.trainer(T.model(), cfg, { schedule = "cosine", min_lr_ratio = 0.1, learning_rate = 0.2 })
  eq(floor:lr(10), 0.02, 1e-12)
end)

test("run.start, run.evaluate, run.save: metrics.jsonl with eval lines, then the model saved and the log closed", function()
  local dir = TMP .. "/model_run"
  local cfg = training_cfg(dir)
  local model = T.model()
  local trainer, start, log = run.start(model, cfg, { schedule = "constant" })
  eq(start, 0)
  local e = run.evaluate(log, 3, trainer, { T.batch(1, 50, 2, 8) }, cfg)
  ok(e.loss > 0 and e.perplexity > 1, "evaluate's table is returned")
  local fields = run.evaluate(log, 4, trainer, { T.batch(1, 50, 2, 8) }, cfg, function(r) return { eval_x = r.loss } end)
  eq(fields.loss, e.loss)
  eq(run.save(cfg, model, nil, log, "model"), dir .. "/model")  -- cfg has no gguf key: nothing more
  eq(tostring(log), "Metrics(closed)")
  ok(io.open(dir .. "/model/config.json"), "model/config.json written")
  ok(io.open(dir .. "/model/model.safetensors"), "model/model.safetensors written")
  ok(not io.open(dir .. "/model.gguf"), "no GGUF without a gguf key")
  local lines = lines_of(dir .. "/metrics.jsonl")
  ok(lines[1]:find('^{"config":{') and lines[1]:find('"max_steps":10'), lines[1])
  ok(lines[2]:find('"step":3,') and lines[2]:find('"eval_loss":') and lines[2]:find('"eval_perplexity":'), lines[2])
  ok(lines[3]:find('"step":4,') and lines[3]:find('"eval_x":') and not lines[3]:find("eval_loss"), lines[3])
end)

test("run.save \"adapter\": a PEFT adapter that names base_model; gguf = \"\" writes no GGUF", function()
  local dir = TMP .. "/adapter_run"
  local cfg = training_cfg(dir, { gguf = "" })
  local model = T.model()
  lora.apply(model, { r = 2, targets = { "q_proj" } })
  local _, _, log = run.start(model, cfg, { schedule = "constant" })
  eq(run.save(cfg, model, nil, log, "adapter"), dir .. "/adapter")
  local text = h.read_file(dir .. "/adapter/adapter_config.json")
  ok(text:find('"base_model_name_or_path": "org/tiny"', 1, true), text)
  ok(not io.open(dir .. "/model.gguf"), "no GGUF for gguf = \"\"")
  raises(function() run.save(cfg, model, nil, log, "weights") end, 'run.save: what must be "adapter" or "model"')
end)

-- n text records in a JSONL file at path, and the byte-level tokenizer that reads them.
local function text_rows(path, n)
  local f = assert(io.open(path, "w"))
  for i = 1, n do f:write('{"text": "hello world ' .. i .. '"}\n') end
  f:close()
  return path, tokenizer.load("tests/fixtures/tokenizers/bytelevel")
end

test("run.sets: an eval_fraction that holds out none of the records turns evaluation off (eval_set nil)", function()
  local path, tok = text_rows(TMP .. "/16.jsonl", 16)
  local cfg = strict { data = path, max_length = 16, seed = 0, eval_fraction = 0.02, chat_template = "" }
  local train_set, eval_set = run.sets(cfg, tok, { format = "text" })
  eq(eval_set, nil)  -- 16 x 0.02 rounds to 0: decided here, before any step
  eq(train_set:stats().records, 16)
  ok(data.eval_split_warning(16, 0.02):find("^data: eval_fraction = 0.02 holds out none of the 16 records"),
     "the warning run.sets prints (and runner validate)")
  cfg.eval_fraction = 0
  eq(select(2, run.sets(cfg, tok, { format = "text" })), nil)
  eq(data.eval_split_warning(16, 0), nil)  -- asked for no evaluation: no warning
  cfg.eval_fraction = 0.1
  eq(select(2, run.sets(cfg, tok, { format = "text" })):stats().records, 2)
  eq(data.eval_split_warning(16, 0.1), nil)
end)

test("pruning.text_sets and sheared_data: a split that holds out nothing is an error (perplexity is their result)", function()
  local path, tok = text_rows(TMP .. "/prune16.jsonl", 16)
  local cfg = strict { data = path, max_length = 16, seed = 0, eval_fraction = 0.02, calibration_rows = 2,
                       batch_size = 2, format = "text", domains = {}, chat_template = "" }
  local err = raises(function() P.text_sets(cfg, tok) end, "data: eval_fraction = 0.02 holds out none of the ")
  ok(err:find("this recipe reports held-out perplexity; hint: raise eval_fraction", 1, true), err)
  ok(not err:find("pruning.lua", 1, true), "raised at level 0: no position, the runner prints it as a user error")
  raises(function() P.sheared_data(cfg, tok) end, "holds out none of the ")
  cfg.eval_fraction = 0.25
  local _, eval_set = P.text_sets(cfg, tok)
  ok(#eval_set > 0)
end)

test("run.evaluate: nil eval_set does nothing; at max_steps the checkpoint is saved before evaluating", function()
  local dir = TMP .. "/final_save"
  local cfg = training_cfg(dir, { max_steps = 1 })
  local trainer, _, log = run.start(T.model(), cfg, { schedule = "constant" })
  log:write(1, trainer:step(T.batch(1, 50, 2, 8)))
  eq(run.evaluate(log, 1, trainer, nil, cfg), nil)
  -- An evaluation that fails (no batches, nothing to evaluate on) no longer costs the finished training.
  raises(function() run.evaluate(log, 1, trainer, {}, cfg) end, "the evaluation batches have no target tokens")
  ok(io.open(dir .. "/checkpoints/step-0000001/trainer.json"), "the final checkpoint is written before evaluating")
  log:close()
end)

test("run.batches: batch_size x gradient_accumulation_steps rows a step, to max_steps; ends once the log is stopped", function()
  local asked
  local set = { batches = function(_, opts)
    asked = opts
    local step = opts.start
    return function() step = step + 1; if step <= opts.max_steps then return step, "batch" .. step end end
  end }
  local stopped = false
  local log = { stopped = function() return stopped end }
  local steps = {}
  for step, batch in run.batches(set, { batch_size = 2, gradient_accumulation_steps = 3, max_steps = 9 }, 4, log) do
    steps[#steps + 1] = batch
    if step == 6 then stopped = true end
  end
  eq(asked, { size = 6, max_steps = 9, start = 4 })
  eq(steps, { "batch5", "batch6" })
end)

-- ---------------------------------------------------------------------------------------------
-- run_keys.lua: the keys training recipes share

test("run_keys: a set adds its keys and its included set's; the recipe's own keys win", function()
  local keys = require "run_keys"
  local cfg = keys.training { learning_rate = 1e-3, batch_size = 8, lora = { r = 4 } }
  eq(cfg.learning_rate, 1e-3)
  eq(cfg.batch_size, 8)                  -- the recipe's default over the set's 4
  eq(cfg.lora, { r = 4 })
  eq(cfg.gradient_accumulation_steps, 8) -- from training
  eq(cfg.shard, "none")                  -- from compute, which training includes
  eq(cfg.resume, false)
  local p = keys.preference {}
  eq({ p.batch_size, p.eval_steps, p.eval_data, p.optimizer }, { 2, 50, "", "adamw" })
  local c = keys.compute {}
  eq({ c.resume, c.batch_size, c.seed }, { nil, nil, 0 })  -- compute has no checkpoint or batch keys
  c.seed = 5
  eq(keys.compute {}.seed, 0)  -- each call is a fresh table
end)

test("preference.evaluate logs every number but tokens under eval_", function()
  local pref = require "preference"
  eq(pref.eval_fields { loss = 0.5, preference_accuracy = 1, tokens = 40, note = "x" },
     { eval_loss = 0.5, eval_preference_accuracy = 1 })
  local path = TMP .. "/pref.jsonl"
  local log = metrics.open { console = false, jsonl = path, report = false }
  local fake = { evaluate = function(_, set, opts) return { loss = 0.25, margin = #set + opts.batch_size, tokens = 9 } end }
  pref.evaluate(log, 7, fake, { 1, 2, 3 }, strict { batch_size = 4 })
  log:close()
  local line = lines_of(path)[1]
  ok(line:find('"step":7,') and line:find('"eval_loss":0.25') and line:find('"eval_margin":7')
     and not line:find("tokens"), line)
end)

-- ---------------------------------------------------------------------------------------------
-- pruning.lua: llama31_sheared's steps and summary

test("sheared_steps: epochs over the rows, max_steps caps, the first prune_fraction (at least 1) prunes", function()
  local function steps(over, rows)
    local cfg = { batch_size = 4, gradient_accumulation_steps = 2, num_train_epochs = 2, max_steps = 0,
                  prune_fraction = 0.5 }
    for k, v in pairs(over) do cfg[k] = v end
    local s = P.sheared_steps(strict(cfg), rows)
    return { s.rows_per_step, s.total, s.pruning, s.recovery }
  end
  eq(steps({}, 20), { 8, 6, 3, 3 })  -- ceil(20 / 8) = 3 steps an epoch, 2 epochs
  eq(steps({ max_steps = 4 }, 20), { 8, 4, 2, 2 })
  eq(steps({ max_steps = 100 }, 20), { 8, 6, 3, 3 })
  eq(steps({ prune_fraction = 0 }, 20), { 8, 6, 1, 5 })
  eq(steps({ prune_fraction = 1 }, 20), { 8, 6, 6, 0 })
  eq(steps({ prune_fraction = 0.25 }, 20), { 8, 6, 2, 4 })  -- 1.5 rounds up
  eq(steps({}, 0), { 8, 2, 1, 1 })  -- at least one step an epoch
end)

test("sheared_summary: summary.json from what the recipe measured, the summary line, the log closed", function()
  local dir = TMP .. "/sheared"
  os.execute("mkdir -p '" .. dir .. "'")
  local cfg = strict { base_model = "org/base", output_dir = dir, distill = true, target_layer_sparsity = 0.5,
                       target_head_sparsity = 0.25, target_hidden_sparsity = 0, target_intermediate_sparsity = 0.5 }
  local log = metrics.open { console = false, jsonl = dir .. "/metrics.jsonl", report = false }
  local model = T.model()
  local shape = prune.shape(model)
  local s = P.sheared_summary(cfg, model, log, {
    shape_before = shape, shape_after = shape, parameters_before = 2 * model:num_params().total,
    perplexity = { before = 10, after_pruning = 30, after_recovery = 12 }, steps = { total = 5, pruning = 2, recovery = 3 },
    tokens = { pruning = 100, recovery = 150 }, seconds = { pruning = 1, recovery = 2, total = 4 } })
  eq(tostring(log), "Metrics(closed)")
  eq(s.parameters_kept, 0.5)
  eq(s.distilled, true)
  eq(s.steps, { pruning = 2, recovery = 3 })
  eq(s.domain_proportions, nil)
  local text = h.read_file(dir .. "/summary.json")
  for _, want in ipairs { '"base_model":"org/base"', '"parameters_kept":0.5', '"after_recovery":12', '"distilled":true',
                          '"model_dir":"' .. dir .. '/model"', '"intermediate":0.5' } do
    ok(text:find(want, 1, true), want .. " in " .. text)
  end
  local lines = lines_of(dir .. "/metrics.jsonl")
  ok(lines[#lines]:find('^{"summary":{') and lines[#lines]:find('"perplexity_after":12'), lines[#lines])
end)

h.run()
os.execute("rm -rf '" .. TMP .. "'")
