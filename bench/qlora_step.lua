-- bench/qlora_step.lua: one method's training steps on a random Llama-shaped model saved as an HF
-- directory, as one JSON line: weight bytes, peak memory (CUDA: the allocator's peak; CPU: the
-- process's peak RSS, VmHWM) and tokens/s (median step). bench/qlora_vs_lora.sh writes the model
-- once (make=DIR) and runs this once per method, each in its own process, loading as recipes do
-- (QLoRA quantizes while loading).
--   build/runner bench/qlora_step.lua make=/tmp/m shape=small
--   build/runner bench/qlora_step.lua model=/tmp/m method=qlora device=cpu
local cfg = config {
  make = "", model = "",
  method = "qlora",  -- "lora" (bf16 base) or "qlora" (NF4 + double quantization)
  shape = "small",   -- "tiny" (the smoke test's), "small" (runs on a CPU), "1b" (Llama 3.2 1B), "8b" (Llama 3.1 8B)
  device = "auto", steps = 10, warmup = 2, batch = 1, length = 256, r = 16, seed = 0,
}
local shapes = {
  tiny = { vocab_size = 1024, hidden_size = 128, intermediate_size = 256, num_hidden_layers = 2,
           num_attention_heads = 4, num_key_value_heads = 2 },
  small = { vocab_size = 32000, hidden_size = 512, intermediate_size = 1536, num_hidden_layers = 8,
            num_attention_heads = 8, num_key_value_heads = 4 },
  ["1b"] = { vocab_size = 128256, hidden_size = 2048, intermediate_size = 8192, num_hidden_layers = 16,
             num_attention_heads = 32, num_key_value_heads = 8, tie_word_embeddings = true },
  ["8b"] = { vocab_size = 128256, hidden_size = 4096, intermediate_size = 14336, num_hidden_layers = 32,
             num_attention_heads = 32, num_key_value_heads = 8 },
}
local shape = assert(shapes[cfg.shape], "shape must be tiny, small, 1b or 8b")
local device = torch.device(cfg.device)

if cfg.make ~= "" then
  local spec = { arch = "llama", seed = cfg.seed, dtype = "bf16", device = "cpu" }
  for k, v in pairs(shape) do spec[k] = v end
  models.init(spec):save(cfg.make)
  return
end
assert(cfg.model ~= "", "model=DIR (written by make=DIR) is required")
local model = models.load(cfg.model, { dtype = "bf16", device = cfg.device,
                                       quantize = cfg.method == "qlora" and "nf4" or nil })
lora.apply(model, { r = cfg.r, alpha = 2 * cfg.r, dropout = 0, targets = "all-linear", seed = cfg.seed })

-- Base weights: the dense ones by dtype, the 4-bit ones as stored (codes + scales, qlora.info).
local size = { bfloat16 = 2, float16 = 2, float32 = 4 }
local weight_bytes = (qlora.info(model) or { bytes = 0 }).bytes
for _, t in pairs(model:parameters()) do
  if t:dtype() ~= "uint8" then weight_bytes = weight_bytes + t:numel() * size[t:dtype()] end
end

local trainer = train.new(model, { learning_rate = 1e-4, schedule = "constant", gradient_checkpointing = true })
torch.manual_seed(cfg.seed)
local batch = train.batch { ids = torch.randint(0, shape.vocab_size, { cfg.batch, cfg.length }, { dtype = "int64" }) }
local rates, peak = {}, 0
for i = 1, cfg.warmup + cfg.steps do
  local s = trainer:step(batch)
  if i > cfg.warmup then rates[#rates + 1] = s.tokens_per_s end
  peak = math.max(peak, s.peak_memory_gb or 0)
end
table.sort(rates)
if peak == 0 then  -- CPU: the process's high-water mark
  for line in io.lines("/proc/self/status") do
    local kb = line:match("^VmHWM:%s+(%d+)")
    if kb then peak = tonumber(kb) * 1024 / 1e9 end
  end
end
print(string.format('{"method": "%s", "shape": "%s", "device": "%s", "weights_gb": %.4f, "peak_gb": %.4f, ' ..
                    '"tokens_per_s": %.1f, "tokens_per_step": %d}', cfg.method, cfg.shape, tostring(device),
                    weight_bytes / 1e9, peak, rates[math.floor((#rates + 1) / 2)], cfg.batch * cfg.length))
