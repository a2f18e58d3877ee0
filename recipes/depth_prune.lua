-- Depth pruning (ShortGPT, Minitron depth): drop the layers a calibration score ranks lowest, optionally
-- recover briefly; perplexity before and after. The recovery is a short LM-loss run.
-- runner depth_prune base_model=/models/Llama-3.1-8B data=corpus.jsonl [layers=8 depth_metric=layer_removal recovery_steps=200 ...]
-- Scores (docs/pruning.md): block influence, mean over tokens of 1 - cos(layer input, layer output),
-- or the calibration loss increase when the layer is skipped. Writes output_dir/model (Hugging Face
-- format, tokenizer included) and output_dir/summary.json.
local keys = require("run_keys")  -- scripts/lua/run_keys.lua: shared keys, with docs (runner help lists all)
local cfg = config(keys.compute {  -- + dtype, device, shard, optimizer, seed, ...
  base_model = "models/Llama-3.2-1B",  -- model to prune: a local Hugging Face directory or a hub name (org/name)
  data = "data/example_text.jsonl",    -- plain text JSONL, {"text": ...} per line; default: the example text the build writes
  output_dir = "out/depth_prune",      -- model/, summary.json and metrics.jsonl go here
  gguf = "",                           -- also write output_dir/model.gguf: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
  layers = 0.25,                       -- layers to remove: a count (1, 2, ...) or a fraction in (0, 1)
  depth_metric = "block_influence",    -- how layers are scored: "block_influence" or "layer_removal"
  calibration_rows = 128,              -- rows the layer scores are computed on
  max_length = 2048,                   -- tokens per row; the text is packed into rows of at most this
  batch_size = 4,                      -- rows per forward (scoring, evaluation) and per recovery micro-batch
  eval_fraction = 0.05,                -- share of the rows held out for perplexity
  eval_batches = 0,                    -- held-out batches each perplexity reads; 0 = all of them
  recovery_steps = 0,                  -- LM-loss training steps after pruning; 0 = none
  learning_rate = 2e-5,                -- recovery's peak learning rate; cosine decay to 0 after warm-up
  warmup_steps = 10,                   -- steps of linear warm-up from 0 to learning_rate
  gradient_accumulation_steps = 4,     -- micro-batches per optimizer step: batch_size x this rows a step on each rank
})
local gguf_out = require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua

local P = require("pruning")
local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device })
print(tostring(model))
local train_set, eval_set, calibration = P.text_sets(cfg, tok)  -- packed text rows; the first calibration_rows

local function perplexity()
  return P.perplexity(model, eval_set, { batch_size = cfg.batch_size, max_batches = cfg.eval_batches })
end

local before = { params = model:num_params().total, perplexity = perplexity() }
local cut = prune.depth(model, calibration, { layers = cfg.layers, metric = cfg.depth_metric })
local pruned = { params = model:num_params().total, perplexity = perplexity() }
print(("removed layers %s (%s scores %s)"):format(table.concat(cut.removed, ", "), cfg.depth_metric,
                                                 table.concat(cut.scores:tolist(), ", ")))
print(("perplexity %.3f -> %.3f after pruning; parameters %d -> %d"):format(before.perplexity, pruned.perplexity,
                                                                         before.params, pruned.params))

local recovered
if cfg.recovery_steps > 0 then
  -- The config's train.new keys (learning_rate, warmup_steps, batch_size, ...: scripts/lua/run.lua).
  local trainer = require("run").trainer(model, cfg, { schedule = "cosine", max_steps = cfg.recovery_steps })
  local log = metrics.open { console = true, jsonl = cfg.output_dir .. "/metrics.jsonl",
                             total_steps = cfg.recovery_steps, config = cfg, wandb = cfg.wandb_project }
  for step, batch in train_set:batches { size = cfg.batch_size * cfg.gradient_accumulation_steps,
                                         max_steps = cfg.recovery_steps } do
    log:write(step, trainer:step(batch))
    if log:stopped() then break end  -- stopped from the W&B UI: end here and save what there is
  end
  recovered = trainer:evaluate(eval_set, { batch_size = cfg.batch_size, max_batches = cfg.eval_batches }).perplexity
  log:write(cfg.recovery_steps, { eval_perplexity = recovered })
  log:close()
  print(("perplexity %.3f after %d recovery steps"):format(recovered, cfg.recovery_steps))
end

model:save(cfg.output_dir .. "/model", { tokenizer = tok })
metrics.write_json(cfg.output_dir .. "/summary.json", {
  metric = cfg.depth_metric, layers_before = cut.after.layers + #cut.removed, layers_after = cut.after.layers,
  removed = cut.removed, scores = cut.scores:tolist(), params_before = before.params, params_after = pruned.params,
  perplexity_before = before.perplexity, perplexity_pruned = pruned.perplexity, recovery_steps = cfg.recovery_steps,
  perplexity_recovered = recovered,  -- absent without recovery
})
print("model (Hugging Face format): " .. cfg.output_dir .. "/model; summary: " .. cfg.output_dir .. "/summary.json")
gguf_out.write(cfg.gguf, cfg.output_dir, cfg.output_dir .. "/model")
