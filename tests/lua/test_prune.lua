-- tests/lua/test_prune.lua: the `prune` module on tiny CPU models.
-- Run: build/runner tests/lua/test_prune.lua
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

test("the module is registered", function()
  eq(type(prune), "table")
end)

-- ==== unstructured: prune.unstructured / prune.sparsity (host/prune/unstructured.h) ====
local function unstructured_tiny(seed)
  return models.init { arch = "llama", vocab_size = 64, hidden_size = 32, intermediate_size = 40,
                       num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2, head_dim = 8,
                       seed = seed or 3 }
end
local function unstructured_calibration(n)
  local out = {}
  for i = 1, n or 2 do
    torch.manual_seed(i)
    out[i] = train.batch { ids = torch.randint(0, 64, { 2, 12 }, { dtype = "int64" }) }
  end
  return out
end

test("unstructured: a dense model reports no zeros", function()
  local r = prune.sparsity(unstructured_tiny())
  eq(r.sparsity, 0)
  eq(#r.layers, 14)
  eq(r.layers[1].name, "model.layers.0.self_attn.q_proj.weight")
  eq(r.layers[14].name, "model.layers.1.mlp.down_proj.weight")
  eq(r.layers[14].total, 32 * 40)
end)

test("unstructured: wanda zeroes half of every weight and the report says so", function()
  local m = unstructured_tiny()
  local r = prune.unstructured(m, unstructured_calibration(), { method = "wanda", sparsity = 0.5 })
  eq(r.sparsity, 0.5)
  eq(#r.layers, 14)
  for _, l in ipairs(r.layers) do
    eq(l.zeros, l.total / 2)
    eq(l.sparsity, 0.5)
  end
  eq(prune.sparsity(m).sparsity, 0.5)
  ok(m:forward({ { 1, 2, 3 } }):isfinite():all():item(), "pruned model runs")
end)

test("unstructured: sparsegpt with a 2:4 pattern on chosen targets", function()
  local m = unstructured_tiny()
  local r = prune.unstructured(m, unstructured_calibration(), { method = "sparsegpt", pattern = "2:4",
                                                                targets = { "gate_proj", "up_proj", "down_proj" },
                                                                blocksize = 16, dampening = 0.02 })
  eq(#r.layers, 6)
  eq(r.layers[1].name, "model.layers.0.mlp.gate_proj.weight")
  ok(r.sparsity >= 0.5, "at least 2 of every 4")
  local all = prune.sparsity(m)
  eq(all.layers[1].zeros, 0)  -- q_proj untouched
end)

test("unstructured: magnitude needs no calibration", function()
  local m = unstructured_tiny()
  local r = prune.unstructured(m, nil, { method = "magnitude", sparsity = 0.25 })
  eq(r.layers[1].zeros, 32 * 32 / 4)
end)

test("unstructured: bad calls fail before any change", function()
  local m = unstructured_tiny()
  local cal = unstructured_calibration(1)
  raises(function() prune.unstructured(m, cal, { sparsity = 1.2 }) end,
         "prune.unstructured: sparsity 1.2 outside [0, 1)")
  raises(function() prune.unstructured(m, cal, { pattern = "4:4" }) end,
         "prune.unstructured: pattern 4:4 needs 0 < n < m (2:4, 4:8)")
  raises(function() prune.unstructured(m, cal, { pattern = "2-4" }) end,
         'prune.unstructured: pattern must look like "2:4"')
  raises(function() prune.unstructured(m, cal, { pattern = "2:4", sparsity = 0.5 }) end,
         "prune.unstructured: give sparsity or pattern, not both")
  raises(function() prune.unstructured(m, cal, { method = "obs" }) end, 'prune.unstructured: unknown method "obs"')
  raises(function() prune.unstructured(m, cal, { targets = { "lm_head" } }) end,
         'prune.unstructured: unknown target "lm_head"')
  raises(function() prune.unstructured(m, cal, { sparstiy = 0.5 }) end, "unknown option 'sparstiy'")
  raises(function() prune.unstructured(m, nil, { method = "wanda" }) end,
         "prune.unstructured: method wanda needs calibration batches")
  raises(function() prune.unstructured(m, { 1, 2 }, {}) end, "Batch expected")
  eq(prune.sparsity(m).sparsity, 0)
  lora.apply(m, { r = 2, targets = { "q_proj" } })
  raises(function() prune.unstructured(m, cal, {}) end, "merge the adapters first (lora.merge)")
  lora.merge(m)
  eq(prune.unstructured(m, cal, {}).sparsity, 0.5)
end)

h.run()
