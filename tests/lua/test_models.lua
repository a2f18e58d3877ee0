-- tests/lua/test_models.lua: the `models` module (bindings/models.cpp) on tiny CPU models.
-- Run: build/runner tests/lua/test_models.lua. Uses the hand-made tokenizer fixture for generation.
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

local TOK = "tests/fixtures/tokenizers/bytelevel"
local tmp = os.getenv("TMPDIR") or "/tmp"
local function tmpdir(name) return string.format("%s/luatune_lua_models_%s_%d", tmp, name, os.time()) end

local function tiny(arch, extra)
  local o = { arch = arch, vocab_size = 64, hidden_size = 32, intermediate_size = 40, num_hidden_layers = 2,
              num_attention_heads = 4, num_key_value_heads = 2, head_dim = 8, seed = 3 }
  for k, v in pairs(extra or {}) do o[k] = v end
  return models.init(o)
end

test("init builds each family with HF-shaped parameters", function()
  for _, arch in ipairs { "llama", "mistral", "qwen2", "qwen3", "gemma2" } do
    local m = tiny(arch)
    local p = m:parameters()
    eq(p["model.embed_tokens.weight"]:shape(), { 64, 32 })
    eq(p["model.layers.1.self_attn.k_proj.weight"]:shape(), { 16, 32 })
    eq(p["model.layers.0.self_attn.q_proj.bias"] ~= nil, arch == "qwen2")
    eq(p["model.layers.0.self_attn.q_norm.weight"] ~= nil, arch == "qwen3")
    eq(p["model.layers.0.pre_feedforward_layernorm.weight"] ~= nil, arch == "gemma2")
    eq(p["lm_head.weight"] ~= nil, arch ~= "gemma2")  -- gemma2 ties embeddings by default
    ok(tostring(m):find("Model%(" .. arch .. ", 2 layers, hidden 32"), tostring(m))
  end
end)

test("forward returns logits for ids given as lists or tensors", function()
  local m = tiny("llama")
  local a = m:forward { 1, 2, 3 }
  eq(a:shape(), { 1, 3, 64 })
  local b = m:forward(torch.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = "int64" }))
  eq(b:shape(), { 2, 3, 64 })
  -- Up to float32 rounding: MKL blocks a matrix product by its shape, so a batch of 2 rounds row 0
  -- differently from a batch of 1 (9e-8 on logits of 0.3 here); a leak between rows is far larger.
  ok(torch.allclose(a[0], b[0], { atol = 1e-6 }), "row 0 must not depend on row 1")
  raises(function() m:forward { 1, 99 } end, "token id 99 outside the vocabulary [0, 64)")
  raises(function() m:forward { { 1, 2 }, { 3 } } end, "every row of ids must have the same length")
end)

test("num_params and config describe the model", function()
  local m = tiny("qwen2")
  local n = m:num_params()
  eq(n.embedding, 64 * 32)
  eq(n.total, n.embedding + n.lm_head + n.attention + n.mlp + n.norm)
  local c = m:config()
  eq(c.architectures, { "Qwen2ForCausalLM" })
  eq(c.num_hidden_layers, 2)
  eq(c.head_dim, 8)
  eq(c.torch_dtype, "float32")
end)

test("save then load is bit-exact and keeps the dtype", function()
  local m = tiny("gemma2", { dtype = "bf16" })
  local dir = tmpdir("rt")
  m:save(dir, { max_shard_size = 8000 })
  local back = models.load(dir)
  eq(back:dtype(), "bfloat16")
  local p, q = m:parameters(), back:parameters()
  for name, t in pairs(p) do ok(torch.equal(t, q[name]), name) end
  ok(torch.equal(m:forward { 5, 6, 7 }, back:forward { 5, 6, 7 }), "same logits")
  eq(models.load(dir, { dtype = "float32" }):dtype(), "float32")
  os.execute("rm -rf '" .. dir .. "'")
end)

test("init rejects unknown config fields and architectures", function()
  raises(function() models.init { arch = "llama", hiden_size = 8 } end,
         'unknown config.json field "hiden_size" (did you mean "hidden_size"?)')
  raises(function() models.init { arch = "gpt2" } end, 'architecture "gpt2" is not supported')
  raises(function() models.load("no/such/dir") end, "no/such/dir: not a directory")
end)

test("generate and perplexity with a tokenizer", function()
  local tok = tokenizer.load(TOK)
  local m = tiny("llama", { vocab_size = tok:vocab_size() })
  local text, info = m:generate(tok, "hello", { max_new_tokens = 5 })
  eq(type(text), "string")
  ok(info.new_tokens <= 5 and info.finish_reason ~= nil)
  local _, info2 = m:generate(tok, "hello", { max_new_tokens = 5, use_cache = false })
  eq(info.ids, info2.ids)
  local ppl, st = m:perplexity({ "hello world", "hello" }, { tokenizer = tok })
  ok(ppl > 1 and st.tokens > 0, "perplexity " .. ppl)
end)

h.run()
