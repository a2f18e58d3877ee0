-- Sheared-LLaMA for Llama 3.1: learn which layers, heads and channels to drop, prune to that shape, then
-- recover by distilling from the unpruned model. Writes a smaller Hugging Face model and summary.json.
-- runner llama31_sheared base_model=/models/Llama-3.1-8B-Instruct data=corpus.jsonl [max_steps=200 ...]
-- Masks are hard-concrete gates trained under target-sparsity constraints (Lagrange multipliers). The
-- first `prune_fraction` of the steps learn masks (with the weights), the rest continue training the
-- pruned model with distillation from the unpruned teacher (docs/pruning.md).
-- The 8B seed job fits 2 x A100 80GB with shard=full (ZeRO-3, docs/zero.md; `runner plan`: pruning 78.5 GiB per GPU,
-- 133 replicated; recovery 59.5 with the teacher whole on each rank): build/runner --nproc 2 llama31_sheared
-- base_model=... data=... shard=full (or torchrun). teacher_shard or teacher_cache shrink recovery further.
local keys = require("run_keys")  -- scripts/lua/run_keys.lua: shared keys, with docs (runner help lists all)
local cfg = config(keys.compute {  -- + dtype, device, shard, optimizer, seed, ...
  base_model = "meta-llama/Llama-3.1-8B-Instruct",  -- model to prune, and the teacher: a hub name (org/name) or a local directory
  data = "data/example_text.jsonl",     -- JSONL of text, chat or instruction records (docs/data.md); default: the example text
  chat_template = "",                   -- how chat records render: "" = the model's own; a .jinja file or a name (docs/chat_formats.md)
  format = "",                         -- "" = detect from the records; "text" for plain pretraining text
  domains = {},                        -- optional "name:path.jsonl" list: dynamic batch loading across domains
  domain_reference_loss = {},          -- "name:loss" list: the per-domain loss to aim for (default: the base model's)
  domain_update_steps = 50,            -- steps between proportion updates (Sheared-LLaMA: 50 while pruning)
  output_dir = "prune_log/llama31_3b_sheared",  -- model/, summary.json and metrics.jsonl go here
  gguf = "",                           -- also write output_dir/model.gguf: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
  target_layer_sparsity = 0.2,         -- share of the layers to remove
  target_head_sparsity = 0.3,          -- share of the attention heads to remove
  target_hidden_sparsity = 0.1,        -- share of the hidden size to remove
  target_intermediate_sparsity = 0.4,  -- share of the MLP channels to remove
  round_to = 128,                      -- hidden/intermediate sizes to multiples of this (docs/pruning.md)
  num_train_epochs = 2,                -- passes over the training rows: the step count unless max_steps is lower
  max_steps = 0,                       -- stop early: at most this many optimizer steps in all (0 = the epochs)
  prune_fraction = 0.5,                -- share of the steps spent learning masks; the rest recover
  learning_rate = 1e-4,                -- peak learning rate of each phase; cosine decay to 0.1 x it
  mask_lr = 1.0,                       -- learning rate of the masks (Sheared-LLaMA's default)
  lambda_lr = 1.0,                     -- learning rate of the Lagrange multipliers (Sheared-LLaMA's default)
  lagrangian_warmup = 0.2,             -- share of the pruning steps over which the target sparsity ramps up
  warmup_ratio = 0.1,                  -- learning-rate warm-up, as a share of each phase's steps
  batch_size = 4,                      -- rows per forward/backward on each rank (the micro-batch)
  gradient_accumulation_steps = 8,     -- micro-batches per optimizer step: batch_size x this rows a step on each rank
  max_length = 128,                    -- tokens per row; records are packed into rows of at most this
  distill = true,                      -- distil from the unpruned model after pruning (false: LM loss only)
  distill_loss = "forward_kl",         -- forward_kl KL(teacher||student), reverse_kl or jsd
  distill_temperature = 1.0,           -- both models' logits are divided by this
  distill_alpha = 0.5,                 -- (1 - alpha) x LM loss + alpha x KD loss
  teacher_dtype = "",                  -- "" = dtype; e.g. "bf16" for a lower-precision teacher
  teacher_device = "",                 -- "" = device
  teacher_shard = false,               -- shard the frozen teacher over data-parallel ranks: 1/N each, a layer gathered at a time (docs/distill.md)
  teacher_cache = "",                  -- a directory: write the teacher's top-k logits there once, then recover from them with no teacher on the GPU
  teacher_cache_k = 64,                -- teacher_cache: top logits kept per token (the vocabulary size: the exact KL)
  teacher_cache_dtype = "bfloat16",    -- teacher_cache: float32, bfloat16 or float16 for the stored logits
  eval_fraction = 0.02,                -- share of the rows held out for perplexity
  eval_steps = 100,                    -- evaluate every N steps of each phase and after its last
  eval_batches = 0,                    -- held-out batches each evaluation reads; 0 = all of them
  wandb_project = "llama31_sheared",   -- W&B project to log to; "" = none (docs/wandb.md)
  check = false,                       -- assert the result's shape and that it reloads and generates (tests)
})
local gguf_out = require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua

local t_start = metrics.clock()
local P = require("pruning")  -- scripts/lua/pruning.lua: data, step counts and summary.json
local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device })
print(tostring(model))
local domains, train_set, eval_set = P.sheared_data(cfg, tok)  -- domains: nil without cfg.domains

-- Steps: num_train_epochs over the training rows; the first prune_fraction of them learn masks.
local steps = P.sheared_steps(cfg, domains and domains:rows() or #train_set)

-- The pruner first: a target that cannot be met fails here, before any work.
local pruner = prune.sheared(model, config.pick(cfg, "prune.sheared", {  -- + round_to, mask_lr, lambda_lr, seed
  layers = cfg.target_layer_sparsity, heads = cfg.target_head_sparsity, hidden = cfg.target_hidden_sparsity,
  intermediate = cfg.target_intermediate_sparsity, warmup_steps = math.floor(cfg.lagrangian_warmup * steps.pruning),
}))
local target = pruner:target()
print(string.format("target: %d layers, %d heads (%d KV), hidden %d, intermediate %d; %d pruning + %d recovery steps",
                    target.layers, target.heads, target.kv_heads, target.hidden, target.intermediate, steps.pruning,
                    steps.recovery))
local log = metrics.open { console = true, jsonl = cfg.output_dir .. "/metrics.jsonl", total_steps = steps.total,
                           config = cfg, wandb = cfg.wandb_project }
local eval_opts = { batch_size = cfg.batch_size, max_batches = cfg.eval_batches }

-- Before: the base model's shape, size and perplexity. stats gathers what summary.json records.
local stats = { shape_before = prune.shape(model), parameters_before = model:num_params().total, steps = steps,
                perplexity = { before = P.perplexity(model, eval_set, eval_opts) },
                tokens = { pruning = 0, recovery = 0 } }
log:write(0, { eval_perplexity = stats.perplexity.before })

-- Batches: one dataset, or dynamic batch loading across domains (Sheared-LLaMA's DoReMi-style update).
local dyn = domains and domains:start(model, cfg.domain_reference_loss, cfg.seed, eval_opts)
local function update_domains(trainer, step, log_step)  -- during pruning and recovery, as Sheared-LLaMA does
  if dyn and step % cfg.domain_update_steps == 0 then domains:update(trainer, log_step or step, log, eval_opts) end
end

-- Phase 1: masks and weights together. Each phase's trainer has its own warm-up and cosine schedule.
local trainer = P.sheared_trainer(model, cfg, steps.pruning, { pruner }, "pruning")
local t_prune = metrics.clock()
for step, batch in P.batches(dyn or train_set, steps.rows_per_step, steps.pruning) do
  local s = trainer:step(batch)
  stats.tokens.pruning = stats.tokens.pruning + s.tokens
  log:write(step, s)
  update_domains(trainer, step)
  if step % cfg.eval_steps == 0 or step == steps.pruning then
    log:write(step, { eval_masked_perplexity = trainer:evaluate(eval_set, eval_opts).perplexity })
  end
  if log:stopped() then break end  -- stopped from the W&B UI: cut to the target now, skip recovery
end
t_prune = metrics.clock() - t_prune

-- Cut the model to the target shape (soft mask values folded into the kept weights).
stats.shape_after = pruner:finalize()
trainer = nil
collectgarbage()
stats.perplexity.after_pruning = P.perplexity(model, eval_set, eval_opts)
stats.perplexity.after_recovery = stats.perplexity.after_pruning
log:write(steps.pruning, { eval_perplexity = stats.perplexity.after_pruning })
local cut = stats.shape_after
print(string.format("pruned to %d layers, %d heads, hidden %d, intermediate %d: perplexity %.3f -> %.3f", cut.layers,
                    cut.heads, cut.hidden, cut.intermediate, stats.perplexity.before, stats.perplexity.after_pruning))

-- Phase 2: continued training of the pruned model, distilled from the unpruned one (live, sharded or
-- from its cached top-k logits: scripts/lua/pruning.lua's recovery_hooks).
local hooks, teacher = {}, nil
if cfg.distill and steps.recovery > 0 then hooks, teacher = P.recovery_hooks(model, cfg, train_set, dyn) end
local t_recover = metrics.clock()
if steps.recovery > 0 and not log:stopped() then
  local recover = P.sheared_trainer(model, cfg, steps.recovery, hooks, "recovery")
  for step, batch in P.batches(dyn or train_set, steps.rows_per_step, steps.recovery) do
    local s = recover:step(batch)
    stats.tokens.recovery = stats.tokens.recovery + s.tokens
    log:write(steps.pruning + step, s)
    update_domains(recover, step, steps.pruning + step)
    if step % cfg.eval_steps == 0 or step == steps.recovery then
      local e = recover:evaluate(eval_set, eval_opts)
      log:write(steps.pruning + step, { eval_loss = e.loss, eval_perplexity = e.perplexity, eval_kd_loss = e.kd_loss })
      stats.perplexity.after_recovery = e.perplexity
    end
    if log:stopped() then break end
  end
end
t_recover = metrics.clock() - t_recover
if teacher then teacher:release() end

model:save(cfg.output_dir .. "/model", { tokenizer = tok })
stats.seconds = { pruning = t_prune, recovery = t_recover, total = metrics.clock() - t_start }
stats.domain_proportions = dyn and dyn:proportions()
P.sheared_summary(cfg, model, log, stats)  -- summary.json, the run's summary, the log closed
gguf_out.write(cfg.gguf, cfg.output_dir, cfg.output_dir .. "/model")
if cfg.check then P.check_saved(cfg.output_dir .. "/model", target, tok) end
