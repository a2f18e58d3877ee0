-- tests/lua/test_eval.lua: the `eval` module (bindings/eval.cpp) on a tiny random Llama with the real
-- Llama 3.1 tokenizer (fetched by scripts/setup.sh; exits 77, skipped, without it).
-- Run: build/runner tests/lua/test_eval.lua
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

local TOK = "tokenizers/llama3_1"
local probe = io.open(TOK .. "/tokenizer.json")
if not probe then
  print("SKIP: " .. TOK .. " is not installed (scripts/setup.sh fetches it)")
  os.exit(77)
end
probe:close()

local tok = tokenizer.load(TOK)
local model = models.init { arch = "llama", tokenizer = tok, hidden_size = 32, intermediate_size = 48,
                            num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2, seed = 7 }

local task = {
  { question = "What is 1+1?", choices = { "1", "2", "3", "4" }, answer = 1 },
  { question = "Pick red.", choices = { "blue", "red", "green", "grey" }, answer = "B" },
  { question = "Sky?", choices = { "up", "down", "left", "right" }, answer = 0 },
  { question = "Cold?", choices = { "ice", "fire", "sun", "lava" }, answer = 0 },
}

-- What the model picks for a letters-mode record, computed here from model:forward: the
-- continuation " A" is one token, so its log-likelihood is the log-softmax at the last position.
local function pick_by_hand(prompt, n)
  local ids = tok:encode(prompt, { special = true })
  local logp = model:forward(ids)[0][-1]:log_softmax(0)
  local best, best_ll = nil, -math.huge
  for i = 1, n do
    local letter = tok:encode(" " .. string.char(64 + i))
    eq(#letter, 1)
    local ll = logp[letter[1]]:item()
    if ll > best_ll then best, best_ll = i - 1, ll end
  end
  return best
end

local function prompt_of(r)
  local s = r.question
  for i, c in ipairs(r.choices) do s = s .. "\n" .. string.char(64 + i) .. ". " .. c end
  return s .. "\nAnswer:"
end

-- The task with answers set from the picks made by hand: right on odd records, wrong on even ones,
-- so a correct scorer gets exactly 0.5 and one that picks anything else does not.
local function half_right(prefix)
  local out = {}
  for i, r in ipairs(task) do
    local pick = pick_by_hand(prefix .. prompt_of(r), #r.choices)
    out[i] = { question = r.question, choices = r.choices,
               answer = i % 2 == 1 and pick or (pick + 1) % #r.choices }
  end
  return out
end

test("multiple_choice scores letters like a forward pass computed by hand", function()
  local t = half_right("")
  local res = eval.multiple_choice(model, tok, t)
  eq(res.n, 4)
  eq(res.acc, 0.5)
  eq(res.acc_norm, 0.5)  -- every letter has length 1
  eq(eval.multiple_choice(model, tok, t, { batch_size = 3 }).acc, 0.5)
  eq(eval.multiple_choice(model, tok, task).n, 4)  -- letter answers ("B") are accepted
end)

test("few-shot examples come from a separate set or from the task's first records", function()
  local fewshot = { { question = "2+2?", choices = { "3", "4", "5", "6" }, answer = 1 } }
  local t = half_right(prompt_of(fewshot[1]) .. " B\n\n")
  eq(eval.multiple_choice(model, tok, t, { shots = 1, fewshot = fewshot }).acc, 0.5)
  local own = eval.multiple_choice(model, tok, task, { shots = 1, limit = 2 })
  eq(own.n, 2)
end)

test("records load from JSONL; text mode and acc_norm run", function()
  local path = string.format("%s/luatune_lua_eval_%d.jsonl", os.getenv("TMPDIR") or "/tmp", os.time())
  local f = assert(io.open(path, "w"))
  f:write('{"question": "Colour of grass?", "choices": ["green", "a shade of blue"], "answer": 0}\n')
  f:write('{"question": "Opposite of up?", "choices": ["down", "sideways"], "answer": "A"}\n')
  f:close()
  local res = eval.multiple_choice(model, tok, path, { choices_as = "text" })
  eq(res.n, 2)
  ok(res.acc >= 0 and res.acc <= 1 and res.acc_norm >= 0 and res.acc_norm <= 1)
  os.remove(path)
end)

test("perplexity delegates to model:perplexity", function()
  local a, ia = eval.perplexity(model, { "hello world", "the sky is blue" }, { tokenizer = tok })
  local b, ib = model:perplexity({ "hello world", "the sky is blue" }, { tokenizer = tok })
  eq(a, b)
  eq(ia.tokens, ib.tokens)
end)

test("errors name the record, the field or the option", function()
  raises(function() eval.multiple_choice(model, tok, { { question = "Q", choices = { "a" }, answer = 1 } }) end,
         "eval.multiple_choice: the task record 1: answer 1 is not a choice index (0-based, 1 choices)")
  raises(function() eval.multiple_choice(model, tok, { { question = "Q", answer = 0 } }) end,
         "eval.multiple_choice: the task record 1: choices must be a list of strings")
  raises(function() eval.multiple_choice(model, tok, task, { choices_as = "words" }) end,
         'eval.multiple_choice: choices_as must be "letters" or "text", got "words"')
  raises(function() eval.multiple_choice(model, tok, task, { shot = 1 }) end, "unknown option 'shot'")
  raises(function() eval.multiple_choice(model, tok, task, { shots = 4 }) end,
         "eval: shots = 4 takes the first 4 of 4 records as examples, leaving none to score")
  raises(function() eval.multiple_choice(model, tok, "/nonexistent/task.jsonl") end, "/nonexistent/task.jsonl")
  raises(function() eval.multiple_choice(tok, model, task) end, "Model expected")
end)

h.run()
