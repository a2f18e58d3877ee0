-- bench/llama_step.lua: luatune's side of bench/step_vs_pytorch.sh. Training steps of a random fp32
-- Llama (hidden 512, 4 layers, GQA 8 query / 2 KV heads, intermediate 1408, untied head), full
-- fine-tuning or LoRA r16 on all linear layers, AdamW with clipping at 1.0, on one fixed batch.
-- Prints one line: RESULT side=luatune ... step_s=<median of the timed steps> (warm-up excluded).
-- paced=true: after the warm-up it prints READY, then times one step per line read from stdin,
-- printing STEP ... step_s=<that step> for each, until end of input (bench/step_vs_pytorch.sh
-- alternates the two sides' steps this way). Its peer, with the same shapes and maths:
-- bench/pytorch_llama_step.py.
-- model=DIR (or a .gguf): a real model instead, float32; vocab_size is then the model's.
-- Run: build/runner bench/llama_step.lua method=lora vocab_size=128256 [steps=3 warmup=1]
local cfg = config { method = "full", vocab_size = 32000, rows = 4, length = 256, steps = 3, warmup = 1,
                     paced = false, model = "" }
assert(cfg.method == "full" or cfg.method == "lora", "method must be full or lora")
local m
if cfg.model ~= "" then
  m = models.load(cfg.model, { dtype = "fp32", device = "cpu" })
  cfg.vocab_size = m:config().vocab_size
else
  m = models.init { arch = "llama", vocab_size = cfg.vocab_size, hidden_size = 512, intermediate_size = 1408,
                    num_hidden_layers = 4, num_attention_heads = 8, num_key_value_heads = 2,
                    tie_word_embeddings = false, seed = 0 }
end
if cfg.method == "lora" then lora.apply(m, { r = 16, alpha = 32, dropout = 0, targets = { "all-linear" } }) end
local trainer = train.new(m, { learning_rate = 1e-4, schedule = "constant", max_grad_norm = 1.0 })
torch.manual_seed(0)
local batch = train.batch { ids = torch.randint(0, cfg.vocab_size, { cfg.rows, cfg.length }, { dtype = "int64" }) }

local function timed_step()
  local t0 = metrics.clock()
  trainer:step(batch)
  return metrics.clock() - t0
end
local tag = ("side=luatune method=%s vocab=%d"):format(cfg.method, cfg.vocab_size)
for _ = 1, cfg.warmup do trainer:step(batch) end
if cfg.paced then
  print("READY " .. tag)
  while io.read("*l") do print(("STEP %s step_s=%.4f"):format(tag, timed_step())) end
  return
end
local times = {}
for i = 1, cfg.steps do times[i] = timed_step() end
table.sort(times)
local median = #times % 2 == 1 and times[(#times + 1) / 2] or (times[#times / 2] + times[#times / 2 + 1]) / 2
print(("RESULT %s step_s=%.4f tokens_per_s=%.1f trainable=%d"):format(tag, median, cfg.rows * cfg.length / median,
                                                                     m:num_params().trainable))
