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

-- ---- importance tests ----
local function importance_tiny(layers, seed)
  return models.init { arch = "llama", vocab_size = 50, hidden_size = 32, intermediate_size = 40,
                       num_hidden_layers = layers or 2, num_attention_heads = 4, num_key_value_heads = 2,
                       seed = seed or 1 }
end
local function importance_calib(n)
  local out = {}
  for i = 1, n or 2 do
    torch.manual_seed(100 + i)
    out[i] = train.batch { ids = torch.randint(0, 50, { 2, 12 }, { dtype = "int64" }) }
  end
  return out
end
-- Layer l's branches output zero: the layer is the identity.
local function importance_identity(m, l)
  local p = m:parameters()
  torch.no_grad(function()
    p[("model.layers.%d.self_attn.o_proj.weight"):format(l)]:index_set(":", 0)
    p[("model.layers.%d.mlp.down_proj.weight"):format(l)]:index_set(":", 0)
  end)
end

test("importance: activation scores per structure", function()
  local m = importance_tiny()
  local s = prune.importance(m, importance_calib())
  eq(s.hidden:shape(), { 32 })
  eq(s.head:shape(), { 2, 4 })
  eq(s.intermediate:shape(), { 2, 40 })
  eq(s.layer:shape(), { 2 })
  ok(s.hidden:min():item() > 0)
  local bi = prune.importance(m, importance_calib(), { method = "block_influence" })
  eq(bi.layer:tolist(), s.layer:tolist(), 1e-6)
  eq(bi.head, nil)
end)

test("importance: taylor and layer_removal", function()
  local m = importance_tiny()
  local before = m:parameters()["model.layers.0.self_attn.q_proj.weight"]:clone()
  local t = prune.importance(m, importance_calib(), { method = "taylor" })
  local v = prune.importance(m, importance_calib(), { method = "taylor", variant = "vector" })
  eq(t.head:shape(), { 2, 4 })
  ok(not torch.equal(t.intermediate, v.intermediate))
  ok(torch.equal(m:parameters()["model.layers.0.self_attn.q_proj.weight"], before))
  importance_identity(m, 1)
  local r = prune.importance(m, importance_calib(), { method = "layer_removal" })
  eq(r.layer:shape(), { 2 })
  ok(math.abs(r.layer:tolist()[2]) < 1e-5, "identity layer removal loss " .. r.layer:tolist()[2])
end)

test("importance: bad options name the problem", function()
  local m, c = importance_tiny(), importance_calib(1)
  raises(function() prune.importance(m, c, { method = "random" }) end,
         'prune.importance: unknown method "random" (expected activation, taylor, block_influence or layer_removal)')
  raises(function() prune.importance(m, c, { metod = "taylor" }) end, "unknown option 'metod' (did you mean 'method'?)")
  raises(function() prune.importance(m, c, { method = "taylor", variant = "mix" }) end,
         "taylor_importance: unknown variant 'mix' (expected param_first or vector)")
  raises(function() prune.importance(m, c, { variant = "vector" }) end,
         'prune.importance: option variant applies to method="taylor" only')
  raises(function() prune.importance(m, { 1 }) end, "prune.importance: calibration entry 1 is not a Batch")
  raises(function() prune.importance(m, "x") end, "a list of Batch expected")
  raises(function() prune.depth(m, c, { layers = 2 }) end, "prune.depth: cannot remove 2 of 2 layers")
  raises(function() prune.depth(m, c, { layers = 1, metric = "bi" }) end,
         'prune.depth: metric must be "block_influence" or "layer_removal", got "bi"')
  raises(function() prune.minitron(m, c, { shape = { hidden = 16 }, hidden = 0.5 }) end, "not both")
  raises(function() prune.minitron(m, c, { shape = { hiden = 16 } }) end, "unknown option 'hiden'")
end)

test("importance: depth removes the identity layer", function()
  local m = importance_tiny(3)
  importance_identity(m, 1)
  for _, metric in ipairs { "block_influence", "layer_removal" } do
    local copy = importance_tiny(3)
    importance_identity(copy, 1)
    local r = prune.depth(copy, importance_calib(), { layers = 1, metric = metric })
    local scores = r.scores:tolist()
    eq(scores[2], 0, 1e-5)
    -- The lowest score goes; on random weights skipping another layer can lower the loss.
    local lowest = 1
    for i, v in ipairs(scores) do if v < scores[lowest] then lowest = i end end
    eq(r.removed, { lowest - 1 })
    if metric == "block_influence" then eq(r.removed, { 1 }) end
    eq(r.after.layers, 2)
    eq(r.scores:shape(), { 3 })
    eq(copy:config().num_hidden_layers, 2)
  end
  local r = prune.depth(m, importance_calib(), { layers = 0.34 })
  eq(#r.removed, 1)
end)

test("importance: minitron width and depth in one call", function()
  local m = importance_tiny(3)
  local r = prune.minitron(m, importance_calib(), { shape = { hidden = 16, intermediate = 24, layers = 2 } })
  eq(r.before.hidden, 32)
  eq({ r.after.layers, r.after.hidden, r.after.intermediate, r.after.heads }, { 2, 16, 24, 4 })
  local c = m:config()
  eq({ c.num_hidden_layers, c.hidden_size, c.intermediate_size }, { 2, 16, 24 })
  local logits = m:forward(torch.randint(0, 50, { 1, 5 }, { dtype = "int64" }))
  eq(logits:shape(), { 1, 5, 50 })
  local w = prune.minitron(importance_tiny(2), importance_calib(), { heads = 0.5, intermediate = 0.5,
                                                                     depth_metric = "layer_removal" })
  eq({ w.after.layers, w.after.heads, w.after.kv_heads, w.after.intermediate }, { 2, 2, 2, 20 })
end)

test("importance: taylor prunes by sparsity", function()
  local m = importance_tiny(2)
  local r = prune.taylor(m, importance_calib(), { heads = 0.5, intermediate = 0.25, variant = "vector" })
  eq({ r.after.heads, r.after.intermediate, r.after.hidden }, { 2, 30, 32 })
  raises(function() prune.taylor(m, importance_calib(), { shape = { hidden = 8 } }) end, "unknown option 'shape'")
end)

h.run()
