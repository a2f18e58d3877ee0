-- tests/lua/test_lora.lua: the `lora` module (bindings/lora.cpp) on tiny CPU models.
-- Run: build/runner tests/lua/test_lora.lua
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises
local T = require "tiny"  -- tests/lua/tiny.lua

local tmp = os.getenv("TMPDIR") or "/tmp"
local function tmpdir(name) return string.format("%s/luatune_lua_lora_%s_%d", tmp, name, os.time()) end

local function tiny(seed) return T.model { vocab_size = 64, head_dim = 8, seed = seed or 3 } end

local IDS = { { 1, 2, 3, 4, 5 }, { 6, 7, 8, 9, 10 } }

-- B starts at zero; give every lora_B a value so the adapters change the output.
local function perturb(model)
  torch.no_grad(function()
    for name, t in pairs(lora.parameters(model)) do
      if name:find("lora_B") then t[":"] = torch.randn(t:shape()) * 0.1 end
    end
  end)
end

test("apply leaves the output unchanged and freezes the base", function()
  local m = tiny()
  local before = m:forward(IDS)
  local n0 = m:num_params()
  eq(lora.apply(m, { r = 4, alpha = 8, targets = { "q_proj", "v_proj" }, seed = 1 }), 4)
  ok(torch.equal(m:forward(IDS), before), "identity at init")
  local p = lora.parameters(m)
  eq(p["model.layers.0.self_attn.q_proj.lora_A.weight"]:shape(), { 4, 32 })
  eq(p["model.layers.1.self_attn.v_proj.lora_B.weight"]:shape(), { 16, 4 })
  eq(p["model.layers.0.self_attn.q_proj.lora_A.weight"]:dtype(), "float32")
  ok(p["model.layers.0.self_attn.q_proj.lora_A.weight"]:requires_grad())
  ok(not m:parameters()["model.embed_tokens.weight"]:requires_grad(), "embeddings frozen")
  local n = m:num_params()
  eq(n.adapter, 2 * (4 * 32 + 32 * 4) + 2 * (4 * 32 + 16 * 4))
  eq(n.total, n0.total + n.adapter)
  eq(n.trainable, n.adapter)
  ok(tostring(m):find("params, " .. n.adapter .. " trainable, float32, cpu)", 1, true), tostring(m))
end)

test("apply takes a recipe's lora table as it is (a config{} table) and extra's keys over it", function()
  local cfg_lora = setmetatable({ r = 4, alpha = 8, targets = { "q_proj", "v_proj" } },
                                { __index = function(_, k) error("config: no key 'lora." .. k .. "'") end })
  local a, b = tiny(), tiny()
  eq(lora.apply(a, cfg_lora, { seed = 5 }), 4)
  eq(lora.apply(b, { r = 4, alpha = 8, targets = { "q_proj", "v_proj" }, seed = 5 }), 4)
  local pb = lora.parameters(b)
  for name, t in pairs(lora.parameters(a)) do ok(torch.equal(t, pb[name]), name) end
  eq(lora.apply(tiny(), { r = 4 }, { r = 2, targets = "q_proj" }), 2)  -- extra wins
  raises(function() lora.apply(tiny(), cfg_lora, { rank = 4 }) end, "bad argument #3 to 'apply' (unknown option 'rank'")
end)

test("options: all-linear, dora, rslora, layers", function()
  local m = tiny()
  local before = m:forward(IDS)
  eq(lora.apply(m, { targets = "all-linear", dora = true, rslora = true, layers = { 1 } }), 7)
  ok(torch.equal(m:forward(IDS), before), "DoRA identity at init")
  local p = lora.parameters(m)
  eq(p["model.layers.1.mlp.down_proj.lora_magnitude_vector"]:shape(), { 32 })
  eq(p["model.layers.0.mlp.down_proj.lora_A.weight"], nil)
  eq(p["model.layers.1.mlp.down_proj.lora_A.weight"]:shape(), { 16, 40 })  -- default r = 16
end)

test("save and load round trip through PEFT's files", function()
  local m = tiny()
  lora.apply(m, { r = 4, alpha = 16, dropout = 0.1, targets = { "k_proj", "up_proj" } })
  perturb(m)
  local dir = tmpdir("rt")
  lora.save(m, dir, { base_model = "meta-llama/Llama-3.2-1B" })
  local text = h.read_file(dir .. "/adapter_config.json")
  ok(text:find('"peft_type": "LORA"', 1, true) and text:find('"base_model_name_or_path": "meta-llama/Llama-3.2-1B"', 1, true), text)
  local fresh = tiny()
  local c = lora.load(fresh, dir)
  eq(c, { r = 4, alpha = 16, dropout = 0.1, rslora = false, dora = false, targets = { "k_proj", "up_proj" }, layers = {} })
  ok(torch.equal(fresh:forward(IDS), m:forward(IDS)), "same logits after load")
  os.execute("rm -rf '" .. dir .. "'")
end)

test("merge folds the adapters in and the merged model saves and loads", function()
  local m = tiny()
  lora.apply(m, { r = 4, alpha = 8, targets = "all-linear" })
  perturb(m)
  local with_adapter = m:forward(IDS)
  lora.merge(m)
  eq(m:num_params().adapter, 0)
  ok(torch.allclose(m:forward(IDS), with_adapter, { rtol = 1e-4, atol = 1e-5 }), "merged logits")
  local dir = tmpdir("merged")
  m:save(dir)
  ok(torch.equal(models.load(dir):forward(IDS), m:forward(IDS)), "merged model loads back")
  os.execute("rm -rf '" .. dir .. "'")
  raises(function() lora.merge(m) end, "lora.merge: the model has no LoRA adapters")
end)

test("errors name what was wrong", function()
  local m = tiny()
  raises(function() lora.apply(m, { targets = { "qkv" } }) end, 'lora.apply: unknown target "qkv"')
  raises(function() lora.apply(m, { rank = 4 }) end, "unknown option 'rank'")
  raises(function() lora.apply(m, { r = 2.5 }) end, "lora.apply: r must be a positive integer, got 2.5")
  raises(function() lora.apply(m, { targets = 3 }) end, "lora.apply: targets must be a string or a list of strings")
  raises(function() lora.apply(nil) end, "bad argument #1 to 'apply' (Model expected, got nil)")
  raises(function() lora.load(m, "no/such/adapter") end, "no/such/adapter: not a directory")
  raises(function() lora.save(m, tmpdir("none")) end, "the model has no LoRA adapters")
end)

-- LLaMA-Adapter (adaption prompts): the same module, saved and loaded by the same two functions.
test("adaption_prompt: identity at init, trainable prompt and gate, PEFT round trip", function()
  local m = tiny()
  local before = m:forward(IDS)
  eq(lora.adaption_prompt(m, { adapter_len = 3, adapter_layers = 1, seed = 2 }), 1)
  ok(torch.equal(m:forward(IDS), before), "zero gate: identity")
  local p = lora.parameters(m)
  eq(p["model.layers.1.self_attn.adaption_prompt"]:shape(), { 1, 3, 32 })
  eq(p["model.layers.1.self_attn.adaption_gate"]:shape(), { 1 })
  eq(p["model.layers.0.self_attn.adaption_prompt"], nil)
  ok(p["model.layers.1.self_attn.adaption_gate"]:requires_grad())
  ok(not m:parameters()["model.layers.1.self_attn.k_proj.weight"]:requires_grad(), "base frozen")
  local n = m:num_params()
  eq(n.adapter, 3 * 32 + 1)
  eq(n.trainable, n.adapter)
  torch.no_grad(function() p["model.layers.1.self_attn.adaption_gate"][":"] = torch.tensor({ 0.5 }) end)
  local adapted = m:forward(IDS)
  ok(not torch.equal(adapted, before), "a nonzero gate changes the output")

  local dir = tmpdir("ap")
  lora.save(m, dir, { base_model = "meta-llama/Llama-3.2-1B" })
  local text = h.read_file(dir .. "/adapter_config.json")
  ok(text:find('"peft_type": "ADAPTION_PROMPT"', 1, true) and text:find('"target_modules": "self_attn"', 1, true), text)
  local fresh = tiny()
  eq(lora.load(fresh, dir), { adapter_len = 3, adapter_layers = 1 })
  ok(torch.equal(fresh:forward(IDS), adapted), "same logits after load")
  os.execute("rm -rf '" .. dir .. "'")
end)

test("adaption_prompt: errors", function()
  local m = tiny()
  raises(function() lora.adaption_prompt(m, { adapter_layers = 3 }) end,
         "lora.adaption_prompt: adapter_layers must be in 1..2 (the model's layers), got 3")
  raises(function() lora.adaption_prompt(m) end, "lora.adaption_prompt: adapter_layers must be in 1..2")  -- default 30
  raises(function() lora.adaption_prompt(m, { adapter_len = 0, adapter_layers = 1 }) end,
         "lora.adaption_prompt: adapter_len must be a positive integer, got 0")
  raises(function() lora.adaption_prompt(m, { adapter_len = 2.5, adapter_layers = 1 }) end,
         "lora.adaption_prompt: adapter_len must be a positive integer, got 2.5")
  raises(function() lora.adaption_prompt(m, { len = 4 }) end, "unknown option 'len'")
  raises(function() lora.adaption_prompt(nil) end, "bad argument #1 to 'adaption_prompt' (Model expected, got nil)")
  lora.adaption_prompt(m, { adapter_len = 2, adapter_layers = 2 })
  raises(function() lora.adaption_prompt(m, { adapter_layers = 1 }) end, "lora.adaption_prompt: the model already has adapters")
  raises(function() lora.apply(m) end, "lora.apply: the model already has an adaption prompt (LLaMA-Adapter)")
  raises(function() lora.merge(m) end, "lora.merge: the model has an adaption prompt (LLaMA-Adapter), which cannot be merged")
  local l = tiny()
  lora.apply(l, { r = 2 })
  raises(function() lora.adaption_prompt(l, { adapter_layers = 1 }) end, "lora.adaption_prompt: the model already has adapters")
end)

h.run()
