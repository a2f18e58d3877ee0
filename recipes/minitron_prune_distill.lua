-- Minitron: prune width (hidden, MLP, heads) and optionally depth by activation importance, then distil
-- from the unpruned model; perplexity per stage.
-- runner minitron_prune_distill base_model=/models/Llama-3.1-8B data=corpus.jsonl shape.hidden=3072 shape.intermediate=9216
-- Importance (docs/pruning.md): mean |activation| over each row's tokens, L2 over rows, on the norm
-- outputs (hidden), the o_proj input per head and the down_proj input (MLP); depth by block
-- influence or layer-removal loss. Distillation: forward KL at temperature 1 with alpha = 1 (logits
-- only, as Minitron). Writes output_dir/model (Hugging Face format) and output_dir/summary.json.
local keys = require("run_keys")  -- scripts/lua/run_keys.lua: shared keys, with docs (runner help lists all)
local cfg = config(keys.compute {  -- + dtype, device, shard, optimizer, seed, ...
  base_model = "models/Llama-3.1-8B",  -- model to prune, and the teacher: a local directory or a hub name (org/name)
  data = "data/example_text.jsonl",    -- plain text JSONL, {"text": ...} per line; default: the example text the build writes
  output_dir = "out/minitron",         -- model/, summary.json and metrics.jsonl go here
  gguf = "",                           -- also write output_dir/model.gguf: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
  shape = {                            -- kept counts after pruning; 0 leaves that kind alone
    hidden = 0,                        -- hidden size to keep (Llama-3.1-Minitron 4B width: 3072)
    intermediate = 0,                  -- MLP channels to keep (Minitron 4B width: 9216)
    heads = 0,                         -- attention heads to keep in each layer
    kv_heads = 0,                      -- key/value heads to keep in each layer
    layers = 0,                        -- layers to keep (Minitron 4B depth: 16)
  },
  sparsity = {                         -- or shares to remove (what sweep_pruning varies); not with shape
    hidden = 0,                        -- share of the hidden size to remove (0.25 keeps 3/4)
    intermediate = 0,                  -- share of the MLP channels to remove
    heads = 0,                         -- share of the attention heads to remove
    layers = 0,                        -- share of the layers to remove
  },
  depth_metric = "block_influence",    -- how layers are scored for depth pruning: "block_influence" or "layer_removal"
  calibration_rows = 1024,             -- rows the activation importance is measured on
  max_length = 2048,                   -- tokens per row; the text is packed into rows of at most this
  batch_size = 4,                      -- rows per forward (importance, evaluation) and per distillation micro-batch
  eval_fraction = 0.02,                -- share of the rows held out for perplexity
  eval_batches = 0,                    -- held-out batches each perplexity reads; 0 = all of them
  teacher_shard = false,               -- shard the frozen teacher over data-parallel ranks: 1/N each, a layer gathered at a time (docs/distill.md)
  distill = {                          -- distillation from the unpruned model after pruning (docs/distill.md)
    max_steps = 1000,                  -- distillation steps; 0 = prune only
    learning_rate = 1e-4,              -- peak learning rate; cosine decay to min_lr_ratio x it after warm-up
    min_lr_ratio = 0.01,               -- where the cosine ends, as a share of learning_rate
    warmup_steps = 60,                 -- steps of linear warm-up from 0 to learning_rate
    gradient_accumulation_steps = 8,   -- micro-batches per step: batch_size x this rows a step on each rank
    loss = "forward_kl",               -- forward_kl KL(teacher||student), reverse_kl or jsd
    temperature = 1.0,                 -- both models' logits are divided by this
    alpha = 1.0,                       -- (1 - alpha) x LM loss + alpha x KD loss; 1 = logits only
  },
})
local gguf_out = require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua

-- Targets: kept counts or shares to remove (0 leaves that kind alone), checked before any work.
local shape, sparsity = {}, {}
for key, n in pairs(cfg.shape) do if n > 0 then shape[key] = n end end
for key, s in pairs(cfg.sparsity) do if s > 0 then sparsity[key] = s end end
assert(not (next(shape) and next(sparsity)), "give shape (kept counts) or sparsity (shares to remove), not both")
local targets = next(sparsity) and sparsity or { shape = shape }
targets.depth_metric = cfg.depth_metric

local P = require("pruning")
local tok = tokenizer.load(cfg.base_model)
local student = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device })
print(tostring(student))
local train_set, eval_set, calibration = P.text_sets(cfg, tok)  -- packed text rows; the first calibration_rows

local function perplexity(model)
  return P.perplexity(model, eval_set, { batch_size = cfg.batch_size, max_batches = cfg.eval_batches })
end

local ppl, params = { base = perplexity(student) }, { base = student:num_params().total }
local cut = prune.minitron(student, calibration, targets)
ppl.pruned, params.pruned = perplexity(student), student:num_params().total
local function describe(s)
  return ("layers %d, heads %d (kv %d), hidden %d, intermediate %d"):format(s.layers, s.heads, s.kv_heads, s.hidden,
                                                                          s.intermediate)
end
print("pruned: " .. describe(cut.before) .. " -> " .. describe(cut.after))
print(("perplexity %.3f -> %.3f after pruning; parameters %d -> %d"):format(ppl.base, ppl.pruned, params.base,
                                                                         params.pruned))

local d = cfg.distill
if d.max_steps > 0 then
  local teacher = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device })  -- the unpruned model
  local kd = distill.new(teacher, student, config.pick(d, "distill.new", { shard_teacher = cfg.teacher_shard }))
  -- train.new's keys of the config (batch_size, shard, ...) and of distill (learning_rate, max_steps, ...).
  local trainer = require("run").trainer(student, cfg, config.pick(d, "train.new", { schedule = "cosine",
                                                                                     hooks = { kd } }))
  local log = metrics.open { console = true, jsonl = cfg.output_dir .. "/metrics.jsonl", total_steps = d.max_steps,
                             config = cfg, wandb = cfg.wandb_project }
  for step, batch in train_set:batches { size = cfg.batch_size * d.gradient_accumulation_steps,
                                         max_steps = d.max_steps } do
    log:write(step, trainer:step(batch))  -- loss, kd_loss, lm_loss, ...
    if log:stopped() then break end  -- stopped from the W&B UI: end here and save what there is
  end
  ppl.distilled = trainer:evaluate(eval_set, { batch_size = cfg.batch_size, max_batches = cfg.eval_batches }).perplexity
  log:write(d.max_steps, { eval_perplexity = ppl.distilled })
  log:close()
  teacher:release()
  print(("perplexity %.3f after %d distillation steps"):format(ppl.distilled, d.max_steps))
end

student:save(cfg.output_dir .. "/model", { tokenizer = tok })
metrics.write_json(cfg.output_dir .. "/summary.json", {
  before = cut.before, after = cut.after, params_before = params.base, params_after = params.pruned,
  perplexity_before = ppl.base, perplexity_pruned = ppl.pruned, distill_steps = d.max_steps,
  perplexity_distilled = ppl.distilled,  -- absent without distillation
  parameters_kept = params.pruned / params.base, perplexity_after = ppl.distilled or ppl.pruned,  -- the final model's
})
print("model (Hugging Face format): " .. cfg.output_dir .. "/model; summary: " .. cfg.output_dir .. "/summary.json")
gguf_out.write(cfg.gguf, cfg.output_dir, cfg.output_dir .. "/model")
