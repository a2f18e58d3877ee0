-- tests/lua/test_distill.lua: the `distill` module (bindings/distill.cpp) on tiny CPU models.
-- Run: build/runner tests/lua/test_distill.lua
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises
local T = require "tiny"  -- tests/lua/tiny.lua

local function tiny(seed, hidden, layers, vocab)
  return T.model { seed = seed, hidden_size = hidden, num_hidden_layers = layers, vocab_size = vocab }
end
local function batch(seed) return T.batch(seed, 50, 4, 10) end

test("a distiller is a trainer hook: statistics in every step and evaluation", function()
  local student, teacher = tiny(1), tiny(2, 48, 3)
  local kd = distill.new(teacher, student, { loss = "forward_kl", temperature = 2, alpha = 1 })
  ok(tostring(kd):find("^Distiller%(forward_kl, temperature 2, alpha 1"), tostring(kd))
  local tr = train.new(student, { learning_rate = 1e-2, schedule = "constant", batch_size = 2, hooks = { kd } })
  local b = batch(3)
  local first = tr:step(b)
  ok(first.kd_loss > 0 and first.lm_loss > 0, "kd_loss and lm_loss reported")
  eq(first.hidden_loss, nil)
  eq(first.loss, first.kd_loss, 1e-5)  -- alpha 1: the objective is the KD term
  local last
  for _ = 1, 12 do last = tr:step(b) end
  ok(last.kd_loss < 0.6 * first.kd_loss, ("kd_loss %.3f -> %.3f"):format(first.kd_loss, last.kd_loss))
  local e = tr:evaluate { b }
  ok(e.kd_loss > 0)
  eq(e.lm_loss, e.loss, 1e-6)  -- evaluation keeps the LM loss
  eq(kd:teacher():config().hidden_size, 48)
end)

test("hidden-state pairs add a trained projection and hidden_loss", function()
  local student, teacher = tiny(4), tiny(5, 48, 3)
  local kd = distill.new(teacher, student, { hidden_layers = { { 0, 1 }, { 1, 2 } }, hidden_loss = "mse",
                                             hidden_weight = 0.5, seed = 7 })
  local tr = train.new(student, { learning_rate = 1e-2, schedule = "constant", hooks = { kd } })
  local s = tr:step(batch(6))
  ok(s.hidden_loss > 0 and s.kd_loss > 0)
end)

test("alpha 0 leaves the LM step alone", function()
  local a, b = tiny(8), tiny(8)
  local kd = distill.new(tiny(9), b, { alpha = 0 })
  local ta = train.new(a, { learning_rate = 1e-2, schedule = "constant" })
  local tb = train.new(b, { learning_rate = 1e-2, schedule = "constant", hooks = { kd } })
  for s = 1, 2 do
    local x, y = ta:step(batch(10 + s)), tb:step(batch(10 + s))
    eq(y.loss, x.loss)
  end
  local p, q = a:parameters(), b:parameters()
  for name, t in pairs(p) do ok(torch.equal(t, q[name]), name) end
end)

test("divergence: per row, jsd edges are the KLs", function()
  local s = torch.tensor { { 0, 0 }, { 1, 2 } }
  local t = torch.tensor { { math.log(3), 0 }, { 1, 2 } }
  local f = distill.divergence(s, t)
  eq(f:shape(), { 2 })
  eq(f:tolist(), { 0.75 * math.log(1.5) + 0.25 * math.log(0.5), 0 }, 1e-6)
  local r = distill.divergence(s, t, { loss = "reverse_kl" })
  eq(r:tolist()[1], 0.5 * math.log(2 / 3) + 0.5 * math.log(2), 1e-6)
  ok(torch.equal(distill.divergence(s, t, { loss = "jsd", beta = 0 }), f))
  ok(torch.equal(distill.divergence(s, t, { loss = "jsd", beta = 1 }), r))
  local hot = distill.divergence(s * 2, t * 2, { temperature = 2 })
  eq(hot:tolist(), f:tolist(), 1e-6)
  raises(function() distill.divergence(s, t, { alpha = 1 }) end, "alpha")
  raises(function() distill.divergence(s, torch.zeros(2, 3)) end,
         "distill.divergence: student and teacher logits must have one shape")
end)

test("a teacher cache with k = V trains as the live teacher does", function()
  local tok = tokenizer.load("tests/fixtures/tokenizers/bytelevel")
  local records = {}
  for i, p in ipairs { "hello", "hello world", "lll", "world!", "hello hello" } do
    records[i] = { prompt = p, response = ({ " world!", "!", " hello world", " lll", " world" })[i] }
  end
  local ds = data.from_records(records, { tokenizer = tok, chat = false, pack = false })
  local teacher = tiny(2, 48, 3)
  local dir = string.format("%s/luatune_lua_distill_cache_%d", os.getenv("TMPDIR") or "/tmp", os.time())
  local info = distill.write_cache(teacher, ds, { path = dir, k = 50, dtype = "float32", temperature = 2,
                                                  batch_size = 2 })
  eq(info.rows, #ds)
  eq(info.k, 50)
  eq(info.dtype, "float32")
  local a, b = tiny(1), tiny(1)
  local live = distill.new(teacher, a, { temperature = 2, alpha = 0.5 })
  local cached = distill.cached(b, { path = dir, temperature = 2, alpha = 0.5 })
  ok(tostring(cached):find("^CachedDistiller%(forward_kl, temperature 2, alpha 0.5, k 50 float32"), tostring(cached))
  local opts = { learning_rate = 1e-2, schedule = "constant", batch_size = 2 }
  opts.hooks = { live }
  local ta = train.new(a, opts)
  opts.hooks = { cached }
  local tb = train.new(b, opts)
  for _, batch in ds:batches { size = 3, max_steps = 3 } do
    local x, y = ta:step(batch), tb:step(batch)
    eq(y.loss, x.loss, 1e-5 * x.loss)
    eq(y.kd_loss, x.kd_loss, 1e-5 * x.kd_loss)
  end
  raises(function() tb:step(batch(1)) end,
         "distill.cached: the cached teacher needs batches from data.jsonl's dataset (row ids)")
  raises(function() distill.cached(b, { path = dir, temperature = 1 }) end,
         "distill.cached: temperature 1 differs from the teacher cache's 2")
  raises(function() distill.cached(b, { path = dir, temperature = 2, loss = "jsd" }) end,
         'distill.cached: loss must be "forward_kl" with a cached teacher, got "jsd"')
  raises(function() distill.write_cache(teacher, ds, { path = dir, k = 51 }) end,
         "distill.write_cache: option 'k' must be in 1..50 (the teacher's vocabulary), got 51")
  os.execute("rm -rf '" .. dir .. "'")
end)

test("option errors", function()
  local s, t = tiny(1), tiny(2)
  raises(function() distill.new(tiny(2, 32, 2, 64), tiny(1, 32, 2, 80)) end,
         "distill.new: teacher vocabulary 64 != student 80")
  raises(function() distill.new(t, s, { loss = "kl" }) end,
         'distill.new: loss must be "forward_kl", "reverse_kl" or "jsd", got "kl"')
  raises(function() distill.new(t, s, { temperature = 0 }) end, "distill.new: temperature must be positive, got 0")
  raises(function() distill.new(t, s, { alpha = 2 }) end, "distill.new: alpha must be in [0, 1], got 2")
  raises(function() distill.new(t, s, { beta = -1 }) end, "distill.new: beta must be in [0, 1], got -1")
  raises(function() distill.new(t, s, { chunk = 0 }) end, "distill.new: chunk must be positive, got 0")
  raises(function() distill.new(t, s, { hidden_layers = { { 0, 5 } } }) end,
         "distill.new: hidden_layers[1]: teacher layer 5 is out of range (the teacher has 2 layers, 0..1)")
  raises(function() distill.new(t, s, { hidden_layers = { 0, 1 } }) end,
         "distill.new: hidden_layers[1] must be a pair {student_layer, teacher_layer}")
  raises(function() distill.new(t, s, { temprature = 2 }) end, "temprature")
  raises(function() distill.new(s, s) end, "distill.new: the teacher and the student are the same model object")
  raises(function() distill.new(t) end, "Model expected")
  raises(function() train.new(s, { hooks = { {} } }) end, "expected a pruner, distiller, preference loss or reward model")
end)

h.run()
