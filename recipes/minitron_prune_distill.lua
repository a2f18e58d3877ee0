-- Minitron: prune width (hidden, MLP, attention heads) and optionally depth to target sizes by activation importance, then distil from the unpruned teacher's logits; perplexity at each stage.
-- runner minitron_prune_distill base_model=/models/Llama-3.1-8B data=corpus.jsonl shape.hidden=3072 shape.intermediate=9216 [distill.steps=2000 ...]
-- Importance (docs/pruning.md): mean |activation| over each row's tokens, L2 over rows, on the norm
-- outputs (hidden), the o_proj input per head and the down_proj input (MLP); depth by block
-- influence or layer-removal loss. Distillation: forward KL at temperature 1 with alpha = 1 (logits
-- only, as Minitron). Writes output_dir/model (Hugging Face format) and output_dir/summary.json.
local cfg = config {
  base_model = "models/Llama-3.1-8B",  -- a local Hugging Face model directory
  data = "data/corpus.jsonl",          -- plain text, {"text": ...} per line
  output_dir = "out/minitron",
  gguf = "",  -- also write output_dir/model.gguf for llama.cpp/Ollama: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
  dtype = "bf16", device = "auto",
  -- Kept counts after pruning; 0 leaves that kind alone (Llama-3.1-Minitron 4B width: hidden 3072,
  -- intermediate 9216; depth: layers 16).
  shape = { hidden = 0, intermediate = 0, heads = 0, kv_heads = 0, layers = 0 },
  -- Or shares to remove (what sweep_pruning varies): 0.25 keeps 3/4 of that kind; not with shape.
  sparsity = { hidden = 0, intermediate = 0, heads = 0, layers = 0 },
  depth_metric = "block_influence",    -- or "layer_removal"
  calibration_rows = 1024, max_length = 2048, batch_size = 4,
  eval_fraction = 0.02, eval_batches = 0,  -- held-out rows for perplexity; 0 = all of them
  distill = { steps = 1000, lr = 1e-4, min_lr_ratio = 0.01, warmup = 60, grad_accum = 8,
              loss = "forward_kl", temperature = 1.0, alpha = 1.0 },  -- steps = 0: prune only
  checkpoint_layers = true,
  shard = "none",                      -- ZeRO over data-parallel ranks: none | optimizer | gradients | full
  optimizer = "adamw",                 -- adamw | adamw8bit (blockwise 8-bit moments) | sgd
  optimizer_offload = "none",          -- none | cpu (fp32 masters and optimizer states in host memory)
  seed = 0, deterministic = false,  -- true: LibTorch's deterministic kernels (docs/reproducibility.md)
  wandb_project = "",
}
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
local all = data.jsonl(cfg.data, { tokenizer = tok, format = "text", max_length = cfg.max_length, pack = true,
                                   seed = cfg.seed })
local train_set, eval_set = all:split(1 - cfg.eval_fraction)

local calibration, rows = P.calibration(train_set, cfg.calibration_rows, cfg.batch_size)
print(("calibration: %d rows of up to %d tokens; evaluation: %d held-out rows"):format(rows, cfg.max_length, #eval_set))

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
if d.steps > 0 then
  local teacher = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device })  -- the unpruned model
  local kd = distill.new(teacher, student, { loss = d.loss, temperature = d.temperature, alpha = d.alpha })
  local trainer = train.new(student, { lr = d.lr, warmup = d.warmup, schedule = "cosine", steps = d.steps,
                                       min_lr_ratio = d.min_lr_ratio, micro_batch_size = cfg.batch_size,
                                       checkpoint_layers = cfg.checkpoint_layers, shard = cfg.shard,
                                       optimizer = cfg.optimizer, optimizer_offload = cfg.optimizer_offload,
                                       hooks = { kd } })
  local log = metrics.open { console = true, jsonl = cfg.output_dir .. "/metrics.jsonl", total_steps = d.steps,
                             config = cfg, wandb = cfg.wandb_project }
  for step, batch in train_set:batches { size = cfg.batch_size * d.grad_accum, steps = d.steps } do
    log:write(step, trainer:step(batch))  -- loss, kd_loss, lm_loss, ...
    if log:stopped() then break end  -- stopped from the W&B UI: end here and save what there is
  end
  ppl.distilled = trainer:evaluate(eval_set, { batch_size = cfg.batch_size, max_batches = cfg.eval_batches }).perplexity
  log:write(d.steps, { eval_perplexity = ppl.distilled })
  log:close()
  teacher:release()
  print(("perplexity %.3f after %d distillation steps"):format(ppl.distilled, d.steps))
end

student:save(cfg.output_dir .. "/model", { tokenizer = tok })
metrics.write_json(cfg.output_dir .. "/summary.json", {
  before = cut.before, after = cut.after, params_before = params.base, params_after = params.pruned,
  perplexity_before = ppl.base, perplexity_pruned = ppl.pruned, distill_steps = d.steps,
  perplexity_distilled = ppl.distilled,  -- absent without distillation
  parameters_kept = params.pruned / params.base, perplexity_after = ppl.distilled or ppl.pruned,  -- the final model's
})
print("model (Hugging Face format): " .. cfg.output_dir .. "/model; summary: " .. cfg.output_dir .. "/summary.json")
gguf_out.write(cfg.gguf, cfg.output_dir, cfg.output_dir .. "/model")
