-- tests/lua/test_prune.lua: the `prune` module on tiny CPU models.
-- Run: build/runner tests/lua/test_prune.lua
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

test("the module is registered", function()
  eq(type(prune), "table")
end)

-- ---- surgery tests ----
local function gqa(seed)
  return models.init { arch = "llama", vocab_size = 64, hidden_size = 32, intermediate_size = 40,
                       num_hidden_layers = 3, num_attention_heads = 4, num_key_value_heads = 2, head_dim = 8,
                       seed = seed or 3 }
end
local IDS = { { 1, 2, 3, 4, 5 }, { 6, 7, 8, 9, 10 } }

test("surgery: shape and targets", function()
  local m = gqa()
  eq(prune.shape(m), { layers = 3, heads = 4, kv_heads = 2, head_dim = 8, hidden = 32, intermediate = 40 })
  eq(prune.targets(m, { layers = 0.34, heads = 0.5, hidden = 0.25, intermediate = 0.5 }),
     { layers = 2, heads = 2, kv_heads = 2, head_dim = 8, hidden = 24, intermediate = 20, whole_groups = false })
  raises(function() prune.targets(m, { heads = 1 }) end, "prune: target head sparsity 1 outside [0, 1)")
  raises(function() prune.targets(m, { head = 0.5 }) end, "head")
end)

test("surgery: apply keeps the listed structures and the model still runs and saves", function()
  local m = gqa()
  local shape = prune.apply(m, { layers = { 0, 2 }, heads = { 1, 2 }, intermediate = { 0, 1, 2, 3, 4, 5, 6, 7 },
                                 hidden = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 } })
  eq(shape, { layers = 2, heads = 2, kv_heads = 2, head_dim = 8, hidden = 16, intermediate = 8 })
  eq(m:config().num_hidden_layers, 2)
  eq(m:config().head_dim, 8)
  local out = m:forward(IDS)
  eq(out:shape(), { 2, 5, 64 })
  local dir = string.format("%s/luatune_lua_prune_%d", os.getenv("TMPDIR") or "/tmp", os.time())
  m:save(dir)
  local back = models.load(dir)
  ok(torch.allclose(back:forward(IDS), out, { rtol = 1e-6, atol = 1e-6 }), "reloaded model differs")
  os.execute("rm -rf " .. dir)
end)

test("surgery: bad specs fail before any change", function()
  local m = gqa()
  raises(function() prune.apply(m, { heads = { 0, 1, 2 } }) end, "every kept group must keep the same number")
  raises(function() prune.apply(m, { layers = { 3 } }) end, "prune: layers number 3 outside [0, 3)")
  raises(function() prune.apply(m, { hidden = { 1.5 } }) end, "prune: hidden[1] must be whole")
  raises(function() prune.apply(m, { layer = { 0 } }) end, "layer")
  eq(prune.shape(m).layers, 3)
end)

h.run()
