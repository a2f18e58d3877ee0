-- A training loop without the training, for the W&B recipe tests (test_wandb_recipes.sh): logs a
-- falling loss each step, ends early when the run is stopped from the W&B UI, and fails on purpose
-- at step fail_at (0: never), so a crash's exit code and error text can be checked.
local cfg = config {
  output_dir = "out/wandb_loop",
  steps = 1000,
  step_seconds = 0.01,  -- a busy wait per step, so the server's answers arrive mid-loop
  fail_at = 0,
  wandb_project = "",
}

local log = metrics.open { console = true, jsonl = cfg.output_dir .. "/metrics.jsonl", total_steps = cfg.steps,
                           progress_seconds = 0, config = cfg, wandb = cfg.wandb_project }
for step = 1, cfg.steps do
  local t0 = metrics.clock()
  while metrics.clock() - t0 < cfg.step_seconds do end
  log:write(step, { loss = 1 / step })
  if step == cfg.fail_at then error("wandb_loop: failing on purpose at step " .. step) end
  if log:stopped() then
    print("stopped from the W&B UI at step " .. step)
    break
  end
end
log:close()
