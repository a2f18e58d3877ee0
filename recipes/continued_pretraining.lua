-- Continued pretraining on plain text JSONL ({"text": ...}, loss on every token), packed rows; full weights or LoRA.
-- runner continued_pretraining base_model=/models/Llama-3.2-1B data=corpus.jsonl [use_lora=true steps=2000 ...]
local cfg = config {
  base_model = "models/Llama-3.2-1B",  -- a local Hugging Face model directory
  data = "data/corpus.jsonl",
  output_dir = "out/cpt",
  gguf = "",  -- also write output_dir/model.gguf for llama.cpp/Ollama: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
  dtype = "bf16", device = "auto",
  use_lora = false,
  lora = { r = 64, alpha = 128, dropout = 0.0, targets = { "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj" } },
  lr = 5e-5, warmup = 50, steps = 2000, min_lr_ratio = 0.1, batch_size = 4, grad_accum = 8, max_length = 2048,
  checkpoint_layers = true,
  shard = "none",              -- ZeRO over data-parallel ranks: none | optimizer | gradients | full
  optimizer = "adamw",         -- adamw | adamw8bit (blockwise 8-bit moments) | sgd
  optimizer_offload = "none",  -- none | cpu (fp32 masters and optimizer states in host memory)
  eval_fraction = 0.01, eval_every = 200, save_every = 200, resume = false,
  overwrite = false,  -- true: a fresh run moves an earlier run in output_dir to output_dir/previous-<time>/
  seed = 0, deterministic = false,  -- true: LibTorch's deterministic kernels (docs/reproducibility.md)
  wandb_project = "",
}
local gguf_out = require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua

local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device })
if cfg.use_lora then
  lora.apply(model, { r = cfg.lora.r, alpha = cfg.lora.alpha, dropout = cfg.lora.dropout, targets = cfg.lora.targets,
                      seed = cfg.seed })
end
print(tostring(model))

local all = data.jsonl(cfg.data, { tokenizer = tok, format = "text", max_length = cfg.max_length, pack = true,
                                   seed = cfg.seed })
local train_set, eval_set = all:split(1 - cfg.eval_fraction)

local trainer = train.new(model, { lr = cfg.lr, warmup = cfg.warmup, schedule = "cosine", steps = cfg.steps,
                                   min_lr_ratio = cfg.min_lr_ratio, micro_batch_size = cfg.batch_size,
                                   checkpoint_layers = cfg.checkpoint_layers, output_dir = cfg.output_dir,
                                   save_every = cfg.save_every, shard = cfg.shard, optimizer = cfg.optimizer,
                                   optimizer_offload = cfg.optimizer_offload })
local start = cfg.resume and trainer:resume() or 0
local log = metrics.open { console = true, jsonl = cfg.output_dir .. "/metrics.jsonl", total_steps = cfg.steps,
                           config = cfg, resume = start, wandb = cfg.wandb_project }

for step, batch in train_set:batches { size = cfg.batch_size * cfg.grad_accum, steps = cfg.steps, start = start } do
  log:write(step, trainer:step(batch))
  if step % cfg.eval_every == 0 or step == cfg.steps then
    local e = trainer:evaluate(eval_set, { batch_size = cfg.batch_size })
    log:write(step, { eval_loss = e.loss, eval_perplexity = e.perplexity })
  end
  if log:stopped() then break end  -- stopped from the W&B UI: end here and save what there is
end

if cfg.use_lora then
  lora.save(model, cfg.output_dir .. "/adapter", { base_model = cfg.base_model })
else
  model:save(cfg.output_dir .. "/model", { tokenizer = tok })
end
log:close()
if cfg.use_lora then gguf_out.write(cfg.gguf, cfg.output_dir, cfg.base_model, cfg.output_dir .. "/adapter")
else gguf_out.write(cfg.gguf, cfg.output_dir, cfg.output_dir .. "/model") end
