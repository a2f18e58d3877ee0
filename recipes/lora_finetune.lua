-- LoRA fine-tuning of a chat model on JSONL (chat, prompt/response, Alpaca or Guanaco records); writes a PEFT adapter.
-- runner lora_finetune base_model=/models/Llama-3.1-8B-Instruct data=data/train.jsonl [lora.r=32 max_steps=2000 ...]
-- quantize=nf4 makes it QLoRA (a 4-bit base); recipes/qlora_finetune.lua has QLoRA's defaults and merging.
local cfg = config {
  base_model = "models/Llama-3.1-8B-Instruct",  -- model to fine-tune: a local Hugging Face directory or a hub name (org/name)
  data = "data/train.jsonl",        -- training JSONL: chat, prompt/response, Alpaca or Guanaco records (docs/data.md)
  output_dir = "out/lora",          -- adapter/, checkpoints/, metrics.jsonl and run.json go here
  gguf = "",                        -- also write output_dir/model.gguf: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
  dtype = "bf16",                   -- weight dtype: bf16, fp16, fp32 or "auto" (the checkpoint's torch_dtype)
  device = "auto",                  -- "auto" (cuda when there is one, else cpu), cuda, cuda:N or cpu
  quantize = "",                    -- "nf4" (QLoRA) or "fp4": the base's Linears in 4 bits, quantized on load; "" = none
  lora = {                          -- the LoRA adapters (docs/lora.md)
    r = 16,                         -- rank of each adapter
    alpha = 32,                     -- scaling: an adapter's update is multiplied by alpha / r
    dropout = 0.05,                 -- dropout on each adapter's input; 0 = none
    rslora = false,                 -- true: scale by alpha / sqrt(r) instead (rsLoRA)
    dora = false,                   -- true: DoRA, a learned magnitude per output row on top of the adapter
    targets = { "q_proj", "k_proj", "v_proj", "o_proj",
                "gate_proj", "up_proj", "down_proj" },  -- modules that get adapters: names, or "all-linear"
  },
  learning_rate = 2e-4,             -- peak learning rate; cosine decay to 0 after warm-up
  warmup_steps = 20,                -- steps of linear warm-up from 0 to learning_rate
  max_steps = 1000,                 -- optimizer steps in all
  batch_size = 4,                   -- rows per forward/backward on each rank (the micro-batch)
  gradient_accumulation_steps = 8,  -- micro-batches per optimizer step: batch_size x this rows a step on each rank
  max_length = 2048,                -- tokens per row; records are packed into rows of at most this
  gradient_checkpointing = true,    -- recompute each layer in backward: less activation memory, more compute
  shard = "none",                   -- ZeRO over data-parallel ranks: none | optimizer | gradients | full (docs/zero.md)
  optimizer = "adamw",              -- adamw | adamw8bit (blockwise 8-bit moments) | sgd
  optimizer_offload = "none",       -- none | cpu (fp32 masters and optimizer states in host memory)
  eval_fraction = 0.02,             -- share of the rows held out for eval_loss and eval_perplexity
  eval_steps = 100,                 -- evaluate every N steps and after the last
  save_steps = 200,                 -- resumable checkpoint every N steps (output_dir/checkpoints); 0 = only the final one
  resume = false,                   -- true: continue from the newest checkpoint in output_dir (docs/checkpoints.md)
  overwrite = false,                -- true: a fresh run moves an earlier run in output_dir to output_dir/previous-<time>/
  seed = 0,                         -- seeds the data order, the adapters' init and dropout
  deterministic = false,            -- true: LibTorch's deterministic kernels (docs/reproducibility.md)
  wandb_project = "",               -- W&B project to log to; "" = none (docs/wandb.md)
}
require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua: a bad outtype fails before training
local run = require("run")  -- scripts/lua/run.lua

local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device, quantize = cfg.quantize })
lora.apply(model, { r = cfg.lora.r, alpha = cfg.lora.alpha, dropout = cfg.lora.dropout, targets = cfg.lora.targets,
                    rslora = cfg.lora.rslora, dora = cfg.lora.dora, seed = cfg.seed })
print(tostring(model))

local all = data.jsonl(cfg.data, { tokenizer = tok, max_length = cfg.max_length, pack = true, seed = cfg.seed })
local train_set, eval_set = all:split(1 - cfg.eval_fraction)

local trainer = run.trainer(model, cfg, { schedule = "cosine" })
local start, log = run.start(cfg, trainer)

for step, batch in train_set:batches { size = cfg.batch_size * cfg.gradient_accumulation_steps, steps = cfg.max_steps,
                                       start = start } do
  log:write(step, trainer:step(batch))
  if step % cfg.eval_steps == 0 or step == cfg.max_steps then run.evaluate(log, step, trainer, eval_set, cfg) end
  if log:stopped() then break end  -- stopped from the W&B UI: end here and save what there is
end

trainer:save()
run.save(cfg, model, tok, log, "adapter")  -- gguf=: the adapter merged into base_model in float32
