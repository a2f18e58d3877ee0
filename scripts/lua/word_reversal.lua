-- scripts/lua/word_reversal.lua: the quickstart's task, a skill SmolLM2-135M-Instruct lacks: "Reverse the
-- order of these words: moon tree lamp" -> "lamp tree moon", 3 to 5 different words. The training
-- questions draw from one word list and the held-out ones from another only, so held-out accuracy
-- measures the skill, not memorised answers.
--   local task = require("word_reversal").make(seed, 400, 48)  -- .train, .held_out, .choices
--   local texts, acc = require("word_reversal").answers(model, tok, task.held_out, 16)
local M = {}

M.train_words = { "apple", "river", "stone", "cloud", "horse", "chair", "paper", "glass", "train", "bread",
  "green", "music", "light", "table", "water", "house", "dog", "cat", "fish", "bird", "tree", "road", "door",
  "book", "milk", "rain", "snow", "star", "ship", "ring", "king", "hat", "cup", "box", "pen", "key", "sun", "bag",
  "bell", "coat" }
M.held_out_words = { "moon", "lamp", "wolf", "gold", "sand", "kite", "leaf", "shoe", "corn", "drum", "fork",
  "nest", "frog", "salt", "wind", "rope", "bean", "duck", "silk", "coin" }

-- {q = question, a = the reversed list, words = the list}: train_count questions from the training
-- words, eval_count from the held-out words, and the held-out ones as eval.multiple_choice records
-- (`choices`): the reversed list, the given order and two more orders of the same words, shuffled. One
-- seeded generator draws them all, in that order.
function M.make(seed, train_count, eval_count)
  local state = seed * 7919 + 17
  local function rand(n)  -- 0 .. n-1, from the high bits of a 31-bit LCG
    state = (state * 1103515245 + 12345) % 2147483648
    return math.floor(state / 65536) % n
  end
  local function question(words)
    local n = 3 + rand(3)
    local picked, used = {}, {}
    while #picked < n do  -- n different words, so there are always 4 different orders
      local w = words[rand(#words) + 1]
      if not used[w] then used[w] = true; picked[#picked + 1] = w end
    end
    local rev = {}
    for i = n, 1, -1 do rev[#rev + 1] = picked[i] end
    return { q = "Reverse the order of these words: " .. table.concat(picked, " "), a = table.concat(rev, " "),
             words = picked }
  end
  local task = { train = {}, held_out = {}, choices = {} }
  for i = 1, train_count do task.train[i] = question(M.train_words) end
  for i = 1, eval_count do task.held_out[i] = question(M.held_out_words) end
  for _, t in ipairs(task.held_out) do
    local choices, seen = { t.a }, { [t.a] = true }
    local function add(s) if not seen[s] then seen[s] = true; choices[#choices + 1] = s end end
    add(table.concat(t.words, " "))
    while #choices < 4 do
      local w = {}
      for i, x in ipairs(t.words) do w[i] = x end
      for i = #w, 2, -1 do local j = rand(i) + 1; w[i], w[j] = w[j], w[i] end
      add(table.concat(w, " "))
    end
    local k = rand(#choices) + 1  -- where the right answer goes
    choices[1], choices[k] = choices[k], choices[1]
    task.choices[#task.choices + 1] = { question = t.q, choices = choices, answer = k - 1 }
  end
  return task
end

-- Greedy answers to the first n questions of `list`, asked in the model's chat template, and the
-- share that are exactly the reversed list (a final period allowed).
function M.answers(model, tok, list, n)
  local out, right = {}, 0
  for i = 1, math.min(n, #list) do
    local t = list[i]
    local prompt = tok:render_chat({ { role = "user", content = t.q } }, { add_generation_prompt = true })
    local text = model:generate(tok, prompt, { max_new_tokens = 3 * #t.words + 4 })
    text = text:gsub("^%s+", ""):gsub("%s+$", "")
    out[i] = text
    if text == t.a or text == t.a .. "." then right = right + 1 end
  end
  return out, right / math.max(#out, 1)
end

return M
