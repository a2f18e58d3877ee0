-- tests/lua/test_train.lua: the `train` module (bindings/train.cpp) on a tiny CPU model.
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

local function tiny(seed)
  return models.init { arch = "llama", vocab_size = 50, hidden_size = 32, intermediate_size = 40,
                       num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2, seed = seed or 1 }
end

local function batch(seed)
  torch.manual_seed(seed)
  return train.batch { ids = torch.randint(0, 50, { 4, 10 }, { dtype = "int64" }) }
end

test("batch: next-token targets by default", function()
  local b = batch(1)
  eq(b:ids():shape(), { 4, 10 })
  eq(b:tokens(), 40)
  eq(b:target_tokens(), 36)
  raises(function() train.batch { ids = torch.zeros(3) } end, "ids must be a (rows, length) tensor")
end)

test("steps lower the loss and report statistics", function()
  local tr = train.new(tiny(), { lr = 1e-2, schedule = "constant", micro_batch_size = 2 })
  local b = batch(2)
  local first = tr:step(b)
  for _ = 1, 25 do tr:step(b) end
  local last = tr:step(b)
  ok(last.loss < first.loss * 0.6, ("loss %.3f -> %.3f"):format(first.loss, last.loss))
  eq(first.target_tokens, 36)
  ok(first.grad_norm > 0 and first.tokens_per_s > 0 and first.lr == 1e-2)
  eq(tr:step_count(), 27)
  local e = tr:evaluate { b }
  ok(e.loss < first.loss and math.abs(e.perplexity - math.exp(e.loss)) < 1e-9)
end)

test("warmup and cosine schedule through lr()", function()
  local tr = train.new(tiny(), { lr = 1.0, warmup = 4, steps = 14, schedule = "cosine" })
  eq(tr:lr(2), 0.5)
  eq(tr:lr(9), 0.5, 1e-12)
  eq(tr:lr(14), 0, 1e-12)
end)

test("save and resume continue exactly", function()
  local dir = os.tmpname()
  os.remove(dir)
  local opts = { lr = 5e-3, steps = 6, warmup = 1, output_dir = dir }
  local straight_model = tiny()
  local straight = train.new(straight_model, { lr = 5e-3, steps = 6, warmup = 1 })
  for s = 1, 6 do straight:step(batch(10 + s)) end
  local m1 = tiny()
  local a = train.new(m1, opts)
  for s = 1, 3 do a:step(batch(10 + s)) end
  ok(a:save():find("step%-0000003$"))
  local m2 = tiny(7)
  local b = train.new(m2, opts)
  eq(b:resume(), 3)
  for s = 4, 6 do b:step(batch(10 + s)) end
  local p, q = straight_model:parameters(), m2:parameters()
  for name, t in pairs(p) do ok(torch.equal(t, q[name]), name) end
  os.execute("rm -rf '" .. dir .. "'")
end)

test("bad options fail clearly", function()
  raises(function() train.new(tiny(), { optimizer = "adam" }) end, 'optimizer must be "adamw" or "sgd"')
  raises(function() train.new(tiny(), { schedule = "cosine" }) end, 'schedule "cosine" needs steps > 0')
  raises(function() train.new(tiny(), { lr = 1e-3, lerning_rate = 1 }) end, "lerning_rate")
end)

h.run()
