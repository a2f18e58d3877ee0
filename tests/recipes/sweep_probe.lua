-- tests/recipes/sweep_probe.lua: a model-free recipe for the sweep tests; fails on purpose when x == fail_at.
-- It "trains" `steps` steps on loss = (x - 2)^2 + lr + 1/step and logs metrics.jsonl and summary.json;
-- eval_loss is NaN when x == nan_at. Each run appends its output_dir to `counter` (when set), so a
-- test can count runs; `sleep` seconds per step make it slow enough to interrupt. `dropout` is unused:
-- a key `runner validate` checks (in [0, 1)), so a sweep can have an invalid value.
local cfg = config {
  x = 0, lr = 0.1, steps = 3, dropout = 0,
  fail_at = -1, nan_at = -1, sleep = 0,
  counter = "",
  output_dir = "out/sweep_probe",
  wandb_project = "",
}

if cfg.counter ~= "" then
  local f = assert(io.open(cfg.counter, "a"))
  f:write(cfg.output_dir, "\n")
  f:close()
end
if cfg.x == cfg.fail_at then error(string.format("probe: x = %g fails on purpose", cfg.x)) end

local log = metrics.open { console = true, jsonl = cfg.output_dir .. "/metrics.jsonl", total_steps = cfg.steps,
                           progress_seconds = 0, config = cfg, wandb = cfg.wandb_project }
local loss
for step = 1, cfg.steps do
  if cfg.sleep > 0 then os.execute("sleep " .. cfg.sleep) end
  loss = (cfg.x - 2) ^ 2 + cfg.lr + 1 / step
  log:write(step, { loss = loss })
end
local eval_loss = cfg.x == cfg.nan_at and 0 / 0 or (cfg.x - 2) ^ 2 + cfg.lr
log:write(cfg.steps, { eval_loss = eval_loss })
log:close()
metrics.write_json(cfg.output_dir .. "/summary.json", { x = cfg.x, score = { final = -loss } })
