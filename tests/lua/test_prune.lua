-- tests/lua/test_prune.lua: the `prune` module on tiny CPU models.
-- Run: build/runner tests/lua/test_prune.lua
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises
local T = require "tiny"  -- tests/lua/tiny.lua

-- ==== sheared ====================================================================================

local function sheared_tiny(seed) return T.model { num_hidden_layers = 4, num_attention_heads = 8, seed = seed } end
local function sheared_batch(seed) return T.batch(seed, 50, 4, 10) end

local SHEARED_TARGETS = { layers = 0.25, heads = 0.5, hidden = 0.25, intermediate = 0.5 }

test("sheared: target shape and option errors", function()
  local m = sheared_tiny()
  local p = prune.sheared(m, SHEARED_TARGETS)
  eq(p:target(), { layers = 3, heads = 4, kv_heads = 2, head_dim = 4, hidden = 24, intermediate = 20,
                   whole_groups = false })
  ok(tostring(p):find("^ShearedPruner%("), tostring(p))
  local es = p:expected_sparsity()
  ok(es.layers > 0 and es.layers < 0.01 and es.heads < 0.01, "masks start on")
  raises(function() prune.sheared(m, { layer = 0.5 }) end, "unknown option 'layer'")
  raises(function() prune.sheared(m, { layers = 0.5, mask_lr = "fast" }) end, "mask_lr")
  raises(function() prune.sheared(m, { layers = 0.5, mask_lr = 0 }) end,
         "prune.sheared: mask_lr must be positive, got 0")
  raises(function() prune.sheared(m, {}) end, "nothing to prune")
  raises(function() prune.sheared(m, { layers = 0.5, round_to = 0 }) end, "round_to must be at least 1")
  raises(function() prune.sheared("model", { layers = 0.5 }) end, "Model expected")
end)

test("sheared: deterministic masks keep the target counts", function()
  local p = prune.sheared(sheared_tiny(), SHEARED_TARGETS)
  local z = p:masks()
  eq(z.layers:shape(), { 4 })
  eq(z.heads:shape(), { 4, 8 })
  eq(z.intermediate:shape(), { 4, 40 })
  eq(z.hidden:shape(), { 32 })
  eq(z.layers:ne(torch.zeros(4)):sum():item(), 3)
  eq(z.hidden:ne(torch.zeros(32)):sum():item(), 24)
end)

test("sheared: training with the hook, stats, finalize, save and reload", function()
  local m = sheared_tiny()
  local p = prune.sheared(m, { layers = 0.25, heads = 0.5, hidden = 0.25, intermediate = 0.5, mask_lr = 0.5,
                               warmup_steps = 2 })
  local tr = train.new(m, { learning_rate = 1e-3, schedule = "constant", batch_size = 2, hooks = { p } })
  local s
  for i = 1, 4 do s = tr:step(sheared_batch(i)) end
  for _, kind in ipairs { "layers", "heads", "hidden", "intermediate" } do
    ok(type(s["expected_sparsity_" .. kind]) == "number", "expected_sparsity_" .. kind)
    ok(type(s["lambda1_" .. kind]) == "number", "lambda1_" .. kind)
  end
  eq(s.target_sparsity_layers, 0.25)  -- the warm-up is over at step 4
  ok(type(s.lagrangian) == "number")
  local e = tr:evaluate { sheared_batch(9) }
  ok(e.loss > 0 and e.expected_sparsity_layers ~= nil)
  local want = p:target()
  eq(p:finalize(), want)
  raises(function() p:finalize() end, "prune: this Sheared pruner was finalised; make a new one")
  local c = m:config()
  eq({ c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.hidden_size, c.intermediate_size },
     { 3, 4, 2, 24, 20 })
  local dir = os.tmpname()
  os.remove(dir)
  m:save(dir)
  local back = models.load(dir)
  ok(torch.allclose(m:forward { 5, 6, 7, 8 }, back:forward { 5, 6, 7, 8 }), "same logits after reload")
  os.execute("rm -rf '" .. dir .. "'")
end)

test("sheared: dynamic batch loading samples by proportion and applies the DoReMi update", function()
  local tok = tokenizer.load("tests/fixtures/tokenizers/bytelevel")
  local function records(text, n)
    local out = {}
    for i = 1, n do out[i] = { text = text } end
    return out
  end
  local a = data.from_records(records("hello world", 5), { tokenizer = tok, pack = false })
  local b = data.from_records(records("hello", 3), { tokenizer = tok, pack = false })
  local dynamic_batches = require "dynamic_batches"
  raises(function() dynamic_batches.new { domains = { a = a }, eta = 1, sead = 3 } end, "unknown option 'sead'")
  raises(function() dynamic_batches.new { domains = { a = a }, proportions = { c = 1 } } end, "not a domain")
  local dyn = dynamic_batches.new { domains = { a = a, b = b }, proportions = { a = 3, b = 1 },
                                    reference_loss = { a = 2.0, b = 1.0 }, seed = 7 }
  eq(dyn:proportions(), { a = 0.75, b = 0.25 })
  local total = { a = 0, b = 0 }
  for _ = 1, 50 do
    local batch, counts = dyn:batch(8)
    eq(batch:ids():shape()[1], 8)
    total.a, total.b = total.a + counts.a, total.b + counts.b
  end
  ok(math.abs(total.a / 400 - 0.75) < 0.08, "domain a drawn " .. total.a .. " of 400")
  -- Padding: rows of "hello" are shorter; their padding has no target.
  local _, counts = dyn:batch(16)
  ok(counts.a > 0 and counts.b > 0)
  -- The update: a = softmax(log w + eta (loss - ref)), w = (1 - c) a + c / k.
  local w = dyn:update { a = 2.5, b = 1.0 }
  local ea, eb = 0.75 * math.exp(0.5), 0.25
  local c = 1e-4
  local wa, wb = (1 - c) * ea / (ea + eb) + c / 2, (1 - c) * eb / (ea + eb) + c / 2
  eq(w, { a = wa / (wa + wb), b = wb / (wa + wb) }, 1e-12)
  eq(dyn:proportions(), w)
  raises(function() dyn:update { a = 1 } end, "no loss for domain 'b'")
  -- The same seed draws the same domains.
  local d1 = dynamic_batches.new { domains = { a = a, b = b }, seed = 3 }
  local d2 = dynamic_batches.new { domains = { a = a, b = b }, seed = 3 }
  for _ = 1, 5 do
    local x1 = d1:batch(4)
    local x2 = d2:batch(4)
    ok(torch.equal(x1:ids(), x2:ids()))
  end
end)

-- ==== end sheared ================================================================================

-- ---- surgery tests ----
local function gqa(seed) return T.model { vocab_size = 64, num_hidden_layers = 3, head_dim = 8, seed = seed or 3 } end
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
local function importance_tiny(layers, seed) return T.model { num_hidden_layers = layers, seed = seed } end
local function importance_calib(n)
  local out = {}
  for i = 1, n or 2 do out[i] = T.batch(100 + i, 50, 2, 12) end
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

-- ==== unstructured: prune.unstructured / prune.sparsity (host/prune/unstructured.h) ====
local function unstructured_tiny(seed) return T.model { vocab_size = 64, head_dim = 8, seed = seed or 3 } end
local function unstructured_calibration(n)
  local out = {}
  for i = 1, n or 2 do out[i] = T.batch(i, 64, 2, 12) end
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
