-- bench/distill_recovery.lua: after pruning, how much perplexity does recovery win back with the LM
-- loss alone vs distillation from the unpruned teacher, for the same steps on the same rows? Every
-- variant starts from the same pruned model (written by llama31_sheared with prune_fraction=1) and
-- is scored on the same held-out rows.
-- Run: build/runner bench/distill_recovery.lua pruned=DIR teacher=DIR data=FILE.jsonl [recovery_rows=64 steps=40]
local cfg = config {
  pruned = "", teacher = "", data = "",
  recovery_rows = 64,      -- rows the recovery trains on (few: the usual case after pruning)
  eval_rows = 200, steps = 40, batch_size = 8, lr = 1e-3, max_length = 128, seed = 0,
  variants = { "lm", "kd_0.5", "kd_1.0" },
}
local tok = tokenizer.load(cfg.teacher)
local all = data.jsonl(cfg.data, { tokenizer = tok, format = "text", max_length = cfg.max_length, pack = true,
                                   seed = cfg.seed })
local n = #all
local eval_set, rest = all:split(cfg.eval_rows / n)
local recovery = rest:split(cfg.recovery_rows / #rest)
print(("rows: %d in all, %d held out, %d for recovery"):format(n, #eval_set, #recovery))
local teacher = models.load(cfg.teacher, { dtype = "float32" })
local function ppl(model) return train.new(model, { schedule = "constant" }):evaluate(eval_set).perplexity end
print(("teacher perplexity %.4f"):format(ppl(teacher)))
local results = {}
for _, v in ipairs(cfg.variants) do
  torch.manual_seed(cfg.seed)
  local model = models.load(cfg.pruned, { dtype = "float32" })
  local start = ppl(model)
  local hooks = {}
  local alpha = tonumber(v:match("^kd_(.*)$"))
  if alpha then hooks = { distill.new(teacher, model, { alpha = alpha }) } end
  local t = train.new(model, { learning_rate = cfg.lr, warmup_steps = 4, schedule = "cosine", max_steps = cfg.steps, min_lr_ratio = 0.1,
                               hooks = hooks })
  local t0 = metrics.clock()
  for _, batch in recovery:batches { size = cfg.batch_size, max_steps = cfg.steps } do t:step(batch) end
  local secs = metrics.clock() - t0
  local after = ppl(model)
  results[#results + 1] = { variant = v, before = start, after = after, seconds = secs }
  print(("%-7s perplexity %.4f -> %.4f (%.1f s)"):format(v, start, after, secs))
end
metrics.write_json((os.getenv("TMPDIR") or "/tmp") .. "/distill_recovery.json", results)
