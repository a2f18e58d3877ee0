-- tests/lua/test_export.lua: the `export` module (bindings/export.cpp) on tiny CPU models. The file
-- contents are checked in tests/cpp/test_gguf_export.cpp and against llama.cpp in
-- tests/recipes/test_gguf_export.sh; here: arguments, results, errors.
-- Run: build/runner tests/lua/test_export.lua
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

local tmp = os.getenv("TMPDIR") or "/tmp"
local function tmpdir(name) return string.format("%s/luatune_lua_export_%s_%d", tmp, name, os.time()) end
local SPM = "tests/fixtures/tokenizers/metaspace"  -- a SentencePiece-style BPE llama.cpp can express

local function tiny()
  return models.init { arch = "mistral", vocab_size = 64, hidden_size = 32, intermediate_size = 64,
                       num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2, head_dim = 8,
                       seed = 3 }
end

test("a Model with a tokenizer exports and reports path, bytes and tensors", function()
  local dir = tmpdir("model")
  os.execute("mkdir -p " .. dir)
  local r = export.gguf(tiny(), dir .. "/m.gguf", { tokenizer = tokenizer.load(SPM), outtype = "q8_0" })
  eq(r.path, dir .. "/m.gguf")
  eq(r.tensors, 1 + 2 * 9 + 2)  -- token_embd, 9 per layer, output_norm, output
  local f = assert(io.open(r.path, "rb"))
  eq(f:seek("end"), r.bytes)
  f:close()
  eq(r.outtype, "q8_0")
  eq(r.note, "")  -- every row fits q8_0's blocks of 32
end)

test("a q4_k export whose rows all fall back says it is q8_0, and why", function()
  local dir = tmpdir("q4k")
  os.execute("mkdir -p " .. dir)
  local r = export.gguf(tiny(), dir .. "/m.gguf", { tokenizer = tokenizer.load(SPM), outtype = "q4_k" })
  eq(r.outtype, "q8_0")
  eq(r.note, "export.gguf: outtype q4_k: every quantised tensor (16) fell back to q8_0 (rows of 32, 64 values; "
             .. "q4_K and q6_K need multiples of 256); the file is q8_0 (general.file_type 7), not q4_k")
end)

test("a directory exports with its own tokenizer", function()
  local dir = tmpdir("dir")
  tiny():save(dir .. "/model", { tokenizer = tokenizer.load(SPM) })
  local r = export.gguf(dir .. "/model", dir .. "/m.gguf")  -- outtype f16 by default
  ok(r.bytes > 0 and r.tensors == 21)
end)

test("errors name what is wrong", function()
  local m = tiny()
  raises(function() export.gguf(m, tmp .. "/x.gguf") end, "export.gguf: a Model needs {tokenizer = tok")
  raises(function() export.gguf(m, tmp .. "/x.gguf", { tokenizer = SPM, outtype = "q5_k" }) end,
         "export.gguf: outtype 'q5_k' is not one of f32, f16, bf16, q8_0, q4_0, q4_k")
  raises(function() export.gguf(m, tmp .. "/x.gguf", { tokenizer = SPM, adapter = "a" }) end,
         "export.gguf: adapter applies to a model directory")
  raises(function() export.gguf(m, tmp .. "/x.gguf", { tok = SPM }) end, "unknown option 'tok'")
  raises(function() export.gguf(m, tmp .. "/x.gguf", { tokenizer = "tests/fixtures/tokenizers/bytelevel" }) end,
         "has no llama.cpp equivalent")
  raises(function() export.gguf(42, tmp .. "/x.gguf") end, "Model expected")
end)

h.run()
