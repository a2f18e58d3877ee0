-- bench/gpu/train_bench.lua: luatune's side of the training benchmark pair (the other side is
-- bench/gpu/hf_train_bench.py; scripts/gpu_validate.py runs both, each in its own process). A random
-- model of a real shape (bench/gpu/shapes.json), full fine-tuning, LoRA r 16 on all linear layers or
-- QLoRA (NF4, double quantization), layers recomputed, AdamW, W warm-up steps then S timed ones on
-- random tokens; one JSON object to out= (schema and pairing rules: docs/gpu_bench.md).
--   build/runner bench/gpu/train_bench.lua shape=llama-3.2-1b method=lora seq=2048 batch=1 steps=10 warmup=2 \
--     device=cuda dtype=bf16 out=/tmp/lt-1b-lora.json
local cfg = config {
  shape = "tiny",        -- a key of shapes.json: llama-3.2-1b, llama-3.1-8b, tiny
  method = "full",       -- full | lora | qlora
  seq = 64, batch = 1, steps = 3, warmup = 1,
  device = "auto", dtype = "bf16", out = "",
  peak_tflops = 0,       -- dense peak for MFU; 0 = data/gpu_catalog.json by the GPU's name (none on a CPU)
  master_weights = true, -- full: fp32 masters beside the bf16 weights (the pairing in docs/gpu_bench.md)
  r = 16, alpha = 32, lr = 1e-5, seed = 0,
  shapes = "",           -- the shapes file; "" = shapes.json beside this script
  profile = "",          -- trace the timed steps into this directory (docs/profiling.md); "" = off
}
assert(cfg.out ~= "", "train_bench: out=FILE.json is required")
assert(cfg.method == "full" or cfg.method == "lora" or cfg.method == "qlora",
       "train_bench: method must be full, lora or qlora, got '" .. cfg.method .. "'")
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local shapes = hw.read_json(cfg.shapes ~= "" and cfg.shapes or here .. "/shapes.json").shapes
local shape = shapes[cfg.shape]
if not shape then
  local names = {}
  for k in pairs(shapes) do names[#names + 1] = k end
  table.sort(names)
  error("train_bench: unknown shape '" .. cfg.shape .. "' (shapes.json has " .. table.concat(names, ", ") .. ")", 0)
end
local device = tostring(torch.device(cfg.device))
local on_cuda = device:match("^cuda") ~= nil
local result = { library = "luatune", shape = cfg.shape, method = cfg.method, seq = cfg.seq, batch = cfg.batch,
                 steps = cfg.steps, warmup = cfg.warmup, device = device, dtype = cfg.dtype }

local function median(xs)
  local s = {}
  for i, x in ipairs(xs) do s[i] = x end
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
end

local function process_peak_gb()  -- CPU: the process's high-water mark (VmHWM), like HF's ru_maxrss
  for line in io.lines("/proc/self/status") do
    local kb = line:match("^VmHWM:%s+(%d+)")
    if kb then return tonumber(kb) * 1024 / 1e9 end
  end
  return 0 / 0
end

local function run()
  local t0 = metrics.clock()
  local spec = { arch = shape.arch, seed = cfg.seed, dtype = cfg.dtype, device = device }
  for k, v in pairs(shape.config) do spec[k] = v end
  local model = models.init(spec)
  result.params = model:num_params().total  -- the dense base: before 4-bit codes and adapters
  if cfg.method == "qlora" then qlora.quantize(model, { quant_type = "nf4", double_quant = true, blocksize = 64 }) end
  if cfg.method ~= "full" then
    lora.apply(model, { r = cfg.r, alpha = cfg.alpha, dropout = 0, targets = "all-linear", seed = cfg.seed })
  end
  result.trainable_params = model:num_params().trainable
  local trainer = train.new(model, { learning_rate = cfg.lr, schedule = "constant", weight_decay = 0, max_grad_norm = 1,
                                     gradient_checkpointing = true, master_weights = cfg.master_weights,
                                     profile = cfg.profile, profile_skip = cfg.warmup, profile_steps = cfg.steps })
  local ids = torch.randint(0, shape.config.vocab_size, { cfg.batch, cfg.seq }, { dtype = "int64" })
  local batch = train.batch { ids = ids }
  -- The step returns with the optimizer's kernels still queued on the GPU; reading one value back
  -- waits for them, so each timed step holds all of its own work (HF's side synchronizes likewise).
  local fence = model:parameters()["model.norm.weight"]
  result.setup_s = metrics.clock() - t0

  local times, peak = {}, 0
  for i = 1, cfg.warmup + cfg.steps do
    local t = metrics.clock()
    local s = trainer:step(batch)
    if on_cuda then fence[0]:item() end
    if i > cfg.warmup then times[#times + 1] = metrics.clock() - t end
    peak = math.max(peak, s.peak_memory_gb or 0)  -- CUDA: the allocator's peak within the step
    result.loss = s.loss
  end
  result.step_time_s = median(times)
  result.tokens_per_s = cfg.batch * cfg.seq / result.step_time_s
  result.peak_memory_gb = on_cuda and peak or process_peak_gb()
  result.peak_memory_kind = on_cuda and "cuda_max_allocated" or "process_max_rss"

  local gpu = on_cuda and hw.probe().name or nil
  local prof = hw.profile { model = model, tokens = cfg.batch * cfg.seq, seconds = result.step_time_s, steps = 1,
                            seq_len = cfg.seq, method = cfg.method, checkpointing = true,
                            lora_params = cfg.method == "full" and 0 or result.trainable_params,
                            device = gpu or "cpu", peak_tflops = cfg.peak_tflops }
  result.flops_per_token = prof.flops_per_token
  result.flops_convention = prof.flops_convention
  result.gpu = gpu
  result.peak_tflops = prof.peak_tflops or 0 / 0
  result.mfu = prof.mfu or 0 / 0  -- null in the JSON without a peak (a CPU)
  result.status = "ok"
end

local ok, err = pcall(run)
if not ok then
  local msg = tostring(err)
  -- CUDA's allocator ("CUDA out of memory"), or models.init refusing a model larger than host memory.
  if not (msg:lower():find("out of memory", 1, true) or msg:find("more than this machine's", 1, true)) then
    error(msg, 0)
  end
  result.status = "oom"
  result.error = msg:match("[^\n]*"):sub(1, 400)
end
metrics.write_json(cfg.out, result)
print(string.format("train_bench %s %s: %s, %.1f tokens/s, peak %.3f GB, MFU %s -> %s", cfg.shape, cfg.method,
                    result.status, result.tokens_per_s or 0, result.peak_memory_gb or 0,
                    result.mfu and result.mfu == result.mfu and string.format("%.3f", result.mfu) or "n/a", cfg.out))
