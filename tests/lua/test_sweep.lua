-- tests/lua/test_sweep.lua: the `sweep` module (bindings/sweep.cpp): sweep.run's argument errors and
-- the trial tables it returns (a two-trial sweep of tests/recipes/sweep_probe.lua), an invalid grid
-- point (a failed trial in a first run and in a resumed one), sweep.pareto and sweep.table on
-- hand-made trials.
-- Run: build/runner tests/lua/test_sweep.lua
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

local tmp = (os.getenv("TMPDIR") or "/tmp") .. "/luatune_lua_sweep_" .. os.time()

local function spec(extra)
  local s = { recipe = "tests/recipes/sweep_probe.lua", output_dir = tmp .. "/bad", metric = "eval_loss",
              parameters = { x = { values = { 1, 2 } } } }
  for k, v in pairs(extra or {}) do s[k] = v end
  return s
end

test("sweep.run checks its options before running anything", function()
  raises(function() sweep.run() end, "bad argument #1 to 'run' (table expected, got no value)")
  raises(function() sweep.run(spec { trails = 3 }) end,
         "bad argument #1 to 'run' (unknown option 'trails' (did you mean 'trials'?); valid options: recipe,")
  raises(function() sweep.run(spec { recipe = false }) end,
         "sweep.run: option 'recipe' expects a string, got a boolean false")
  raises(function() sweep.run(spec { parameters = { x = { values = {} } } }) end,
         "sweep.run: parameter 'x': values is empty")
  raises(function() sweep.run(spec { parameters = { lr = { distribution = "log_uniform_values", min = 1e-3, max = 1e-5 } },
                                     method = "random", trials = 2 }) end,
         "sweep.run: parameter 'lr': min (0.001) must be less than max (1e-05)")
  raises(function() sweep.run(spec { parameters = { ra = { keys = { "a", "b" }, values = { { 1, 2 }, { 3 } } } } }) end,
         "sweep.run: parameter 'ra': values[2] has 1 values for 2 keys (a, b)")
  raises(function() sweep.run(spec { metric = { name = "eval_loss", goal = "lowest" } }) end,
         "sweep.run: goal must be \"minimize\" or \"maximize\", got \"lowest\"")
  raises(function() sweep.run(spec { recipe = "no_such_recipe" }) end, "runner: no recipe 'no_such_recipe'")
end)

test("a misspelt key fails the sweep with the recipe's config error, before any trial", function()
  local err = raises(function() sweep.run(spec { parameters = { xx = { values = { 1 } } } }) end,
                     "sweep.run: recipe tests/recipes/sweep_probe.lua refuses trial-001's settings (runner validate, exit 2):")
  ok(err:find("config: unknown key 'xx' (command line); did you mean 'x'?", 1, true), err)
  local f = io.open(tmp .. "/bad/trial-001/trial.log")
  ok(f == nil, "no trial ran")
end)

test("sweep.run returns the trials best first with their config, status and metrics", function()
  local results = sweep.run { recipe = "tests/recipes/sweep_probe.lua", output_dir = tmp .. "/run", parallel = 2,
                              parameters = { x = { values = { 4, 3, 5 } } }, fixed = { nan_at = 5, steps = 2 },
                              metric = { name = "eval_loss", goal = "minimize" }, columns = { "score.final" } }
  eq(#results, 3)
  local t = results[1]
  eq({ t.index, t.name, t.dir, t.config.x, t.status, t.exit_code }, { 2, "trial-002", tmp .. "/run/trial-002", 3, "ok", 0 })
  eq(t.metric, 1.1, 1e-12)
  eq(t.metrics.eval_loss, 1.1, 1e-12)
  eq(t.metrics.loss, 1.6, 1e-12)       -- the last step's
  eq(t.metrics["score.final"], -1.6, 1e-12)  -- summary.json, flattened
  ok(t.seconds > 0 and t.seconds < 60, tostring(t.seconds))
  eq({ results[2].name, results[2].status }, { "trial-001", "ok" })
  eq({ results[3].name, results[3].status, results[3].error }, { "trial-003", "nan", "eval_loss is nan" })
  local md = assert(io.open(tmp .. "/run/results.md")):read("*a")
  ok(md:find("| 1 | trial-002 | 3 | 1.1000 | -1.6000 | ok |", 1, true), md)
end)

-- trials.jsonl's trial names, in order.
local function recorded(dir)
  local names = {}
  for line in io.lines(dir .. "/trials.jsonl") do names[#names + 1] = line:match('"name":"(trial%-%d+)"') end
  return names
end

test("an invalid grid point is a failed trial, in the first run and in a resumed one", function()
  local dir = tmp .. "/invalid"
  local function run()
    return sweep.run { recipe = "tests/recipes/sweep_probe.lua", output_dir = dir, metric = "eval_loss",
                       parameters = { dropout = { values = { 0, 1.5, 0.1, 0.2 } } }, fixed = { counter = dir .. ".runs" } }
  end
  local why = "invalid settings (runner validate): dropout = 1.5 (command line): expected in [0, 1)"
  local results = run()
  eq(#results, 4)
  eq({ results[4].name, results[4].status, results[4].exit_code, results[4].error }, { "trial-002", "failed", 2, why })
  -- Killed after trial-001 finished, before trial-002 was recorded: the resume records it as
  -- failed and runs trial-003 and trial-004, each recorded once.
  local first
  for line in io.lines(dir .. "/trials.jsonl") do first = first or (line:find('"name":"trial-001"', 1, true) and line) end
  local f = assert(io.open(dir .. "/trials.jsonl", "w"))
  f:write(first, "\n")
  f:close()
  os.remove(dir .. ".runs")
  results = run()
  eq(#results, 4)
  local names = recorded(dir)
  table.sort(names)
  eq(names, { "trial-001", "trial-002", "trial-003", "trial-004" })
  for _, t in ipairs(results) do eq(t.status, t.name == "trial-002" and "failed" or "ok") end
  eq(results[4].error, why)
  local runs = assert(io.open(dir .. ".runs")):read("*a")
  eq(runs, dir .. "/trial-003\n" .. dir .. "/trial-004\n")
  -- Again: nothing runs, nothing is recorded twice.
  run()
  eq(#recorded(dir), 4)
end)

local function hand_trials()
  return {
    { name = "a", status = "ok", seconds = 10, config = { s = 0.25 }, metrics = { kept = 0.75, ppl = 12 } },
    { name = "b", status = "ok", seconds = 20, config = { s = 0.4 }, metrics = { kept = 0.6, ppl = 14 } },
    { name = "c", status = "ok", seconds = 30, config = { s = 0.5 }, metrics = { kept = 0.5, ppl = 13 } },
    { name = "d", status = "failed", seconds = 1, config = { s = 0.6 }, metrics = {} },
  }
end

test("sweep.pareto returns the front and marks every trial", function()
  local trials = hand_trials()
  local front = sweep.pareto(trials, { x = "kept", y = "ppl" })
  eq(#front, 2)
  ok(front[1] == trials[1] and front[2] == trials[3], "the same tables, in order")
  eq({ trials[1].pareto, trials[2].pareto, trials[3].pareto, trials[4].pareto }, { true, false, true, false })
  front = sweep.pareto(trials, { x = "kept", y = "ppl", x_goal = "maximize" })
  eq(#front, 1)
  eq(front[1].name, "a")
  raises(function() sweep.pareto(trials, { x = "kept" }) end, "sweep.pareto: options x and y (metric names) are required")
  raises(function() sweep.pareto(trials, { x = "kept", y = "ppl", y_goal = "down" }) end,
         "sweep.pareto: y_goal must be \"minimize\" or \"maximize\", got \"down\"")
  raises(function() sweep.pareto({ 1 }, { x = "kept", y = "ppl" }) end, "trials[1] is not a trial table")
end)

test("sweep.table renders trials as Markdown", function()
  local trials = hand_trials()
  sweep.pareto(trials, { x = "kept", y = "ppl" })
  eq(sweep.table(trials, { "name", { "s", "sparsity" }, "kept", { "ppl", "perplexity" }, "seconds", "pareto" }),
     "| name | sparsity | kept | perplexity | seconds | pareto |\n" ..
     "|---|---:|---:|---:|---:|---|\n" ..
     "| a | 0.25 | 0.7500 | 12 | 10 | yes |\n" ..
     "| b | 0.4 | 0.6000 | 14 | 20 | no |\n" ..
     "| c | 0.5 | 0.5000 | 13 | 30 | yes |\n" ..
     "| d | 0.6 |  |  | 1.0 | no |\n")
  raises(function() sweep.table(trials, {}) end, "a list of column names expected")
end)

h.run()
os.execute("rm -rf '" .. tmp .. "'")
