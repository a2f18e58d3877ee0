-- bench/train_step.lua: wall time of a forward and of a training step (full fine-tuning and LoRA)
-- on a tiny Llama with a 128k vocabulary, the quickstart's shape. Run: build/runner bench/train_step.lua
-- (the smoke test's smallest run: vocab_size=512 reps=1).
local cfg = config {
  vocab_size = 128256,
  reps = 10,  -- timed calls: 2 x reps forwards, reps full steps, 2 x reps LoRA steps
}
local function tiny()
  return models.init { arch = "llama", vocab_size = cfg.vocab_size, hidden_size = 96, intermediate_size = 256,
                       num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2,
                       tie_word_embeddings = true }
end
local function timeit(n, f)  -- mean seconds a call after one untimed call (metrics.clock: monotonic, sub-ms)
  f()
  local t0 = metrics.clock()
  for _ = 1, n do f() end
  return (metrics.clock() - t0) / n
end
torch.manual_seed(0)
local b = train.batch { ids = torch.randint(0, cfg.vocab_size, { 8, 64 }, { dtype = "int64" }) }
local m = tiny()
print(("forward, 8 x 64 tokens:     %.3f s"):format(timeit(2 * cfg.reps, function() m:forward(b:ids()) end)))
local full = train.new(m, { learning_rate = 1e-3, schedule = "constant" })
print(("full fine-tuning step:      %.3f s"):format(timeit(cfg.reps, function() full:step(b) end)))
local l = tiny()
lora.apply(l, { r = 16, alpha = 32, dropout = 0, targets = { "all-linear" } })
local lt = train.new(l, { learning_rate = 1e-3, schedule = "constant" })
print(("LoRA step (all-linear r16): %.3f s"):format(timeit(2 * cfg.reps, function() lt:step(b) end)))
