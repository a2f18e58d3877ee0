-- LoRA fine-tuning of a chat model on JSONL (chat, prompt/response, Alpaca or Guanaco records); writes a PEFT adapter.
-- runner lora_finetune base_model=/models/Llama-3.1-8B-Instruct [data=FILE.jsonl] [lora.r=32 max_steps=2000 ...]
-- quantize=nf4 makes it QLoRA (a 4-bit base); recipes/qlora_finetune.lua has QLoRA's defaults and merging.
local keys = require("run_keys")  -- scripts/lua/run_keys.lua: shared keys, with docs (runner help lists all)
local cfg = config(keys.training {  -- + batch_size, eval_steps, save_steps, resume, seed, device, ...
  base_model = "models/Llama-3.1-8B-Instruct",  -- model to fine-tune: a local Hugging Face directory or a hub name (org/name)
  data = "data/example_chat.jsonl", -- training JSONL: chat, prompt/response, Alpaca, Guanaco (docs/data.md); default: the example set the build writes
  output_dir = "out/lora",          -- adapter/, checkpoints/, metrics.jsonl and run.json go here
  gguf = "",                        -- also write output_dir/model.gguf: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
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
  max_steps = 1000,                 -- optimizer steps in all
})
require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua: a bad outtype fails before training
local run = require("run")  -- scripts/lua/run.lua

local tok = tokenizer.load(cfg.base_model)
local model = models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device, quantize = cfg.quantize })
lora.apply(model, cfg.lora, { seed = cfg.seed })
print(tostring(model))

local train_set, eval_set = run.sets(cfg, tok)  -- packed rows of data; eval_fraction of them held out

local trainer, start, log = run.start(model, cfg, { schedule = "cosine" })

for step, batch in run.batches(train_set, cfg, start, log) do  -- to max_steps, or until stopped from the W&B UI
  log:write(step, trainer:step(batch))
  if step % cfg.eval_steps == 0 or step == cfg.max_steps then run.evaluate(log, step, trainer, eval_set, cfg) end
end

trainer:save()
run.save(cfg, model, tok, log, "adapter")  -- gguf=: the adapter merged into base_model in float32
