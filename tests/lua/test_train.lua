-- tests/lua/test_train.lua: the `train` module (bindings/train.cpp) on a tiny CPU model.
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises
local T = require "tiny"  -- tests/lua/tiny.lua

local function tiny(seed) return T.model { seed = seed } end
local function batch(seed) return T.batch(seed, 50, 4, 10) end

test("batch: next-token targets by default", function()
  local b = batch(1)
  eq(b:ids():shape(), { 4, 10 })
  eq(b:tokens(), 40)
  eq(b:target_tokens(), 36)
  raises(function() train.batch { ids = torch.zeros(3) } end, "ids must be a (rows, length) tensor")
end)

test("steps lower the loss and report statistics", function()
  local tr = train.new(tiny(), { learning_rate = 1e-2, schedule = "constant", batch_size = 2 })
  local b = batch(2)
  local first = tr:step(b)
  for _ = 1, 25 do tr:step(b) end
  local last = tr:step(b)
  ok(last.loss < first.loss * 0.6, ("loss %.3f -> %.3f"):format(first.loss, last.loss))
  eq(first.target_tokens, 36)
  ok(first.grad_norm > 0 and first.tokens_per_s > 0 and first.lr == 1e-2)
  eq(tr:step_count(), 27)
  local e = tr:evaluate { b }
  ok(e.loss < first.loss and math.abs(e.perplexity - math.exp(e.loss)) < 1e-9)
end)

test("warmup and cosine schedule through lr()", function()
  local tr = train.new(tiny(), { learning_rate = 1.0, warmup_steps = 4, max_steps = 14, schedule = "cosine" })
  eq(tr:lr(2), 0.5)
  eq(tr:lr(9), 0.5, 1e-12)
  eq(tr:lr(14), 0, 1e-12)
end)

test("options: the recipes' names; the old names still work (with a warning); unknown keys fail", function()
  local new = train.new(tiny(), { learning_rate = 1.0, warmup_steps = 4, max_steps = 14, schedule = "cosine" })
  local old = train.new(tiny(), { lr = 1.0, warmup = 4, steps = 14, schedule = "cosine" })
  for s = 1, 14 do eq(old:lr(s), new:lr(s)) end
  eq(new:lr(2), 0.5)
  -- A config{} table (reading a missing key raises) is read as it is.
  local strict = setmetatable({ learning_rate = 0.5, max_steps = 2 }, { __index = function(_, k) error("no key " .. k) end })
  eq(train.new(tiny(), strict):lr(2), 0, 1e-12)
  raises(function() train.new(tiny(), { lr = 1, learning_rate = 1 }) end,
         "options 'lr' and 'learning_rate' are one option ('lr' is its old name); give only 'learning_rate'")
  raises(function() train.new(tiny(), { lerning_rate = 1 }) end, "unknown option 'lerning_rate' (did you mean 'learning_rate'?)")
  local err = raises(function() train.new(tiny(), { rate = 1 }) end, "valid options: optimizer, learning_rate, betas")
  ok(not err:find(", lr,", 1, true), "the old names are not offered: " .. err)
end)

test("save and resume continue exactly", function()
  local dir = os.tmpname()
  os.remove(dir)
  local opts = { learning_rate = 5e-3, max_steps = 6, warmup_steps = 1, output_dir = dir }
  local straight_model = tiny()
  local straight = train.new(straight_model, { learning_rate = 5e-3, max_steps = 6, warmup_steps = 1 })
  for s = 1, 6 do straight:step(batch(10 + s)) end
  local m1 = tiny()
  local a = train.new(m1, opts)
  for s = 1, 3 do a:step(batch(10 + s)) end
  ok(a:save():find("step%-0000003$"))
  local m2 = tiny(7)
  local b = train.new(m2, opts)
  eq(b:resume(), 3)
  for s = 4, 6 do b:step(batch(10 + s)) end
  local p, q = straight_model:parameters(), m2:parameters()
  for name, t in pairs(p) do ok(torch.equal(t, q[name]), name) end
  os.execute("rm -rf '" .. dir .. "'")
end)

test("bad options fail clearly", function()
  raises(function() train.new(tiny(), { optimizer = "adam" }) end, 'optimizer must be "adamw", "adamw8bit" or "sgd"')
  raises(function() train.new(tiny(), { shard = "zero3" }) end,
         'shard must be "none", "optimizer", "gradients" or "full" (ZeRO stage 0-3')
  raises(function() train.new(tiny(), { optimizer_offload = "nvme" }) end, 'optimizer_offload must be "none" or "cpu"')
  raises(function() train.new(tiny(), { schedule = "cosine" }) end, 'schedule "cosine" needs max_steps > 0')
  raises(function() train.new(tiny(), { learning_rate = 1e-3, lerning_rate = 1 }) end, "lerning_rate")
end)

test("shard, 8-bit AdamW and offload in one process: the plain trainer's numbers, memory reported", function()
  -- One process is one shard: every stage must give the unsharded weights; 8-bit AdamW and offload
  -- train too, and trainer:memory() reports the state each holds.
  local function run(opts)
    local m = tiny(3)
    local t = train.new(m, opts)
    for s = 1, 3 do t:step(batch(20 + s)) end
    return m:parameters(), t:memory()
  end
  local base = { learning_rate = 1e-2, schedule = "constant" }
  local plain, pm = run(base)
  for _, stage in ipairs { "optimizer", "gradients", "full", "SHARD_GRAD_OP" } do
    local w = run { learning_rate = 1e-2, schedule = "constant", shard = stage }
    for name, t in pairs(plain) do ok(torch.allclose(t, w[name], { rtol = 1e-5, atol = 1e-6 }), stage .. " " .. name) end
  end
  local off = run { learning_rate = 1e-2, schedule = "constant", optimizer_offload = "cpu" }
  for name, t in pairs(plain) do ok(torch.equal(t, off[name]), "offload " .. name) end
  eq(pm.optimizer, pm.full_optimizer)
  ok(pm.optimizer > 0 and pm.weights > 0, "memory reports the plain trainer's state")
  local q, qm = run { learning_rate = 1e-2, schedule = "constant", optimizer = "adamw8bit", shard = "optimizer" }
  -- 8-bit layers (2 bytes an element + scales); the 3232-element embeddings group is under bitsandbytes'
  -- 4096-element minimum and stays float32, so this tiny model lands at ~0.4 of AdamW's 8 bytes.
  ok(qm.optimizer < 0.45 * pm.optimizer, "8-bit states are well under AdamW's: " .. qm.optimizer .. " vs " .. pm.optimizer)
  local moved = 0
  for name, t in pairs(plain) do moved = moved + (torch.equal(t, q[name]) and 0 or 1) end
  ok(moved > 0, "8-bit AdamW updates the weights")
end)

-- ---------------------------------------------------------------------------------------------
-- Preference losses, reward models and rejection sampling on the byte-level fixture tokenizer
-- (hello=11, " world"=16, "!"=18), plain prompt/response template, with a model of its vocabulary.
local TOK = tokenizer.load("tests/fixtures/tokenizers/bytelevel")
local TMP = os.tmpname()
os.remove(TMP)
os.execute("mkdir -p '" .. TMP .. "'")

local function write(path, lines)
  local f = assert(io.open(path, "w"))
  for _, l in ipairs(lines) do f:write(l, "\n") end
  f:close()
  return path
end

local PAIRS = write(TMP .. "/pairs.jsonl", {
  '{"prompt": "hello", "chosen": " world", "rejected": "!"}',
  '{"prompt": "hello!", "chosen": " world", "rejected": "!!"}',
  '{"prompt": "!", "chosen": " world!", "rejected": "hello"}',
  '{"prompt": " world", "chosen": "hello", "rejected": " world world"}',
})

local function small(seed) return T.model { vocab_size = 32, seed = seed } end  -- the fixture tokenizer's vocabulary

test("reward model: a hook with pair statistics, scores, HF layout round trip", function()
  local pairs = data.preferences(PAIRS, { tokenizer = TOK, max_length = 32, chat = false })
  eq(#pairs, 4)
  local model = small(3)
  local rm = train.reward_model(model, { seed = 2 })
  ok(tostring(rm):find("RewardModel(LlamaForSequenceClassification", 1, true) == nil)  -- a causal LM body
  ok(tostring(rm):find("RewardModel(", 1, true) == 1)
  local tr = train.new(model, { learning_rate = 1e-2, schedule = "constant", batch_size = 4, hooks = { rm } })
  local before = rm:score(pairs)
  eq(before:shape(), { 4, 2 })
  local e0 = tr:evaluate(pairs, { batch_size = 2 })
  local rows = before:tolist()
  local acc = 0
  for _, r in ipairs(rows) do if r[1] > r[2] then acc = acc + 0.25 end end
  eq(e0.preference_accuracy, acc)
  local first
  for step, b in pairs:batches { size = 4, max_steps = 30 } do
    local s = tr:step(b)
    first = first or s
    ok(s.preference_accuracy ~= nil and s.reward_margin ~= nil)
  end
  local e1 = tr:evaluate(pairs, { batch_size = 2 })
  ok(e1.loss < e0.loss, ("train pairs' loss %.4f -> %.4f"):format(e0.loss, e1.loss))
  eq(e1.preference_accuracy, 1)
  -- Saved as HF sequence classification; the body loads with models.load, the head with load=.
  rm:save(TMP .. "/rm", { tokenizer = TOK, pad_token_id = 31 })
  local cfg = io.open(TMP .. "/rm/config.json"):read("*a")
  ok(cfg:find('"LlamaForSequenceClassification"', 1, true) and cfg:find('"pad_token_id": 31', 1, true), cfg)
  ok(io.open(TMP .. "/rm/tokenizer.json") ~= nil)
  local back = train.reward_model(models.load(TMP .. "/rm"), { load = TMP .. "/rm" })
  ok(torch.equal(back:score(pairs), rm:score(pairs)))
  eq(back:model():config().vocab_size, 32)
  local causal = small()
  causal:save(TMP .. "/causal")
  raises(function() train.reward_model(causal, { load = TMP .. "/causal" }) end, "tensor score.weight is missing")
  raises(function() train.reward_model(model, { sed = 1 }) end, "sed")
end)

test("rejection sampling: best of n per prompt, as SFT records", function()
  local policy, rm = small(5), train.reward_model(small(6), { seed = 1 })
  local prompts = write(TMP .. "/prompts.jsonl", {
    '{"prompt": "hello"}',
    '{"prompt": " world", "response": "ignored"}',
    '',
    '{"prompt": "hello!", "chosen": "x", "rejected": "y"}',
  })
  local opts = { prompts = prompts, out = TMP .. "/best.jsonl", tokenizer = TOK, n = 3, max_new_tokens = 3,
                 temperature = 1, seed = 4, max_length = 32, chat = false }
  local s = train.rejection_sample(policy, rm, opts)
  eq(s.prompts, 3)
  eq(s.candidates, 9)
  ok(s.mean_best >= s.mean_reward and s.mean_new_tokens <= 3)
  local n = 0
  for line in io.lines(TMP .. "/best.jsonl") do
    n = n + 1
    ok(line:find('"candidate_rewards":%[') and line:find('"reward":') and line:find('"response":'), line)
    if n == 2 then ok(line:find('"prompt":" world"', 1, true) and not line:find("ignored", 1, true), line) end
  end
  eq(n, 3)
  -- The same seed gives the same file.
  local first = io.open(TMP .. "/best.jsonl"):read("*a")
  train.rejection_sample(policy, rm, opts)
  eq(io.open(TMP .. "/best.jsonl"):read("*a"), first)
  local chats = write(TMP .. "/chats.jsonl", { '{"messages": [{"role": "user", "content": "hello"}]}' })
  raises(function() train.rejection_sample(policy, rm, { prompts = chats, out = TMP .. "/x.jsonl", tokenizer = TOK,
                                                         chat = false }) end, "chats.jsonl:1: ")
  local bad = write(TMP .. "/bad.jsonl", { '{"text": "hello"}' })
  raises(function() train.rejection_sample(policy, rm, { prompts = bad, out = TMP .. "/x.jsonl", tokenizer = TOK, chat = false }) end,
         "bad.jsonl:1: expected a JSON object with \"prompt\" (a string or a message list) or \"messages\"")
  raises(function() train.rejection_sample(policy, rm, { prompts = prompts, out = TMP .. "/x.jsonl" }) end,
         "option 'tokenizer' expects a Tokenizer")
  raises(function() train.rejection_sample(policy, rm, { prompts = prompts, out = TMP .. "/x.jsonl", tokenizer = TOK, n = 0, chat = false }) end,
         "n must be at least 1")
  local other = train.reward_model(models.init { arch = "llama", vocab_size = 40, hidden_size = 32, intermediate_size = 40,
                                                  num_hidden_layers = 1, num_attention_heads = 4 })
  raises(function() train.rejection_sample(policy, other, { prompts = prompts, out = TMP .. "/x.jsonl", tokenizer = TOK, chat = false }) end,
         "the reward model's vocabulary (40) differs from the policy's (32)")
  ok(io.open(TMP .. "/x.jsonl") == nil, "nothing written by the failed runs")
end)

test("preference losses: ORPO statistics and option errors", function()
  local pairs = data.preferences(PAIRS, { tokenizer = TOK, max_length = 32, chat = false })
  local model = small(7)
  local orpo = train.preference(model, { loss = "orpo", beta = 0.2 })
  local e = train.new(model, { learning_rate = 1e-3, schedule = "constant", hooks = { orpo } }):evaluate(pairs)
  for _, k in ipairs { "nll_loss", "log_odds_ratio", "log_odds_chosen", "logps_accuracy", "preference_accuracy" } do
    ok(type(e[k]) == "number", k)
  end
  ok(math.abs(e.loss - (e.nll_loss - 0.2 * e.log_odds_ratio)) < 1e-6, "ORPO loss = nll - beta * log sigmoid(log odds)")
  raises(function() train.preference(model, { loss = "sigmoid" }) end, "needs a reference")
  raises(function() train.preference(model, { loss = "sigmoid", reference = "adapters_off" }) end,
         "reference = \"adapters_off\" needs a model with adapters")
  raises(function() train.preference(model, { loss = "dpo", reference = small() }) end, "loss must be")
end)

h.run()
