-- tests/lua/test_example_data.lua: the example chat data set the fine-tuning recipes default to
-- (scripts/lua/example_data.lua, docs/data.md): the same bytes every time, 600 different conversations,
-- every one a valid chat record for the data reader, enough of them held out at eval_fraction's default,
-- and the file the build wrote beside the runner (build/data/example_chat.jsonl) is the generator's output.
-- Run: build/runner tests/lua/test_example_data.lua
local h = require "harness"
local test, eq, ok = h.test, h.eq, h.ok
local example = require "example_data"

local BYTELEVEL = "tests/fixtures/tokenizers/bytelevel"
local LLAMA3 = "tokenizers/llama3_1"
local TMP = os.tmpname()
os.remove(TMP)
os.execute("mkdir -p '" .. TMP .. "'")

local function lines_of(text)
  local out = {}
  for line in text:gmatch("([^\n]*)\n") do out[#out + 1] = line end
  return out
end

test("the generator writes the same bytes twice, 600 lines, each ending in a newline", function()
  local text = example.jsonl()
  eq(example.write(TMP .. "/a.jsonl"), 600)
  eq(example.write(TMP .. "/b.jsonl"), 600)
  ok(h.read_file(TMP .. "/a.jsonl") == text, "a.jsonl differs from example.jsonl()")
  ok(h.read_file(TMP .. "/b.jsonl") == text, "a second write differs from the first")
  eq(example.rows, 600)
  eq(#lines_of(text), 600)
  eq(text:sub(-1), "\n")
  ok(not io.open(TMP .. "/a.jsonl.tmp"), "the temporary file was left behind")
end)

test("its bytes are pinned: the first line and the length (a change to the generator changes the data set)", function()
  local text = example.jsonl()
  eq(lines_of(text)[1], '{"messages": [{"role": "user", "content": "What is 12 + 43?"}, '
                        .. '{"role": "assistant", "content": "12 + 43 = 55."}, '
                        .. '{"role": "user", "content": "And twice that?"}, '
                        .. '{"role": "assistant", "content": "2 * 55 = 110."}]}')
  eq(#text, 81723)
end)

test("the conversations are all different and alternate user and assistant, ending with an answer", function()
  local seen = {}
  for i, rec in ipairs(example.records()) do
    local texts = {}
    for k, m in ipairs(rec.messages) do
      eq(m.role, k % 2 == 1 and "user" or "assistant")
      ok(#m.content > 0, "record " .. i .. ": empty content")
      texts[k] = m.content
    end
    eq(#rec.messages % 2, 0)
    local key = table.concat(texts, "\n")
    ok(not seen[key], "record " .. i .. " repeats record " .. tostring(seen[key]))
    seen[key] = i
  end
end)

test("every row is a chat record the data reader keeps whole, with answers to train on", function()
  local path = TMP .. "/a.jsonl"
  example.write(path)
  local tok = tokenizer.load(BYTELEVEL)
  local ds = data.jsonl(path, { tokenizer = tok, chat_template = "chatml", pack = false, max_length = 256 })
  local s = ds:stats()
  eq({ s.records, s.skipped_bad, s.dropped_empty, s.truncated, #ds }, { 600, 0, 0, 0, 600 })
  ok(s.target_tokens > 0 and s.target_tokens < s.tokens, "answers only are trained")
  -- eval_fraction's default (0.02, scripts/lua/run_keys.lua) holds out 12 conversations.
  local train_set, eval_set = ds:split(0.98)
  eq({ #train_set, #eval_set }, { 588, 12 })
end)

test("with the Llama 3.1 tokenizer's own chat template (skipped without scripts/setup.sh)", function()
  local f = io.open(LLAMA3 .. "/tokenizer.json")
  if not f then print("  skip: " .. LLAMA3 .. " missing") return end
  f:close()
  local path = TMP .. "/a.jsonl"
  example.write(path)
  local s = data.jsonl(path, { tokenizer = tokenizer.load(LLAMA3), pack = false, max_length = 2048 }):stats()
  eq({ s.records, s.skipped_bad, s.dropped_empty, s.truncated }, { 600, 0, 0, 0 })
end)

test("the build wrote the generator's output beside the runner (data/example_chat.jsonl)", function()
  local built = hw.runner_path():match("^(.*)/[^/]*$") .. "/data/example_chat.jsonl"
  local f = io.open(built, "rb")
  ok(f, built .. " is missing: building the runner writes it (CMakeLists.txt)")
  local text = f:read("*a")
  f:close()
  ok(text == example.jsonl(), built .. " is stale: it differs from scripts/lua/example_data.lua's output")
  eq(require("paths").resolve("data/example_chat.jsonl"), built)  -- the recipes' default finds it
end)

test("the text, preference and prompt sets: what the pruning, preference and sampling recipes read", function()
  local dir = TMP .. "/all"
  os.execute("mkdir -p '" .. dir .. "'")
  local n = example.write_all(dir)
  eq(n, { ["example_chat.jsonl"] = 600, ["example_text.jsonl"] = 4800, ["example_preferences.jsonl"] = 490,
          ["example_prompts.jsonl"] = 540 })
  local tok = tokenizer.load(BYTELEVEL)
  -- text: packed into rows as the pruning recipes read it, enough rows that 5 % holds some out
  local text = data.jsonl(dir .. "/example_text.jsonl", { tokenizer = tok, format = "text", pack = true,
                                                          max_length = 2048 })
  eq(text:stats().records, 4800)
  local _, held = text:split(0.95)
  ok(#held >= 2, "5 % of the packed text rows holds out " .. #held)
  -- preferences: every pair read, chosen and rejected differ
  eq(#data.preferences(dir .. "/example_preferences.jsonl", { tokenizer = tok, chat_template = "chatml" }), 490)
  for line in io.lines(dir .. "/example_preferences.jsonl") do
    local chosen, rejected = line:match('"chosen": (".-"), "rejected": (".-")}$')
    ok(chosen and rejected and chosen ~= rejected, line)
  end
  for line in io.lines(dir .. "/example_prompts.jsonl") do ok(line:match('^{"prompt": ".+"}$'), line) end
  -- the same bytes every time
  eq(example.text_jsonl(), example.text_jsonl())
  eq(example.preferences_jsonl(), example.preferences_jsonl())
end)

test("the build wrote the other sets beside the runner too", function()
  local dir = hw.runner_path():match("^(.*)/[^/]*$") .. "/data"
  for name, text in pairs { ["example_text.jsonl"] = example.text_jsonl(),
                            ["example_preferences.jsonl"] = example.preferences_jsonl(),
                            ["example_prompts.jsonl"] = example.prompts_jsonl() } do
    local f = io.open(dir .. "/" .. name, "rb")
    ok(f, dir .. "/" .. name .. " is missing")
    ok(f:read("*a") == text, name .. " is stale")
    f:close()
  end
end)

h.run()
os.execute("rm -rf '" .. TMP .. "'")
