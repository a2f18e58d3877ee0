-- tests/lua/test_api_defaults.lua: every literal default bindings/api/*.yaml declares (a number,
-- boolean or string, or a non-empty list of them: betas, targets) is the default the binding's C++ uses. A checked option table's readers
-- (lt_opt_*) hold the C++ default they are given against the declared one and fail, naming both,
-- when they differ (bindings/lua_options.cpp, check_default). Here every option table with such
-- defaults is passed, empty but for its required keys, to one function that takes it, under the
-- probe (the registry's "luatune.defaults_probe"): each default read is recorded, and the call
-- stops once all are, before it does any work. A declared default no reader compared fails too.
-- The declarations are read from types/luatune.d.lua, which `runner api --check` keeps current.
local h = require "harness"
local T = require "tiny"
local test, ok = h.test, h.ok

local home = arg and arg[1] or os.getenv("LUATUNE_HOME") or "."
local types_path = home .. "/types/luatune.d.lua"

local function literal(d) return d == "true" or d == "false" or tonumber(d) or d:match('^"[^"\\]*"$') end
local function list(d)  -- a non-empty list of literals, as bindings/lua_options.cpp reads one
  local inner = d:match("^{(.+)}$")
  if not inner then return false end
  for item in (inner .. ","):gmatch("([^,]*),") do
    if not literal(item:match("^%s*(.-)%s*$")) then return false end
  end
  return true
end

-- { Class = { key = "16", ... } }: the literal defaults of each option table's class.
local function declared_defaults()
  local out, cls = {}, nil
  for line in io.lines(types_path) do
    local c = line:match("^%-%-%-@class ([%w_]+)$")
    if c then cls = c end
    local key, def = line:match("^%-%-%-@field ([%w_]+)%??%s.-%(default: (.-)%)$")
    if cls and key and (literal(def) or list(def)) then
      out[cls] = out[cls] or {}
      out[cls][key] = def
    end
  end
  return out
end

local TMP = os.tmpname()
os.remove(TMP)  -- the name, made a directory
os.execute("mkdir -p '" .. TMP .. "'")
local function write(path, text)  -- returns path
  local f = assert(io.open(path, "w"))
  f:write(text, "\n")
  return f:close() and path
end
local TOK = tokenizer.load("tests/fixtures/tokenizers/bytelevel")
local PR = "tests/fixtures/data/prompt_response.jsonl"
local PAIRS = write(TMP .. "/pairs.jsonl", '{"prompt": "hello", "chosen": " world", "rejected": "!"}')
local PROMPTS = write(TMP .. "/prompts.jsonl", '{"prompt": "hello"}')
local M = T.model { vocab_size = 32 }
local DS = data.jsonl(PR, { tokenizer = TOK, max_length = 16, chat = false })
local PREFS = data.preferences(PAIRS, { tokenizer = TOK, max_length = 16, chat = false })
local RM = train.reward_model(T.model { vocab_size = 32 })
local BATCHES = { T.batch(1, 32, 2, 8) }
local X = torch.zeros { 2, 4 }

-- One call per option table: `o` is the empty table the probe reads; required keys are added.
local function with(o, fields)
  for k, v in pairs(fields) do o[k] = v end
  return o
end
local calls = {
  CreationOpts = function(o) torch.zeros(2, o) end,
  TorchCrossEntropyOpts = function(o) torch.cross_entropy(X, torch.zeros({ 2 }, { dtype = "int64" }), o) end,
  TorchMseLossOpts = function(o) torch.mse_loss(X, X, o) end,
  TorchAllcloseOpts = function(o) torch.allclose(X, X, o) end,
  TrainNewOpts = function(o) train.new(M, o) end,
  TrainPreferenceOpts = function(o) train.preference(M, o) end,
  TrainReferenceLogprobsOpts = function(o) train.reference_logprobs(M, PREFS, with(o, { path = TMP .. "/ref" })) end,
  TrainRewardModelOpts = function(o) train.reward_model(M, o) end,
  TrainRejectionSampleOpts = function(o)
    train.rejection_sample(M, RM, with(o, { prompts = PROMPTS, out = TMP .. "/rs.jsonl", tokenizer = TOK }))
  end,
  TrainerEvaluateOpts = function(o) train.new(M, { max_steps = 1 }):evaluate(DS, o) end,
  RewardModelScoreOpts = function(o) RM:score(PREFS, o) end,
  TokenizerEncodeOpts = function(o) tokenizer.encode(TOK, "hi", o) end,
  TokenizerDecodeOpts = function(o) tokenizer.decode(TOK, { 1, 2 }, o) end,
  ChatOpts = function(o) tokenizer.render_chat(TOK, { { role = "user", content = "hi" } }, o) end,
  ModelsLoadOpts = function(o) models.load(TMP .. "/none", o) end,
  ModelsInitOpts = function(o) models.init(with(o, { arch = "llama", vocab_size = 32, hidden_size = 32,
                                                     intermediate_size = 40, num_hidden_layers = 1,
                                                     num_attention_heads = 4, num_key_value_heads = 2 })) end,
  ModelGenerateOpts = function(o) M:generate(TOK, "hi", o) end,
  ModelGenerateBatchOpts = function(o) M:generate_batch(TOK, { "hi", "there" }, o) end,
  TrainGenerateOpts = function(o)
    train.generate(M, with(o, { prompts = PROMPTS, out = TMP .. "/gen.jsonl", tokenizer = TOK }))
  end,
  ModelPerplexityOpts = function(o) M:perplexity({ { 1, 2, 3 } }, o) end,
  ModelSaveOpts = function(o) M:save(TMP .. "/save", o) end,
  DataOpts = function(o) data.jsonl(PR, with(o, { tokenizer = TOK, chat = false })) end,
  BatchesOpts = function(o) data.batches(DS, with(o, { size = 2 })) end,
  MetricsOpenOpts = function(o) metrics.open(o) end,
  EvalMultipleChoiceOpts = function(o) eval.multiple_choice(M, TOK, { { question = "q", choices = { "a", "b" }, answer = 0 } }, o) end,
  LoraApplyOpts = function(o, m) lora.apply(m, o) end,
  LoraAdaptionPromptOpts = function(o, m) lora.adaption_prompt(m, o) end,
  QuantOpts = function(o) qlora.quantize_tensor(torch.zeros { 64, 64 }, o) end,
  PruneTargetsOpts = function(o) prune.targets(M, o) end,
  PruneShearedOpts = function(o, m) prune.sheared(m, o) end,
  PruneImportanceOpts = function(o) prune.importance(M, BATCHES, o) end,
  PruneMinitronOpts = function(o, m) prune.minitron(m, BATCHES, o) end,
  PruneTaylorOpts = function(o, m) prune.taylor(m, BATCHES, o) end,
  PruneDepthOpts = function(o, m) prune.depth(m, BATCHES, with(o, { layers = 1 })) end,
  PruneUnstructuredOpts = function(o, m) prune.unstructured(m, BATCHES, o) end,
  DistillNewOpts = function(o) distill.new(M, M, o) end,
  DistillDivergenceOpts = function(o) distill.divergence(X, X, o) end,
  DistillWriteCacheOpts = function(o) distill.write_cache(M, DS, with(o, { path = TMP .. "/cache" })) end,
  DistillCachedOpts = function(o) distill.cached(M, with(o, { path = TMP .. "/cache" })) end,
  SweepRunOpts = function(o)
    sweep.run(with(o, { recipe = "full_finetune", output_dir = TMP .. "/sweep", metric = "eval_loss",
                        parameters = { learning_rate = { values = { 1e-4 } } } }))
  end,
  SweepParetoOpts = function(o) sweep.pareto({}, with(o, { x = "a", y = "b" })) end,
  HwPlanOpts = function(o) hw.plan(with(o, { model = "llama3.1-8b" })) end,
  HwProfileOpts = function(o) hw.profile(with(o, { model = "llama3.1-8b" })) end,
  HwProjectOpts = function(o) hw.project(nil, o) end,
  HwMonitorOpts = function(o) hw.monitor(o) end,
  ExportGgufOpts = function(o) export.gguf(M, TMP .. "/m.gguf", o) end,
}

local PROBE = "luatune.defaults_probe"
local declared = declared_defaults()
local classes = {}
for cls in pairs(declared) do classes[#classes + 1] = cls end
table.sort(classes)

test("the declarations have literal defaults to check", function()
  ok(declared.LoraApplyOpts and declared.LoraApplyOpts.r == "16", "expected lora.apply's r (default: 16) in " .. types_path)
  ok(#classes >= 30, "expected 30 or more option tables with defaults, found " .. #classes)
end)

for _, cls in ipairs(classes) do
  test(cls .. ": every declared default is the one the binding uses", function()
    ok(calls[cls], cls .. " declares defaults and this file has no call that reads it; add one to `calls`")
    local registry = debug.getregistry()
    local probe = { class = cls }
    local fresh = T.model { vocab_size = 32 }  -- a model of its own for the calls that change it
    registry[PROBE] = probe
    local done, err = pcall(calls[cls], {}, fresh)
    registry[PROBE] = nil
    err = tostring(err)
    ok(not err:find("make the two agree", 1, true), err)
    local missing = {}
    for key, def in pairs(declared[cls]) do
      if not probe[cls .. "." .. key] then missing[#missing + 1] = key .. " (default: " .. def .. ")" end
    end
    table.sort(missing)
    ok(#missing == 0, cls .. ": no reader compared " .. table.concat(missing, ", ") ..
       (done and "" or "; the call stopped on: " .. err))
  end)
end

h.run()
os.execute("rm -rf '" .. TMP .. "'")
