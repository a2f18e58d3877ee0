-- tests/lua/test_data.lua: the `data` module (bindings/data.cpp) on the byte-level fixture
-- tokenizer (hello=11, " world"=16, "!"=18, <|bos|>=20, EOS <|special|>=21) and, when
-- scripts/setup.sh installed it, the npm Llama 3.1 tokenizer. Rows and steps count from 1;
-- ids and targets are 0-based token ids; -100 marks "no target".
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

local BYTELEVEL = "tests/fixtures/tokenizers/bytelevel"
local LLAMA3 = "tokenizers/llama3_1"
local PR = "tests/fixtures/data/prompt_response.jsonl"
local BAD = "tests/fixtures/data/bad_text.jsonl"
local X = -100

local function exists(path)
  local f = io.open(path, "r")
  if f then f:close() end
  return f ~= nil
end

local tok = tokenizer.load(BYTELEVEL)

local function texts(n)
  local base = { "hello world", "hello", "hello world!", "lll", "hello hello world", "world!" }
  local out = {}
  for i = 1, n do out[i] = { text = base[(i - 1) % #base + 1] } end
  return out
end

test("jsonl: prompt/response rows, targets shifted, loss on the response and EOS", function()
  local ds = data.jsonl(PR, { tokenizer = tok, chat = false, pack = false })
  eq(#ds, 2)
  eq(ds:size(), 2)
  ok(tostring(ds):find("Dataset(rows=2, records=2, format=prompt_response", 1, true), tostring(ds))
  local r = ds:row(1)
  eq(r.ids, { 20, 11, 16, 18, 21 })
  eq(r.targets, { X, 16, 18, 21, X })
  eq(r.positions, { 0, 1, 2, 3, 4 })
  eq(r.segments, { 0, 0, 0, 0, 0 })
  eq(ds:row(2).targets, { X, X, 18, 21, X })
  eq(ds:stats(), { records = 2, skipped_bad = 0, dropped_empty = 0, rows = 2, tokens = 10, target_tokens = 5,
                   truncated = 0 })
  raises(function() ds:row(3) end, "row 3 out of range (1 to 2)")
  local all = data.jsonl(PR, { tokenizer = tok, chat = false, pack = false, train_on_prompt = true })
  eq(all:row(2).targets, { 11, 16, 18, 21, X })
end)

test("from_records: packed rows of max_length, positions restart, padding its own segment", function()
  local ds = data.from_records(texts(3), { tokenizer = tok, max_length = 8 })
  eq(#ds, 2)
  local r = ds:row(1)
  eq(r.ids, { 20, 11, 16, 21, 20, 11, 21, 0 })
  eq(r.targets, { 11, 16, 21, X, 11, 21, X, X })
  eq(r.positions, { 0, 1, 2, 3, 0, 1, 2, 0 })
  eq(r.segments, { 0, 0, 0, 0, 1, 1, 1, 2 })
end)

test("batches: (step, Batch) with CPU int64 tensors; a one-pass loop without steps", function()
  local ds = data.from_records(texts(5), { tokenizer = tok, pack = false })
  local steps, rows = {}, 0
  for step, b in ds:batches { size = 2, shuffle = false } do
    steps[#steps + 1] = step
    rows = rows + b:ids():size(0)
    eq(b:ids():dtype(), "int64")
    eq(b:ids():device(), "cpu")
    ok(tostring(b):find("Batch(", 1, true))
  end
  eq(steps, { 1, 2, 3 })
  eq(rows, 5)
  local _, b = ds:batches { size = 5, shuffle = false }()
  eq(b:tokens(), ds:stats().tokens)
  eq(b:target_tokens(), ds:stats().target_tokens)
  eq(b:ids():shape(), { 5, 6 })  -- padded to the longest row
  eq(b:targets():tolist()[2], { 11, 21, X, X, X, X })
  eq(b:segments():tolist()[2], { 0, 0, 0, 1, 1, 1 })
  eq(b:positions():tolist()[2], { 0, 1, 2, 0, 1, 2 })
end)

test("batches: start=K continues exactly like a straight run; epochs cycle", function()
  local opts = { tokenizer = tok, pack = false, seed = 5 }
  local straight = {}
  for step, b in data.from_records(texts(7), opts):batches { size = 3, max_steps = 6 } do straight[step] = b end
  eq(#straight, 6)
  local resumed = data.from_records(texts(7), opts)
  local first
  for step, b in resumed:batches { size = 3, max_steps = 6, start = 4 } do
    first = first or step
    ok(torch.equal(b:ids(), straight[step]:ids()), "ids differ at step " .. step)
    ok(torch.equal(b:targets(), straight[step]:targets()), "targets differ at step " .. step)
  end
  eq(first, 5)
  local other = {}
  for step, b in data.from_records(texts(7), { tokenizer = tok, pack = false, seed = 6 }):batches { size = 3, max_steps = 6 } do
    other[step] = b
  end
  local same = true
  for s = 1, 6 do same = same and torch.equal(other[s]:ids(), straight[s]:ids()) end
  ok(not same, "another seed gives the same order")
end)

test("split: deterministic, disjoint, by record", function()
  local ds = data.from_records(texts(50), { tokenizer = tok, max_length = 16 })
  local train, val = ds:split(0.9)
  eq(train:stats().records, 45)
  eq(val:stats().records, 5)
  eq(train:stats().tokens + val:stats().tokens, ds:stats().tokens)
  local _, val2 = ds:split(0.9)
  eq(val2:row(1), val:row(1))
end)

test("bad records: FILE:LINE, skip_bad counts them", function()
  raises(function() data.jsonl(BAD, { tokenizer = tok }) end,
         BAD .. ':3: expected a JSON object with "text" (a string), got {"txt":"hello"}')
  local ds = data.jsonl(BAD, { tokenizer = tok, skip_bad = true })
  eq(ds:stats().skipped_bad, 2)
  eq(ds:stats().records, 2)
  raises(function() data.from_records({ { text = "hello" }, { text = 3 } }, { tokenizer = tok }) end,
         'records[2]: expected a JSON object with "text" (a string), got {"text":3}')
end)

-- Records reach the host through lt_to_json (bindings/lua_util.h), the converter hw uses too.
test("records as JSON: an empty table is an object, NaN and mixed tables fail naming the path", function()
  raises(function() data.from_records({ {} }, { tokenizer = tok }) end, "got {}")
  raises(function() data.from_records({ { text = {} } }, { tokenizer = tok }) end, 'got {"text":{}}')
  raises(function() data.from_records({ { text = "hello", score = 0 / 0 } }, { tokenizer = tok }) end,
         "from_records: records[1].score is nan; JSON has no NaN or infinity")
  raises(function() data.from_records({ { text = "hello", tags = { "a", x = 1 } } }, { tokenizer = tok }) end,
         "from_records: records[1].tags mixes list items and named keys")
end)

test("options are checked", function()
  raises(function() data.jsonl(PR, { tokenizer = tok, max_lenght = 8 }) end,
         "unknown option 'max_lenght' (did you mean 'max_length'?)")
  raises(function() data.jsonl(PR, { max_length = 8 }) end, "option 'tokenizer' expects a Tokenizer")
  raises(function() data.jsonl(PR, { tokenizer = tok, format = "sharegpt" }) end, "data: unknown format 'sharegpt'")
  raises(function() data.from_records(texts(1), { tokenizer = tok }):batches { max_steps = 3 } end,
         "option 'size' (rows per batch) is required")
  raises(function() data.jsonl("no/such.jsonl", { tokenizer = tok }) end, "data: cannot open 'no/such.jsonl'")
end)

test("llama 3.1: chat records train on the answers and <|eot_id|> only", function()
  if not exists(LLAMA3 .. "/tokenizer.json") then print("  skipped: tokenizers/llama3_1 missing (scripts/setup.sh)") return end
  local t = tokenizer.load(LLAMA3)
  local ds = data.from_records({ { messages = { { role = "user", content = "Hi" },
                                                { role = "assistant", content = "Hello!" } } } },
                               { tokenizer = t, pack = false })
  local function trained(r)
    local ids = {}
    for _, x in ipairs(r.targets) do if x ~= X then ids[#ids + 1] = x end end
    return t:decode(ids)
  end
  eq(trained(ds:row(1)), "Hello!<|eot_id|>")
  -- one format a dataset: prompt/response rendered as a conversation (the tokenizer has a template)
  -- or as plain text with chat = false, EOS appended
  local pr = { { prompt = "2+2=", response = "4" } }
  eq(trained(data.from_records(pr, { tokenizer = t, pack = false }):row(1)), "4<|eot_id|>")
  local plain = data.from_records(pr, { tokenizer = t, pack = false, chat = false }):row(1)
  eq(trained(plain), "4<|eot_id|>")
  eq(t:decode(plain.ids), "<|begin_of_text|>2+2=4<|eot_id|>")
end)

h.run()
