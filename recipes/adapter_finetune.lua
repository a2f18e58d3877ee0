-- LLaMA-Adapter fine-tuning (PEFT's adaption prompt) of a chat model on JSONL (chat, prompt/response, Alpaca or
-- Guanaco records); writes a PEFT adapter. A learnable prompt with a zero-init gate in each of the top
-- adapter_layers layers: about 1.2M trainable parameters on an 8B model (peft_type ADAPTION_PROMPT, docs/lora.md).
-- runner adapter_finetune base_model=/models/Llama-3.1-8B-Instruct [data=FILE.jsonl] [adapter.adapter_len=20 ...]
local keys = require("run_keys")  -- scripts/lua/run_keys.lua: shared keys, with docs (runner help lists all)
local cfg = config(keys.training {  -- + batch_size, eval_steps, save_steps, resume, seed, device, ...
  base_model = "models/Llama-3.1-8B-Instruct",  -- model to fine-tune (llama, mistral or qwen2): a local directory or org/name
  data = "data/example_chat.jsonl", -- training JSONL: chat, prompt/response, Alpaca, Guanaco (docs/data.md); default: the example set the build writes
  output_dir = "out/adapter",       -- adapter/, checkpoints/, metrics.jsonl and run.json go here
  adapter = {                       -- the adaption prompts; defaults: the paper's LLaMA-7B settings
    adapter_len = 10,               -- learnable prompt vectors in each adapted layer
    adapter_layers = 30,            -- layers adapted, counted from the top (the paper: 30 of 32)
  },
  learning_rate = 9e-3,             -- the paper's peak: prompts start at N(0, 1), gates at 0, so far above LoRA's 2e-4
  weight_decay = 0.02,              -- AdamW's decoupled weight decay (the paper's)
  max_steps = 1000,                 -- optimizer steps in all (cosine decay to 0 after warm-up)
  max_length = 512,                 -- tokens per row; records are packed into rows of at most this
})
local run = require("run")  -- scripts/lua/run.lua

local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device })
lora.adaption_prompt(model, cfg.adapter, { seed = cfg.seed })
print(tostring(model))

local train_set, eval_set = run.sets(cfg, tok)  -- packed rows of data; eval_fraction of them held out

local trainer, start, log = run.start(model, cfg, { schedule = "cosine" })  -- + weight_decay

for step, batch in run.batches(train_set, cfg, start, log) do  -- to max_steps, or until stopped from the W&B UI
  log:write(step, trainer:step(batch))
  if step % cfg.eval_steps == 0 or step == cfg.max_steps then run.evaluate(log, step, trainer, eval_set, cfg) end
end

trainer:save()
run.save(cfg, model, tok, log, "adapter", "adapter (PEFT format, ADAPTION_PROMPT)")
