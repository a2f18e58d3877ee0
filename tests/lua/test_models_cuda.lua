-- tests/lua/test_models_cuda.lua: models on CUDA (label gpu). Exits 77, which CTest counts as
-- skipped, on machines without CUDA; LUATUNE_TEST_GPU_AS=cpu rehearses it on the CPU (harness.lua).
local h = require "harness"
local test, eq, ok = h.test, h.eq, h.ok
local DEV, DEV_NAME = h.gpu_device()

local function tiny(arch, device, dtype)
  return models.init { arch = arch, vocab_size = 128, hidden_size = 64, intermediate_size = 96,
                       num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2, head_dim = 16,
                       sliding_window = 6, seed = 1, device = device, dtype = dtype }
end

test("CUDA logits match CPU for every family (SDPA path vs explicit)", function()
  local ids = { { 3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46, 26 } }
  for _, arch in ipairs { "llama", "mistral", "qwen2", "qwen3", "gemma2" } do
    local cpu = tiny(arch, "cpu", "float32")
    local gpu = tiny(arch, DEV, "float32")
    local a, b = cpu:forward(ids), gpu:forward(ids):to("cpu")
    ok(torch.allclose(a, b, { rtol = 1e-3, atol = 1e-3 }), arch .. ": max diff " .. (a - b):abs():max():item())
  end
end)

test("bf16 on CUDA: cached generation equals recomputation; save/load round trip", function()
  local tok = tokenizer.load("tests/fixtures/tokenizers/bytelevel")
  local m = models.init { arch = "llama", vocab_size = tok:vocab_size(), hidden_size = 64, intermediate_size = 96,
                          num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2,
                          device = DEV, dtype = "bf16" }
  local _, a = m:generate(tok, "hello", { max_new_tokens = 10 })
  local _, b = m:generate(tok, "hello", { max_new_tokens = 10, use_cache = false })
  eq(a.ids, b.ids)
  local dir = os.tmpname()
  os.remove(dir)
  m:save(dir)
  local back = models.load(dir, { device = DEV })
  eq(back:device(), DEV_NAME)
  ok(torch.equal(m:forward { 1, 2, 3 }, back:forward { 1, 2, 3 }))
  os.execute("rm -rf '" .. dir .. "'")
end)

h.run()
