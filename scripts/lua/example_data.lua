-- scripts/lua/example_data.lua: the example chat data set the fine-tuning recipes default to
-- (data = "data/example_chat.jsonl", docs/data.md). We generate it, with no randomness but our own
-- seeded generator, so the same code always writes the same bytes; the build writes it (CMakeLists.txt,
-- scripts/make_example_data.lua) and nothing generated is kept in git.
--   local example = require("example_data")  -- scripts/lua/example_data.lua
--   local records = example.records()        -- 600 { messages = {...} } conversations
--   example.write("out/example_chat.jsonl")   -- the same as JSONL, one conversation a line
-- Seven small tasks a model can learn from a few hundred rows: sums, differences, unit conversions,
-- reversing a word, a word in capitals, sorting three numbers, and a two-turn sum then double.
local M = {}

-- ---------------------------------------------------------------------------------------------
-- A Park-Miller generator: state * 16807 mod (2^31 - 1) stays below 2^46, exact in a Lua number,
-- so the sequence is the same on every machine (math.random's is not promised to be).
local function generator(seed)
  local state = seed % 2147483646 + 1
  return function(n)  -- a whole number in [0, n)
    state = state * 16807 % 2147483647
    return state % n
  end
end

-- Our own word list (60 words, lower case, 4-7 letters), for the reversal and capitals tasks.
local WORDS = {
  "garden", "river", "window", "pencil", "basket", "candle", "forest", "ladder", "mirror", "planet",
  "rabbit", "silver", "tunnel", "violin", "wallet", "yellow", "anchor", "bridge", "castle", "dragon",
  "engine", "falcon", "guitar", "harbor", "island", "jacket", "kettle", "lemon", "marble", "napkin",
  "orange", "pepper", "quartz", "rocket", "saddle", "tomato", "velvet", "walnut", "zipper", "cloud",
  "stone", "apple", "table", "chair", "water", "light", "music", "paper", "train", "house",
  "button", "carpet", "donkey", "feather", "hammer", "helmet", "monkey", "pillow", "spider", "turtle",
}

-- Unit conversions by a whole factor: (from, to, factor).
local UNITS = {
  { "metres", "centimetres", 100 }, { "kilometres", "metres", 1000 }, { "kilograms", "grams", 1000 },
  { "litres", "millilitres", 1000 }, { "hours", "minutes", 60 }, { "minutes", "seconds", 60 },
  { "days", "hours", 24 }, { "weeks", "days", 7 },
}

local function turn(role, content) return { role = role, content = content } end

-- ---------------------------------------------------------------------------------------------
-- The tasks: each takes the generator and returns one conversation's messages.
local TASKS = {
  { name = "sum", rows = 150, make = function(r)
      local a, b = r(90) + 10, r(90) + 10
      return { turn("user", ("What is %d + %d?"):format(a, b)), turn("assistant", ("%d + %d = %d."):format(a, b, a + b)) }
    end },
  { name = "difference", rows = 80, make = function(r)
      local a, b = r(90) + 10, r(90) + 10
      if a < b then a, b = b, a end
      return { turn("user", ("What is %d - %d?"):format(a, b)), turn("assistant", ("%d - %d = %d."):format(a, b, a - b)) }
    end },
  { name = "units", rows = 110, make = function(r)
      local u, n = UNITS[r(#UNITS) + 1], r(30) + 2
      return { turn("user", ("How many %s are in %d %s?"):format(u[2], n, u[1])),
               turn("assistant", ("%d %s is %d %s."):format(n, u[1], n * u[3], u[2])) }
    end },
  { name = "reverse", rows = 50, make = function(r)
      local w = WORDS[r(#WORDS) + 1]
      return { turn("user", ('Reverse the letters of "%s".'):format(w)), turn("assistant", w:reverse()) }
    end },
  { name = "capitals", rows = 50, make = function(r)
      local w = WORDS[r(#WORDS) + 1]
      return { turn("user", ('Write "%s" in capital letters.'):format(w)), turn("assistant", w:upper()) }
    end },
  { name = "sort", rows = 100, make = function(r)
      local x = { r(99) + 1, r(99) + 1, r(99) + 1 }
      local question = ("Sort from smallest to largest: %d, %d, %d."):format(x[1], x[2], x[3])
      table.sort(x)
      return { turn("user", question), turn("assistant", ("%d, %d, %d"):format(x[1], x[2], x[3])) }
    end },
  { name = "two_turns", rows = 60, make = function(r)
      local a, b = r(40) + 10, r(40) + 10
      local s = a + b
      return { turn("user", ("What is %d + %d?"):format(a, b)), turn("assistant", ("%d + %d = %d."):format(a, b, s)),
               turn("user", "And twice that?"), turn("assistant", ("2 * %d = %d."):format(s, 2 * s)) }
    end },
}

M.seed = 20240601  -- fixed: the data set is one file, not a family of them
M.rows = 0
for _, t in ipairs(TASKS) do M.rows = M.rows + t.rows end  -- 600

-- The conversations, { messages = { {role, content}, ... } } each, all different, the tasks interleaved in
-- an order drawn from the same generator (so a file-order split or a short read still sees every task).
function M.records()
  local r = generator(M.seed)
  local order = {}
  for _, t in ipairs(TASKS) do
    for _ = 1, t.rows do order[#order + 1] = t end
  end
  for i = #order, 2, -1 do  -- Fisher-Yates
    local j = r(i) + 1
    order[i], order[j] = order[j], order[i]
  end
  local out, seen = {}, {}
  for i, t in ipairs(order) do
    local messages, key
    repeat  -- no conversation twice, so no held-out row is also a training row
      messages = t.make(r)
      local texts = {}
      for k, m in ipairs(messages) do texts[k] = m.content end
      key = table.concat(texts, "\n")
    until not seen[key]
    seen[key] = true
    out[i] = { messages = messages }
  end
  return out
end

-- ---------------------------------------------------------------------------------------------
-- JSONL with the keys in a fixed order (a Lua table has none): {"messages": [{"role", "content"}]}.
local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    if c == '"' or c == "\\" then return "\\" .. c end
    return ("\\u%04x"):format(c:byte())
  end) .. '"'
end

-- The whole file's text: one conversation a line, each line ending in "\n".
function M.jsonl()
  local lines = {}
  for i, rec in ipairs(M.records()) do
    local turns = {}
    for k, m in ipairs(rec.messages) do
      turns[k] = ('{"role": %s, "content": %s}'):format(json_string(m.role), json_string(m.content))
    end
    lines[i] = '{"messages": [' .. table.concat(turns, ", ") .. "]}\n"
  end
  return table.concat(lines)
end

-- ---------------------------------------------------------------------------------------------
-- The same conversations for the other recipes (docs/data.md, "The example data set"):
--   text: {"text"} rows for continued pretraining and the pruning recipes, which pack text into rows of
--     max_length tokens and need enough of them to hold some out: every conversation's turns as one
--     paragraph, and the data set TEXT_COPIES times in orders drawn from the generator;
--   preferences: {"prompt", "chosen", "rejected"} for dpo, orpo and reward_model: a single-turn
--     conversation's question, its answer, and the answer of the next conversation of the same task
--     (a plausible answer to another question), where the two differ;
--   prompts: {"prompt"} for rejection_sampling: the single-turn questions.
M.TEXT_COPIES = 8

local function paragraph(rec)
  local texts = {}
  for k, m in ipairs(rec.messages) do texts[k] = m.content end
  return table.concat(texts, " ")
end

local function lines_of(rows)
  local out = {}
  for i, fields in ipairs(rows) do
    local kv = {}
    for k, f in ipairs(fields) do kv[k] = json_string(f[1]) .. ": " .. json_string(f[2]) end
    out[i] = "{" .. table.concat(kv, ", ") .. "}\n"
  end
  return table.concat(out)
end

function M.text_jsonl()
  local records, r, rows = M.records(), generator(M.seed + 1), {}
  for _ = 1, M.TEXT_COPIES do
    local order = {}
    for i = 1, #records do order[i] = i end
    for i = #order, 2, -1 do
      local j = r(i) + 1
      order[i], order[j] = order[j], order[i]
    end
    for _, i in ipairs(order) do rows[#rows + 1] = { { "text", paragraph(records[i]) } } end
  end
  return lines_of(rows)
end

-- A single-turn conversation's task: the first word of its question picks it well enough to pair answers.
local function task_of(rec) return rec.messages[1].content:match("^(%S+ %S+)") end

function M.preferences_jsonl()
  local records, rows, next_of = M.records(), {}, {}
  for i = #records, 1, -1 do  -- the next single-turn record of the same task, wrapping around
    local rec = records[i]
    if #rec.messages == 2 then
      local t = task_of(rec)
      next_of[i] = next_of[t] or i
      next_of[t] = i
    end
  end
  for i, rec in ipairs(records) do
    if #rec.messages == 2 then
      local first = next_of[task_of(rec)]
      local j = next_of[i] ~= i and next_of[i] or first
      local chosen, rejected = rec.messages[2].content, records[j].messages[2].content
      if chosen ~= rejected then
        rows[#rows + 1] = { { "prompt", rec.messages[1].content }, { "chosen", chosen }, { "rejected", rejected } }
      end
    end
  end
  return lines_of(rows)
end

function M.prompts_jsonl()
  local rows = {}
  for _, rec in ipairs(M.records()) do
    if #rec.messages == 2 then rows[#rows + 1] = { { "prompt", rec.messages[1].content } } end
  end
  return lines_of(rows)
end

-- Writes `text` to `path` (its directory must exist) through a temporary file renamed into place, so a
-- reader never sees half a file. Returns the number of lines.
local function write_file(path, text)
  local tmp = path .. ".tmp"
  local f = assert(io.open(tmp, "wb"))
  assert(f:write(text))
  assert(f:close())
  assert(os.rename(tmp, path))
  return select(2, text:gsub("\n", "\n"))
end

-- Writes M.jsonl() to `path`. Returns the number of rows.
function M.write(path)
  write_file(path, M.jsonl())
  return M.rows
end

-- Writes the chat set and the three others into `dir`: example_chat.jsonl, example_text.jsonl,
-- example_preferences.jsonl, example_prompts.jsonl. Returns { [file name] = lines }.
function M.write_all(dir)
  return { ["example_chat.jsonl"] = M.write(dir .. "/example_chat.jsonl"),
           ["example_text.jsonl"] = write_file(dir .. "/example_text.jsonl", M.text_jsonl()),
           ["example_preferences.jsonl"] = write_file(dir .. "/example_preferences.jsonl", M.preferences_jsonl()),
           ["example_prompts.jsonl"] = write_file(dir .. "/example_prompts.jsonl", M.prompts_jsonl()) }
end

return M
