-- tests/lua/test_qlora.lua: the `qlora` module (bindings/qlora.cpp) and models.load{quantize=} on
-- tiny CPU models. Run: build/runner tests/lua/test_qlora.lua
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

local tmp = os.getenv("TMPDIR") or "/tmp"
local function tmpdir(name) return string.format("%s/luatune_lua_qlora_%s_%d", tmp, name, os.time()) end

local function tiny(seed, dtype)
  return models.init { arch = "llama", vocab_size = 64, hidden_size = 64, intermediate_size = 96,
                       num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2,
                       seed = seed or 3, dtype = dtype or "float32" }
end

local IDS = { { 1, 2, 3, 4, 5 }, { 6, 7, 8, 9, 10 } }

test("quantize_tensor: bitsandbytes' tensors, and back within the NF4 step", function()
  local t = torch.randn({ 64, 128 }) * 0.02
  local q = qlora.quantize_tensor(t)
  eq(q.packed:shape(), { 4096, 1 })
  eq(q.packed:dtype(), "uint8")
  eq(q.absmax:dtype(), "uint8")  -- double quantization is on by default
  eq(q.absmax:numel(), 128)
  eq(q.quant_map:numel(), 16)
  eq(q.quant_map[0]:item(), -1)
  eq(q.quant_map[15]:item(), 1)
  eq(q.nested_quant_map:numel(), 256)
  eq(q.shape, { 64, 128 })
  eq(q.quant_type, "nf4")
  eq(q.blocksize, 64)
  local back = qlora.dequantize_tensor(q)
  eq(back:shape(), { 64, 128 })
  local err = (back - t):abs():max():item()
  ok(err > 0 and err < 0.16 * t:abs():max():item() * 1.01, "error " .. err)
  local plain = qlora.quantize_tensor(t, { quant_type = "fp4", double_quant = false, blocksize = 128 })
  eq(plain.absmax:dtype(), "float32")
  eq(plain.absmax:numel(), 64)
  eq(plain.offset, nil)
  ok(qlora.dequantize_tensor(plain, "bf16"):dtype() == "bfloat16")
end)

test("models.load{quantize=} and qlora.quantize agree; forward stays close", function()
  local dir = tmpdir("src")
  local m = tiny(4, "bf16")
  m:save(dir)
  local dense = m:forward(IDS)
  local q1 = models.load(dir, { quantize = "nf4" })
  eq(qlora.info(q1).linears, 14)
  eq(qlora.info(q1).quant_type, "nf4")
  ok(qlora.info(q1).double_quant)
  local info = qlora.info(q1)
  -- 4 bits + an 8-bit scale per 64 weights, plus the 16- and 256-entry maps per Linear (which a
  -- 64-wide toy cannot amortise): well under half of bf16.
  ok(info.bytes < info.dense_bytes * 0.45, info.bytes .. " vs " .. info.dense_bytes)
  eq(qlora.quantize(m, "nf4"), 14)
  ok(torch.equal(q1:forward(IDS), m:forward(IDS)), "same codes either way")
  local rel = ((m:forward(IDS) - dense):to("float32"):norm() / dense:to("float32"):norm()):item()
  ok(rel > 0 and rel < 0.3, "relative change " .. rel)
  ok(tostring(m):find("14 Linears nf4", 1, true), tostring(m))
  eq(qlora.info(tiny()), nil)
  local some = models.load(dir, { quantize = { quant_type = "fp4", skip = { "down_proj" } } })
  eq(qlora.info(some).linears, 12)
  eq(qlora.info(some).quant_type, "fp4")
  eq(qlora.dequantize(some), 12)
  eq(qlora.info(some), nil)
  eq(models.load(dir, { quantize = false }):forward(IDS):dtype(), "bfloat16")
end)

test("QLoRA: LoRA on a 4-bit base trains, saves a PEFT adapter, merges to a plain model", function()
  local m = tiny(5, "bf16")
  qlora.quantize(m)
  eq(lora.apply(m, { r = 4, alpha = 8, targets = "all-linear", dropout = 0 }), 14)
  local tr = train.new(m, { learning_rate = 1e-2, max_steps = 8, schedule = "constant" })
  torch.manual_seed(1)
  local batch = train.batch { ids = torch.randint(0, 64, { 4, 10 }, { dtype = "int64" }) }
  local first = tr:step(batch).loss
  local last
  for _ = 1, 7 do last = tr:step(batch).loss end
  ok(last < first * 0.9, first .. " -> " .. last)
  local adapter = tmpdir("adapter")
  lora.save(m, adapter)
  local fresh = tiny(5, "bf16")
  qlora.quantize(fresh)
  lora.load(fresh, adapter)
  ok(torch.equal(fresh:forward(IDS), m:forward(IDS)), "adapter reloads onto a fresh 4-bit base")
  local with_adapter = m:forward(IDS):to("float32")
  lora.merge(m)
  eq(qlora.info(m), nil)
  local merged = m:forward(IDS):to("float32")
  ok(((merged - with_adapter):norm() / with_adapter:norm()):item() < 0.02, "merged logits close")
  local out = tmpdir("merged")
  m:save(out)
  local cfg = io.open(out .. "/config.json"):read("*a")
  ok(not cfg:find("quantization_config", 1, true), "no quantization_config in a merged model")
  ok(torch.equal(models.load(out):forward(IDS), m:forward(IDS)), "merged model loads back")
end)

test("a 4-bit model saves in bitsandbytes' layout and loads back 4-bit", function()
  local m = tiny(6, "bf16")
  qlora.quantize(m, { blocksize = 128 })
  local dir = tmpdir("bnb")
  m:save(dir)
  local cfg = io.open(dir .. "/config.json"):read("*a")
  ok(cfg:find('"quant_method":"bitsandbytes"', 1, true) or cfg:find('"quant_method": "bitsandbytes"', 1, true), cfg)
  local back = models.load(dir)
  eq(qlora.info(back).blocksize, 128)
  ok(torch.equal(back:forward(IDS), m:forward(IDS)))
end)

test("errors", function()
  local dir = tmpdir("err")
  tiny():save(dir)
  raises(function() models.load(dir, { quantize = "int4" }) end,
         'models.load: quantize: quant_type "int4" is not one of nf4, fp4')
  raises(function() models.load(dir, { quantize = { blocksize = 100 } }) end,
         "models.load: quantize: blocksize 100 is not a power of two from 32 to 4096")
  raises(function() models.load(dir, { quantize = { bits = 4 } }) end, "bits")
  local m = tiny()
  qlora.quantize(m)
  raises(function() prune.apply(m, { layers = { 0 } }) end, "4-bit Linears")
  local m2 = tiny()
  lora.apply(m2)
  raises(function() qlora.quantize(m2) end, "already has an adapter (quantize first, then lora.apply)")
  raises(function() qlora.dequantize_tensor({ packed = torch.zeros({ 2 }) }) end, "field absmax")
end)

h.run()
