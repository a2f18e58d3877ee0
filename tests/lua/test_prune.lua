-- tests/lua/test_prune.lua: the `prune` module on tiny CPU models.
-- Run: build/runner tests/lua/test_prune.lua
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

-- ==== sheared ====================================================================================

local function sheared_tiny(seed)
  return models.init { arch = "llama", vocab_size = 50, hidden_size = 32, intermediate_size = 40,
                       num_hidden_layers = 4, num_attention_heads = 8, num_key_value_heads = 2, seed = seed or 1 }
end

local function sheared_batch(seed)
  torch.manual_seed(seed)
  return train.batch { ids = torch.randint(0, 50, { 4, 10 }, { dtype = "int64" }) }
end

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
  local tr = train.new(m, { lr = 1e-3, schedule = "constant", micro_batch_size = 2, hooks = { p } })
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
