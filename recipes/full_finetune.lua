-- Full fine-tuning (every weight) of a model on JSONL (chat, prompt/response, Alpaca or Guanaco records); writes a Hugging Face model.
-- runner full_finetune base_model=/models/Qwen2.5-0.5B-Instruct data=data/train.jsonl [lr=1e-5 steps=500 ...]
local cfg = config {
  base_model = "models/Qwen2.5-0.5B-Instruct",  -- a local Hugging Face model directory
  data = "data/train.jsonl",
  output_dir = "out/full",
  gguf = "",  -- also write output_dir/model.gguf for llama.cpp/Ollama: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
  dtype = "bf16", device = "auto",
  master_weights = true,  -- fp32 master copies of bf16 weights for the optimizer
  lr = 1e-5, weight_decay = 0.0, warmup = 20, steps = 500, batch_size = 4, grad_accum = 4, max_length = 2048,
  checkpoint_layers = true,
  shard = "none",              -- ZeRO over data-parallel ranks: none | optimizer | gradients | full
  optimizer = "adamw",         -- adamw | adamw8bit (blockwise 8-bit moments) | sgd
  optimizer_offload = "none",  -- none | cpu (fp32 masters and optimizer states in host memory)
  eval_fraction = 0.02, eval_every = 100, save_every = 100, resume = false,
  overwrite = false,  -- true: a fresh run moves an earlier run in output_dir to output_dir/previous-<time>/
  seed = 0, deterministic = false,  -- true: LibTorch's deterministic kernels (docs/reproducibility.md)
  wandb_project = "",
}
local gguf_out = require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua

local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device })
print(tostring(model))

local all = data.jsonl(cfg.data, { tokenizer = tok, max_length = cfg.max_length, pack = true, seed = cfg.seed })
local train_set, eval_set = all:split(1 - cfg.eval_fraction)

local trainer = train.new(model, { lr = cfg.lr, weight_decay = cfg.weight_decay, warmup = cfg.warmup,
                                   schedule = "cosine", steps = cfg.steps, micro_batch_size = cfg.batch_size,
                                   master_weights = cfg.master_weights, checkpoint_layers = cfg.checkpoint_layers,
                                   output_dir = cfg.output_dir, save_every = cfg.save_every, shard = cfg.shard,
                                   optimizer = cfg.optimizer, optimizer_offload = cfg.optimizer_offload })
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

model:save(cfg.output_dir .. "/model", { tokenizer = tok })
log:close()
print("model (Hugging Face format): " .. cfg.output_dir .. "/model")
gguf_out.write(cfg.gguf, cfg.output_dir, cfg.output_dir .. "/model")
