-- bench/lora_step.lua: wall time of a LoRA training step where the adapted projections dominate
-- (hidden 512, 2 layers, a 512-token vocabulary), all-linear r16, with and without adapter dropout,
-- float32 and bf16, beside the float32 forward. Run: build/runner bench/lora_step.lua (compare two
-- builds; on 2 shared cores take the best of a few runs).
local function model(dtype)
  return models.init { arch = "llama", vocab_size = 512, hidden_size = 512, intermediate_size = 1408,
                       num_hidden_layers = 2, num_attention_heads = 8, num_key_value_heads = 4,
                       dtype = dtype or "float32" }
end
local function timeit(n, f)  -- mean seconds a call after one untimed call
  f()
  local t0 = metrics.clock()
  for _ = 1, n do f() end
  return (metrics.clock() - t0) / n
end
torch.manual_seed(0)
local b = train.batch { ids = torch.randint(0, 512, { 4, 128 }, { dtype = "int64" }) }
local m = model()
print(("forward, 4 x 128 tokens:          %.4f s"):format(timeit(10, function() m:forward(b:ids()) end)))
for _, dtype in ipairs { "float32", "bf16" } do
  for _, dropout in ipairs { 0, 0.05 } do
    local l = model(dtype)
    lora.apply(l, { r = 16, alpha = 32, dropout = dropout, targets = { "all-linear" } })
    local t = train.new(l, { lr = 1e-4, schedule = "constant" })
    print(("LoRA step (%s, all-linear r16, dropout %.2f): %.4f s"):format(dtype, dropout,
                                                                       timeit(10, function() t:step(b) end)))
  end
end
