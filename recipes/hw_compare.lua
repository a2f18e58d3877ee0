-- Which GPU to rent: runs a recipe briefly (or reads finished runs' profile.json), then reports time, memory and cost per catalog GPU.
-- runner hw_compare recipe=lora_finetune recipe_args=base_model=models/Llama-3.1-8B-Instruct,data=data/train.jsonl max_steps=20
-- Measured figures come from this device; the other GPUs are projections (docs/hardware.md says how).
local cfg = config {
  recipe = "lora_finetune",       -- a shipped recipe's name or a path
  recipe_args = {},               -- the recipe's key=value overrides (a list; use --config for values with commas)
  max_steps = 20,                 -- steps of the brief measured run (passed on as the recipe's max_steps)
  full_steps = 1000,              -- steps of the real run to price (tokens per step as measured)
  output_dir = "out/hw_compare",  -- run/, profile.json and report.json, .md and .html go here
  runs = {},                      -- profile.json files of finished hw_compare runs to read instead of running
  gpus = {},                      -- catalog names to include; empty = all
  catalog = "",                   -- a GPU catalog file; "" = data/gpu_catalog.json (or $LUATUNE_GPU_CATALOG)
  model_preset = "",              -- plan a built-in shape (llama3.1-8b, mistral-7b, gemma2-9b) instead of base_model
}

-- The catalog, narrowed to the GPUs asked for.
local catalog = {}
for _, g in ipairs(hw.catalog(cfg.catalog ~= "" and cfg.catalog or nil)) do
  local keep = #cfg.gpus == 0
  for _, name in ipairs(cfg.gpus) do keep = keep or name == g.name end
  if keep then catalog[#catalog + 1] = g end
end
assert(#catalog > 0, "hw_compare: no catalog GPU matches gpus=" .. table.concat(cfg.gpus, ","))

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- Measure: the recipe as a child runner process, sampled by NVML while it runs (nothing on a CPU).
local function measure()
  local run_dir = cfg.output_dir .. "/run"
  local cmd = { quote(hw.runner_path()), quote(cfg.recipe) }
  for _, a in ipairs(cfg.recipe_args) do cmd[#cmd + 1] = quote(a) end
  cmd[#cmd + 1] = quote("max_steps=" .. cfg.max_steps)
  cmd[#cmd + 1] = quote("output_dir=" .. run_dir)
  -- A rerun measures afresh: the earlier measurement there is moved aside, not refused (docs/checkpoints.md).
  local earlier = io.open(run_dir .. "/run.json") or io.open(run_dir .. "/metrics.jsonl")
  if earlier then
    earlier:close()
    cmd[#cmd + 1] = quote("overwrite=true")
    print("hw_compare: " .. run_dir .. " holds an earlier measurement; overwrite=true moves it aside")
  end
  print("hw_compare: running " .. table.concat(cmd, " "))
  local probe, mon = hw.probe(), hw.monitor { interval = 0.5 }
  local rc = os.execute(table.concat(cmd, " "))
  local sampled = mon:stop()
  assert(rc == 0 or rc == true, "hw_compare: the recipe run failed (see its output above)")
  local run = hw.run_summary(run_dir .. "/metrics.jsonl")
  local plan = hw.plan { recipe_config = run.config, recipe = cfg.recipe, model_preset = cfg.model_preset }
  local prof = hw.profile { model = plan.model, tokens = run.tokens, seconds = run.seconds, steps = run.timed_steps,
                            seq_len = plan.max_length, method = plan.method, checkpointing = plan.gradient_checkpointing,
                            lora_params = plan.method ~= "full" and plan.trainable or 0, dtype = plan.dtype,
                            peak_memory_gb = run.peak_memory_gb, device = probe.kind == "cuda" and probe.name or "cpu" }
  prof.recipe, prof.config = cfg.recipe, run.config
  prof.loss, prof.eval_loss, prof.accuracy = run.loss, run.eval_loss, run.accuracy
  prof.tokens_per_step = run.tokens / run.timed_steps
  if sampled.samples > 0 then prof.utilization, prof.power_w = sampled.util_mean / 100, sampled.power_mean_w end
  metrics.write_json(cfg.output_dir .. "/profile.json", prof)
  return prof
end

local profiles = {}
if #cfg.runs == 0 then profiles[1] = measure() end
for _, path in ipairs(cfg.runs) do profiles[#profiles + 1] = hw.read_json(path) end

-- Plan and project from the first profile; every profile is a measured entry.
local first = profiles[1]
local plan = hw.plan { recipe_config = first.config, recipe = first.recipe, model_preset = cfg.model_preset,
                       catalog = catalog }
local tokens = first.tokens_per_step * cfg.full_steps
local rows = hw.project(first, { catalog = catalog, plan = plan, tokens = tokens, dtype = plan.dtype,
                                 micro_batch_tokens = plan.batch_size * plan.max_length })
local measured = {}
for _, p in ipairs(profiles) do
  measured[#measured + 1] = { device = p.device, gpu = p.gpu, tokens_per_s = p.tokens_per_s, step_time_s = p.step_time_s,
                              mfu = p.mfu, peak_memory_gb = p.peak_memory_gb, tokens = p.tokens, seconds = p.seconds,
                              gpu_hours = p.gpu_hours, cost_usd = p.cost_usd, usd_per_mtok = p.usd_per_mtok,
                              eval_loss = p.eval_loss, accuracy = p.accuracy, utilization = p.utilization,
                              power_w = p.power_w }
end
for i, r in ipairs(rows) do
  local g = catalog[i]
  r.memory_gb, r.price_per_hour, r.price_source, r.price_date = g.memory_gb, g.price_per_hour, g.price_source, g.price_date
  if r.kind == "measured" then r.eval_loss, r.accuracy = first.eval_loss, first.accuracy end
end

local doc = {
  title = "Which GPU for " .. first.recipe, recipe = first.recipe, date = os.date("!%Y-%m-%d"),
  model = { name = first.config.base_model or cfg.model_preset, parameters = plan.params.total,
            trainable = plan.trainable, method = plan.method },
  config = first.config, measured = measured, rows = rows,
  formulas = { mfu = first.flops_convention .. ": " .. first.flops_formula, projection = hw.projection_rule(),
               memory = plan.memory_formula },
  notes = { string.format("priced for %d steps of %.0f tokens (%.3g tokens)", cfg.full_steps,
                          first.tokens_per_step, tokens),
            "measured rows ran on this device; projected rows assume the stated MFU on the target's peak; "
            .. "planned rows have a memory prediction only",
            string.format("memory per GPU as the run was configured: shard=%s, optimizer=%s, optimizer_offload=%s",
                          plan.shard, plan.optimizer, plan.optimizer_offload) },
}
metrics.write_json(cfg.output_dir .. "/report.json", doc)

print(string.format("\n%-10s %-9s %-4s %12s %10s %10s", "gpu", "kind", "fits", "tokens/s", "hours", "cost $"))
for _, r in ipairs(rows) do
  print(string.format("%-10s %-9s %-4s %12s %10s %10s", r.gpu, r.kind, r.fits and "yes" or "no",
                      r.tokens_per_s and string.format("%.0f", r.tokens_per_s) or "-",
                      r.hours and string.format("%.3g", r.hours) or "-", r.cost_usd and string.format("%.3g", r.cost_usd) or "-"))
end
hw.report(doc, { markdown = cfg.output_dir .. "/report.md", html = cfg.output_dir .. "/report.html" })
print("hw_compare: wrote " .. cfg.output_dir .. "/report.md and report.html")
