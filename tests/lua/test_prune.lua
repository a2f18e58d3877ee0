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

test("the module is registered", function()
  eq(type(prune), "table")
end)

h.run()
