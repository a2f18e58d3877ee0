-- bench/distill_recovery.lua: after pruning, how much perplexity does recovery win back with the LM
-- loss alone vs distillation from the unpruned teacher, for the same steps on the same rows? Every
-- variant starts from the same pruned model (written by llama31_sheared with prune_fraction=1) and
-- is scored on the same held-out rows.
-- With eval_data the held-out rows come from another file: what the cut model got back of the
-- original's general ability, not how well it learnt the recovery text (tests/real_model/test_smollm2_recovery.sh).
-- Run: build/runner bench/distill_recovery.lua pruned=DIR teacher=DIR data=FILE.jsonl [recovery_rows=64 steps=40]
-- Writes the results as JSON to `out` (default: $TMPDIR/distill_recovery.json).
local cfg = config {
  pruned = "", teacher = "", data = "",
  eval_data = "",          -- held-out rows from this file instead of from data
  out = "",                -- the results JSON; "" = $TMPDIR/distill_recovery.json
  recovery_rows = 64,      -- rows the recovery trains on (few: the usual case after pruning)
  eval_rows = 200, steps = 40, batch_size = 8, lr = 1e-3, max_length = 128, seed = 0,
  variants = { "lm", "kd_0.5", "kd_1.0" },
}
local tok = tokenizer.load(cfg.teacher)
local all = data.jsonl(cfg.data, { tokenizer = tok, format = "text", max_length = cfg.max_length, pack = true,
                                   seed = cfg.seed })
local n = #all
local eval_set, rest
if cfg.eval_data ~= "" then
  local other = data.jsonl(cfg.eval_data, { tokenizer = tok, format = "text", max_length = cfg.max_length, pack = true,
                                            seed = cfg.seed })
  eval_set, rest = other:split(math.min(1, cfg.eval_rows / #other)), all
else
  eval_set, rest = all:split(cfg.eval_rows / n)
end
local recovery = rest:split(math.min(1, cfg.recovery_rows / #rest))
print(("rows: %d in all, %d held out, %d for recovery"):format(n, #eval_set, #recovery))
local teacher = models.load(cfg.teacher, { dtype = "float32" })
local function ppl(model) return train.new(model, { schedule = "constant" }):evaluate(eval_set).perplexity end
local teacher_ppl = ppl(teacher)
print(("teacher perplexity %.4f"):format(teacher_ppl))
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
  results[#results + 1] = { variant = v, before = start, after = after, seconds = secs, teacher = teacher_ppl }
  print(("%-7s perplexity %.4f -> %.4f (%.1f s)"):format(v, start, after, secs))
end
metrics.write_json(cfg.out ~= "" and cfg.out or (os.getenv("TMPDIR") or "/tmp") .. "/distill_recovery.json", results)
