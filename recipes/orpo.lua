-- ORPO (Hong et al. 2024): supervised fine-tuning and preference alignment in one stage, with no
-- reference model: the chosen response's NLL plus beta times -log sigmoid of the log odds ratio of
-- chosen over rejected (docs/alignment.md). LoRA by default; use_lora=false trains every weight.
-- runner orpo base_model=/models/Llama-3.1-8B data=data/prefs.jsonl [beta=0.1 lr=8e-6 ...]
local cfg = config {
  base_model = "models/Llama-3.1-8B",     -- ORPO starts from a base model: no SFT stage needed
  data = "data/preferences.jsonl",        -- {prompt, chosen, rejected} or chat-style pairs
  eval_data = "",                         -- held-out pairs; "" = eval_fraction of data
  output_dir = "out/orpo",
  gguf = "",  -- also write output_dir/model.gguf for llama.cpp/Ollama: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
  dtype = "bf16", device = "auto", quantize = "",  -- quantize=nf4: QLoRA
  use_lora = true,
  lora = { r = 16, alpha = 32, dropout = 0.05, targets = "all-linear" },
  beta = 0.1,                             -- the paper's lambda: weight of the odds-ratio term
  lr = 8e-6, warmup = 10, steps = 500, batch_size = 2, grad_accum = 8, max_length = 1024,
  checkpoint_layers = true,
  shard = "none",                         -- ZeRO over data-parallel ranks: none | optimizer | gradients | full
  optimizer = "adamw",                    -- adamw | adamw8bit (blockwise 8-bit moments) | sgd
  optimizer_offload = "none",             -- none | cpu (fp32 masters and optimizer states in host memory)
  eval_fraction = 0.05, eval_every = 50, save_every = 100, resume = false,
  overwrite = false,  -- true: a fresh run moves an earlier run in output_dir to output_dir/previous-<time>/
  seed = 0, deterministic = false,  -- true: LibTorch's deterministic kernels (docs/reproducibility.md)
  wandb_project = "",
}
local gguf_out = require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua

local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device, quantize = cfg.quantize })
if cfg.use_lora then
  lora.apply(model, { r = cfg.lora.r, alpha = cfg.lora.alpha, dropout = cfg.lora.dropout, targets = cfg.lora.targets,
                      seed = cfg.seed })
end
print(tostring(model))

local pref = require("preference")  -- scripts/lua/preference.lua
local train_set, eval_set = pref.sets(cfg, tok)
local orpo = train.preference(model, { loss = "orpo", beta = cfg.beta })
local trainer = train.new(model, { lr = cfg.lr, warmup = cfg.warmup, schedule = "linear", steps = cfg.steps,
                                   micro_batch_size = 2 * cfg.batch_size, checkpoint_layers = cfg.checkpoint_layers,
                                   output_dir = cfg.output_dir, save_every = cfg.save_every, shard = cfg.shard,
                                   optimizer = cfg.optimizer, optimizer_offload = cfg.optimizer_offload,
                                   hooks = { orpo } })
local start = cfg.resume and trainer:resume() or 0
local log = metrics.open { console = true, jsonl = cfg.output_dir .. "/metrics.jsonl", total_steps = cfg.steps,
                           config = cfg, resume = start, wandb = cfg.wandb_project }

local function evaluate(step)
  log:write(step, pref.eval_fields(trainer:evaluate(eval_set, { batch_size = cfg.batch_size })))
end
if start == 0 then evaluate(0) end
for step, batch in train_set:batches { size = cfg.batch_size * cfg.grad_accum, steps = cfg.steps, start = start } do
  log:write(step, trainer:step(batch))
  if step % cfg.eval_every == 0 or step == cfg.steps then evaluate(step) end
  if log:stopped() then break end
end

trainer:save()
if cfg.use_lora then lora.save(model, cfg.output_dir .. "/adapter", { base_model = cfg.base_model })
else model:save(cfg.output_dir .. "/model", { tokenizer = tok }) end
log:close()
print("saved: " .. cfg.output_dir .. (cfg.use_lora and "/adapter (PEFT format)" or "/model (Hugging Face format)"))
if cfg.use_lora then gguf_out.write(cfg.gguf, cfg.output_dir, cfg.base_model, cfg.output_dir .. "/adapter")
else gguf_out.write(cfg.gguf, cfg.output_dir, cfg.output_dir .. "/model") end
