-- Sweep target sparsity over Sheared-LLaMA or Minitron pruning: parameters kept vs perplexity vs time per size, the Pareto-optimal ones in pareto.md.
-- runner sweep sweep_pruning base_model=/models/Llama-3.1-8B data=corpus.jsonl [pruner=minitron sparsities=0.3,0.5 ...]
-- One trial per sparsity, each removing that share of every structure listed in `structures`
-- (the others are left whole). A trial is on the Pareto front when no other trial is both smaller
-- and lower in perplexity: the sizes worth choosing between.
local cfg = config {
  pruner = "sheared",                    -- "sheared" (llama31_sheared) or "minitron" (minitron_prune_distill)
  base_model = "models/Llama-3.1-8B",    -- what every trial prunes: a local directory or a hub name (org/name)
  data = "data/example_text.jsonl",      -- the text JSONL every trial reads (the pruner recipe's data; default: the example text)
  output_dir = "out/sweep_pruning",      -- trial-NNN/ per trial, trials.jsonl, results.md, pareto.md
  sparsities = { 0.25, 0.4, 0.5, 0.6 },  -- one trial per value: the share removed of each swept structure
  structures = { "heads", "hidden", "intermediate" },  -- the structures swept, of layers, heads, hidden, intermediate
  max_steps = 200,                       -- training steps a trial: sheared max_steps, minitron distill.max_steps
  trials = 0,                            -- 0 = one per sparsity; N = the first N
  parallel = 1,                          -- trials at once (CPU threads are split between them)
  timeout = 0,                           -- seconds a trial may run (0 = no limit)
  recipe_args = {},                      -- more overrides for the recipe, "key=value": batch_size=2,...
  wandb_project = "",                    -- each trial a W&B run, grouped under the sweep; "" = none
}

-- What each pruner calls things: its recipe, its sparsity keys, its steps key and final perplexity.
local pruners = {
  sheared = { recipe = "llama31_sheared", steps = "max_steps", perplexity = "perplexity.after_recovery",
              key = { layers = "target_layer_sparsity", heads = "target_head_sparsity",
                      hidden = "target_hidden_sparsity", intermediate = "target_intermediate_sparsity" } },
  minitron = { recipe = "minitron_prune_distill", steps = "distill.max_steps", perplexity = "perplexity_after",
               key = { layers = "sparsity.layers", heads = "sparsity.heads", hidden = "sparsity.hidden",
                       intermediate = "sparsity.intermediate" } },
}
local P = assert(pruners[cfg.pruner], "pruner must be \"sheared\" or \"minitron\", got \"" .. cfg.pruner .. "\"")

local fixed = { base_model = cfg.base_model, data = cfg.data, [P.steps] = cfg.max_steps }
for _, key in pairs(P.key) do fixed[key] = 0 end  -- structures not swept stay whole
local keys = {}
for i, s in ipairs(cfg.structures) do
  keys[i] = assert(P.key[s], "structures: expected layers, heads, hidden or intermediate, got " .. s)
  fixed[keys[i]] = nil
end
for _, arg in ipairs(cfg.recipe_args) do
  local key, value = arg:match("^([^=:]+)[=:](.*)$")
  fixed[assert(key, "recipe_args: expected key=value, got " .. arg)] = value
end
local values = {}  -- one sparsity for every swept structure: a tied group
for i, s in ipairs(cfg.sparsities) do
  values[i] = {}
  for j = 1, #keys do values[i][j] = s end
end

local results = sweep.run {
  recipe = P.recipe, output_dir = cfg.output_dir, fixed = fixed,
  trials = cfg.trials, parallel = cfg.parallel, timeout = cfg.timeout,
  parameters = { sparsity = { keys = keys, values = values } },
  metric = { name = P.perplexity, goal = "minimize" }, columns = { "parameters_kept" },
  wandb_project = cfg.wandb_project,
}

-- The Pareto table, largest model first.
sweep.pareto(results, { x = "parameters_kept", y = P.perplexity, x_goal = "minimize", y_goal = "minimize" })
table.sort(results, function(a, b) return (a.metrics.parameters_kept or -1) > (b.metrics.parameters_kept or -1) end)
local md = ("# Pruning sweep: %s on %s\n\nPareto-optimal: no other trial is both smaller and lower in perplexity.\n\n")
             :format(P.recipe, cfg.base_model)
           .. sweep.table(results, { "name", { keys[1], "sparsity" }, "parameters_kept", { P.perplexity, "perplexity" },
                                     "seconds", "pareto", "status" })
local f = assert(io.open(cfg.output_dir .. "/pareto.md.tmp", "w"))  -- write, then rename: never half a file
f:write(md)
f:close()
assert(os.rename(cfg.output_dir .. "/pareto.md.tmp", cfg.output_dir .. "/pareto.md"))
print(md .. "wrote " .. cfg.output_dir .. "/pareto.md")
