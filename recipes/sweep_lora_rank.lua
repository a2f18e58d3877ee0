-- Sweep LoRA rank (alpha = 2 x rank, tied) x learning rate over lora_finetune, each trial its own run; results.md lists them by eval_loss.
-- runner sweep sweep_lora_rank base_model=/models/Llama-3.1-8B-Instruct [data=FILE.jsonl] [parallel=2 trials=4 ...]
-- Running it again resumes: finished trials are not rerun (docs/sweeps.md). Watch it from another
-- shell with: runner sweep --report out/sweep_lora_rank
local cfg = config {
  base_model = "models/Llama-3.1-8B-Instruct",  -- what every trial fine-tunes: a local directory or a hub name (org/name)
  data = "data/example_chat.jsonl",       -- the training JSONL every trial reads (lora_finetune's data; default: the example set)
  output_dir = "out/sweep_lora_rank",     -- trial-NNN/ per trial, trials.jsonl, results.md
  ranks = { 4, 8, 16 },                   -- lora.r values; lora.alpha = 2 * r
  learning_rates = { 1e-4, 2e-4, 5e-4 },  -- learning_rate values
  max_steps = 200,                        -- each trial's max_steps
  eval_steps = 50,                        -- each trial's eval_steps
  trials = 0,                             -- 0 = the whole grid (9 trials); N = its first N
  parallel = 1,                           -- trials at once (CPU threads are split between them)
  timeout = 0,                            -- seconds a trial may run (0 = no limit)
  recipe_args = {},                       -- more lora_finetune overrides, "key=value": batch_size=2,...
  wandb_project = "",                     -- each trial a W&B run, grouped under the sweep; "" = none
}

local fixed = config.pick(cfg, { "base_model", "data", "max_steps", "eval_steps" })
for _, arg in ipairs(cfg.recipe_args) do
  local key, value = arg:match("^([^=:]+)[=:](.*)$")
  fixed[assert(key, "recipe_args: expected key=value, got " .. arg)] = value
end
local rank_alpha = {}
for i, r in ipairs(cfg.ranks) do rank_alpha[i] = { r, 2 * r } end

local results = sweep.run {
  recipe = "lora_finetune", output_dir = cfg.output_dir, fixed = fixed,
  method = "grid", trials = cfg.trials, parallel = cfg.parallel, timeout = cfg.timeout,
  parameters = {
    rank = { keys = { "lora.r", "lora.alpha" }, values = rank_alpha },  -- tied: they change together
    learning_rate = { values = cfg.learning_rates },
  },
  metric = { name = "eval_loss", goal = "minimize" }, columns = { "eval_perplexity" },
  wandb_project = cfg.wandb_project,
}

local best = results[1]
if best and best.status == "ok" then
  print(("best: %s, lora.r=%d learning_rate=%g: eval_loss %.4f; its adapter: %s/adapter"):format(
    best.name, best.config["lora.r"], best.config.learning_rate, best.metric, best.dir))
end
