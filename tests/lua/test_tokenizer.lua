-- tests/lua/test_tokenizer.lua: the `tokenizer` module (bindings/tokenizer.cpp) on the hand-made
-- fixtures under tests/fixtures/tokenizers/, and on the npm Llama 3.1 tokenizer when
-- scripts/setup.sh installed it. Token ids are 0-based values as in Hugging Face.
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

local BYTELEVEL = "tests/fixtures/tokenizers/bytelevel"
local METASPACE = "tests/fixtures/tokenizers/metaspace"
local LLAMA3 = "tokenizers/llama3_1"

local function exists(path)
  local f = io.open(path, "r")
  if f then f:close() end
  return f ~= nil
end

-- The npm Llama 3.1 tokenizer, or nil (saying the test is skipped) when scripts/setup.sh has not
-- installed it.
local function llama3_or_skip()
  if not exists(LLAMA3 .. "/tokenizer.json") then
    print("  (skipped: run scripts/setup.sh to install the reference tokenizers)")
    return nil
  end
  return tokenizer.load(LLAMA3)
end

test("load gives a Tokenizer userdata", function()
  local tok = tokenizer.load(BYTELEVEL)
  eq(type(tok), "userdata")
  ok(tostring(tok):find("Tokenizer(vocab_size=23", 1, true), tostring(tok))
  eq(tok:vocab_size(), 23)
end)

test("encode: ids are plain numbers; special adds BOS", function()
  local tok = tokenizer.load(BYTELEVEL)
  eq(tok:encode("hello world"), { 11, 16 })
  eq(tok:encode("hello world", { special = true }), { 20, 11, 16 })
  eq(tok:encode(""), {})
  eq(tokenizer.encode(tok, "lll"), { 9, 2 })  -- module function and method are the same
end)

test("decode, with and without special tokens", function()
  local tok = tokenizer.load(METASPACE)
  local ids = tok:encode("hello world", { special = true })
  eq(ids, { 1, 20, 25, 2 })
  eq(tok:decode(ids), "<s> hello world</s>")
  eq(tok:decode(ids, { skip_special = true }), "hello world")
  eq(tok:decode({}), "")
  eq(tok:decode(tok:encode("€")), "€")  -- byte_fallback both ways
end)

test("vocabulary look-ups", function()
  local tok = tokenizer.load(BYTELEVEL)
  eq(tok:token_to_id("hello"), 11)
  eq(tok:token_to_id("<|special|>"), 21)
  eq(tok:token_to_id("absent"), nil)
  eq(tok:id_to_token(16), "Ġworld")
  eq(tok:id_to_token(0), "h")
  eq(tok:id_to_token(23), nil)
  eq(tok:id_to_token(-1), nil)
end)

test("special() and chat_template()", function()
  local s = tokenizer.load(METASPACE):special()
  eq(s.bos, 1)
  eq(s.eos, { 2, 40 })
  eq(s.pad, nil)
  eq(s.unk, 0)
  eq(s.bos_text, "<s>")
  eq(tokenizer.load(METASPACE):chat_template(), "default template")
  eq(tokenizer.load(BYTELEVEL):chat_template(), "{{ bos_token }}from chat_template.jinja\n")
end)

test("errors name the problem", function()
  raises(function() tokenizer.load("no/such/dir") end, "tokenizer: 'no/such/dir' does not exist")
  local tok = tokenizer.load(BYTELEVEL)
  raises(function() tok:encode("x", { specail = true }) end, "unknown option 'specail'")
  raises(function() tok:decode({ 1, "two" }) end, "token ids must be numbers (item 2 is a string)")
  raises(function() tok:decode({ 1.5 }) end, "integer")
  raises(function() tok:encode("a\195(") end, "tokenizer: text is not valid UTF-8 (byte 1 of 3)")
  raises(function() tokenizer.encode("not a tokenizer", "x") end, "Tokenizer expected, got string")
  tok:release()
  raises(function() tok:encode("x") end, "Tokenizer was released")
end)

test("Llama 3.1 (npm reference package, when installed)", function()
  local tok = llama3_or_skip()
  if not tok then return end
  -- Ids transformers.js gives for the same text (tests/reference/tokenize_ref.mjs checks a corpus).
  eq(tok:encode("Hello world's  don't 12345", { special = true }),
     { 128000, 9906, 1917, 596, 220, 1541, 956, 220, 4513, 1774 })
  eq(tok:decode({ 9906, 1917 }), "Hello world")
  eq(tok:special().bos, 128000)
  eq(tok:special().eos, { 128009 })
  eq(tok:vocab_size(), 128256)
  ok(tok:chat_template():find("<|start_header_id|>", 1, true), "chat template text")
end)

test("chat: render, encode with the assistant mask, pick a template", function()
  local tok = llama3_or_skip()
  if not tok then return end
  eq(tok:chat_templates(), { "default" })
  local msgs = { { role = "user", content = "Hi" }, { role = "assistant", content = " Hello! " } }
  local text, spans = tok:render_chat(msgs)
  eq(text, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>" ..
           "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>")
  eq(#spans, 1)
  eq(text:sub(spans[1][1], spans[1][2]), "Hello!<|eot_id|>")
  local ids, mask = tok:encode_chat(msgs)
  eq(#ids, #mask)
  eq(ids[1], 128000)  -- one BOS, from the template
  ok(ids[2] ~= 128000)
  local kept = {}
  for i = 1, #ids do if mask[i] == 1 then kept[#kept + 1] = ids[i] end end
  eq(tok:decode(kept), "Hello!<|eot_id|>")
  local prompt = tok:render_chat({ msgs[1] }, { add_generation_prompt = true, chat_template = "chatml" })
  eq(prompt, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
  -- a template file, tools and template variables as transformers passes them
  local file = os.tmpname() .. ".jinja"
  local f = assert(io.open(file, "w"))
  f:write("{{ bos_token }}{{ tools | tojson }}|{{ enable_thinking }}|{% for m in messages %}{{ m.tool_calls[0].function.name }}{% endfor %}")
  f:close()
  local calls = { { role = "assistant", tool_calls = { { type = "function", ["function"] = { name = "add" } } } } }
  eq(tok:render_chat(calls, { chat_template = file, tools = { { name = "add" } },
                              chat_template_kwargs = { enable_thinking = false } }),
     '<|begin_of_text|>[{"name": "add"}]|False|add')
  raises(function() tok:render_chat(msgs, { chat_template = "llama4" }) end, "'llama4' is no file")
  raises(function() tok:render_chat({ { content = "x" } }) end, "message 1 must be a table with a string role")
  raises(function() tok:render_chat(msgs, { format = "llama3" }) end, "format")
end)

h.run()
