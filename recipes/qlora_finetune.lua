-- QLoRA: LoRA adapters trained on a 4-bit NF4 base (double-quantized scales, bf16 compute), so an 8B model
-- fine-tunes on a 16 GB GPU. Writes a PEFT adapter and, with merge=true, a bf16 Hugging Face model.
-- runner qlora_finetune base_model=/models/Llama-3.1-8B-Instruct [data=FILE.jsonl] [max_steps=2000 merge=true ...]
local keys = require("run_keys")  -- scripts/lua/run_keys.lua: shared keys, with docs (runner help lists all)
local cfg = config(keys.training {  -- + batch_size, eval_steps, save_steps, resume, seed, device, ...
  base_model = "models/Llama-3.1-8B-Instruct",  -- model to fine-tune (bf16, or already 4-bit): a local directory or org/name
  data = "data/example_chat.jsonl", -- training JSONL: chat, prompt/response, Alpaca, Guanaco (docs/data.md); default: the example set the build writes
  output_dir = "out/qlora",         -- adapter/, merged/, checkpoints/ and metrics.jsonl go here
  gguf = "",                        -- also write output_dir/model.gguf: f32, f16, bf16, q8_0, q4_0 or q4_k; "" = none
  dtype = "bf16",                   -- compute dtype of the dequantized weights and the adapters: bf16, fp16 or fp32
  quantize = "nf4",                 -- 4-bit data type of the base's Linears: nf4 (QLoRA) or fp4
  double_quant = true,              -- true: quantize the per-block scales too (about 0.37 bits a weight saved)
  blocksize = 64,                   -- weights per quantization block (one scale each)
  lora = {                          -- the LoRA adapters (docs/lora.md)
    r = 16,                         -- rank of each adapter
    alpha = 32,                     -- scaling: an adapter's update is multiplied by alpha / r
    dropout = 0.05,                 -- dropout on each adapter's input; 0 = none
    targets = { "q_proj", "k_proj", "v_proj", "o_proj",
                "gate_proj", "up_proj", "down_proj" },  -- modules that get adapters: names, or "all-linear"
  },
  learning_rate = 2e-4,             -- peak learning rate; cosine decay to 0 after warm-up
  max_steps = 1000,                 -- optimizer steps in all
  gradient_accumulation_steps = 4,  -- micro-batches per optimizer step: batch_size x this rows a step on each rank
  merge = false,                    -- true: also write output_dir/merged: adapters folded into the dequantized base, bf16
})
local gguf_out = require("gguf_out").check(cfg.gguf)  -- scripts/lua/gguf_out.lua
local run = require("run")  -- scripts/lua/run.lua

local tok = tokenizer.load(cfg.base_model)
-- Each Linear is converted, moved and quantized on its own: the bf16 model never sits on the GPU whole.
local model = models.load(cfg.base_model, {
  dtype = cfg.dtype, device = cfg.device,
  quantize = { quant_type = cfg.quantize, double_quant = cfg.double_quant, blocksize = cfg.blocksize } })
lora.apply(model, cfg.lora, { seed = cfg.seed })
local q = qlora.info(model)
print(string.format("%s\n4-bit base: %d Linears %s, %.1f MB (%.1f MB in %s)", tostring(model), q.linears, q.quant_type,
                    q.bytes / 1e6, q.dense_bytes / 1e6, cfg.dtype))

local train_set, eval_set = run.sets(cfg, tok)  -- packed rows of data; eval_fraction of them held out

local trainer, start, log = run.start(model, cfg, { schedule = "cosine" })

for step, batch in run.batches(train_set, cfg, start, log) do  -- to max_steps, or until stopped from the W&B UI
  log:write(step, trainer:step(batch))
  if step % cfg.eval_steps == 0 or step == cfg.max_steps then run.evaluate(log, step, trainer, eval_set, cfg) end
end

trainer:save()
lora.save(model, cfg.output_dir .. "/adapter", { base_model = cfg.base_model })
print("adapter (PEFT format): " .. cfg.output_dir .. "/adapter")
if cfg.merge then
  lora.merge(model)       -- each 4-bit Linear dequantized, the adapter added, kept dense (bf16)
  qlora.dequantize(model) -- any Linear the adapters did not target
  model:save(cfg.output_dir .. "/merged", { tokenizer = tok })
  print("merged model (bf16, Hugging Face): " .. cfg.output_dir .. "/merged")
end
log:close()
-- GGUF: from the merged model (the dequantized NF4 base the adapters trained on); without merge=true,
-- from base_model with the adapter merged in float32.
if cfg.merge then gguf_out.write(cfg.gguf, cfg.output_dir, cfg.output_dir .. "/merged")
else gguf_out.write(cfg.gguf, cfg.output_dir, cfg.base_model, cfg.output_dir .. "/adapter") end
