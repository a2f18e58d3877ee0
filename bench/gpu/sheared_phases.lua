-- bench/gpu/sheared_phases.lua: llama31_sheared's two phases on a random model of a real shape
-- (bench/gpu/shapes.json), a few steps each with the recipe's own trainer (scripts/lua/pruning.lua's
-- sheared_trainer: AdamW, layers recomputed, the micro-batch) and its targets, measuring each phase's
-- peak CUDA memory for the GPU harness's plan-versus-measured table (docs/gpu.md). Pruning: masks and
-- weights of the whole model; recovery: the model cut to the target shape, distilled from a frozen
-- teacher of the whole shape (random too: memory and time do not depend on the values). One JSON
-- object to out=. On a CPU (the dry run) the phases run on the tiny shape and no peak is measured.
--   build/runner bench/gpu/sheared_phases.lua shape=llama-3.1-8b device=cuda out=/tmp/sheared.json
local cfg = config {
  shape = "tiny",       -- a key of shapes.json
  shapes = "",          -- the shapes file; "" = shapes.json beside this script
  device = "auto", dtype = "bf16",
  batch = 4, seq = 128, -- rows per micro-batch (the recipe's batch_size) and tokens per row (max_length)
  steps = 2,            -- optimizer steps per phase, each of one micro-batch
  distill = true, teacher_shard = false, seed = 0, out = "",
}
assert(cfg.out ~= "", "sheared_phases: out=FILE.json is required")
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local shape = hw.read_json(cfg.shapes ~= "" and cfg.shapes or here .. "/shapes.json").shapes[cfg.shape]
assert(shape, "sheared_phases: unknown shape '" .. cfg.shape .. "'")
local P = require("pruning")  -- scripts/lua/pruning.lua
-- The recipe's defaults for what the phases' trainers and pruner read (recipes/llama31_sheared.lua).
local recipe = { learning_rate = 1e-4, warmup_ratio = 0.1, batch_size = cfg.batch, gradient_checkpointing = true,
                 shard = "none", optimizer = "adamw", optimizer_offload = "none" }
local targets = { layers = 0.2, heads = 0.3, hidden = 0.1, intermediate = 0.4, round_to = 128 }
local device = tostring(torch.device(cfg.device))
local on_cuda = device:match("^cuda") ~= nil
local result = { shape = cfg.shape, device = device, dtype = cfg.dtype, batch = cfg.batch, seq = cfg.seq,
                 steps = cfg.steps, distill = cfg.distill, teacher_shard = cfg.teacher_shard, phases = {} }

local function init()
  local spec = { arch = shape.arch, seed = cfg.seed, dtype = cfg.dtype, device = device }
  for k, v in pairs(shape.config) do spec[k] = v end
  return models.init(spec)
end

local function run_phase(name, trainer, model)
  local ids = torch.randint(0, shape.config.vocab_size, { cfg.batch, cfg.seq }, { dtype = "int64" })
  local batch = train.batch { ids = ids }
  local peak, times, loss = 0, {}, nil
  for i = 1, cfg.steps do
    local t = metrics.clock()
    local s = trainer:step(batch)
    times[i] = metrics.clock() - t
    peak = math.max(peak, s.peak_memory_gb or 0)
    loss = s.loss
  end
  result.phases[name] = { params = model:num_params().total, peak_memory_gb = on_cuda and peak or nil,
                          last_step_s = times[#times], loss = loss }
end

local ok, err = pcall(function()
  local model = init()
  local pruner = prune.sheared(model, { layers = targets.layers, heads = targets.heads, hidden = targets.hidden,
                                        intermediate = targets.intermediate, round_to = targets.round_to,
                                        warmup_steps = 0, seed = cfg.seed })
  local trainer = P.sheared_trainer(model, recipe, cfg.steps, { pruner })
  run_phase("pruning", trainer, model)
  result.shape_after = pruner:finalize()
  trainer = nil
  collectgarbage()
  local hooks = {}
  local teacher = cfg.distill and init() or nil
  if teacher then
    hooks = { distill.new(teacher, model, { loss = "forward_kl", alpha = 0.5, shard_teacher = cfg.teacher_shard or nil }) }
  end
  run_phase("recovery", P.sheared_trainer(model, recipe, cfg.steps, hooks), model)
  if teacher then teacher:release() end
  result.status = "ok"
end)
if not ok then
  local msg = tostring(err)
  if not msg:lower():find("out of memory", 1, true) then error(msg, 0) end
  result.status = "oom"
  result.error = msg:match("[^\n]*"):sub(1, 400)
end
metrics.write_json(cfg.out, result)
print(string.format("sheared_phases %s: %s; pruning peak %s GB, recovery peak %s GB -> %s", cfg.shape, result.status,
                    tostring(result.phases.pruning and result.phases.pruning.peak_memory_gb or "n/a"),
                    tostring(result.phases.recovery and result.phases.recovery.peak_memory_gb or "n/a"), cfg.out))
