-- Completions for every prompt of a JSONL file, written as JSONL: the model you trained, sampled at scale.
-- runner generate model=out/quickstart/model prompts=data/example_prompts.jsonl output=out/generate.jsonl
-- runner generate adapter=out/quickstart/adapter max_new_tokens=32   (the embedded model with a LoRA merged)
-- Prompts are {"prompt": string or messages} or {"messages": [...]} records, rendered with the model's own
-- chat template when it has one. batch_size prompts decode together: on a float32 CPU model in one pass
-- over the weights per token (docs/generation.md). Each row: {"prompt", "completion", "finish_reason",
-- "new_tokens"}, in the prompts' order; prompt i samples with seed + i, so batch_size never changes them.
local cfg = config {
  model = "models/SmolLM2-135M-Instruct.Q4_1.gguf",  -- the embedded default; any Hugging Face directory, .gguf file or hub name
  adapter = "",                   -- a PEFT LoRA directory merged into the model first; "" = none
  prompts = "data/example_prompts.jsonl",  -- JSONL of prompts; default: the example prompts
  output = "out/generate/completions.jsonl",  -- the JSONL to write (atomically)
  dtype = "fp32",                 -- weight dtype: fp32 (the fast CPU decode step), bf16, fp16 or "auto"
  device = "cpu",                 -- cpu | auto | cuda | cuda:N
  max_new_tokens = 128,           -- tokens per completion at most
  temperature = 0,                -- 0 = greedy
  top_k = 0,                      -- sample among the k most likely tokens; 0 = off
  top_p = 1,                      -- nucleus sampling; 1 = off
  seed = 0,                       -- prompt i samples with seed + i
  batch_size = 16,                -- prompts decoded together
  max_prompts = -1,               -- prompts to use; -1 = every prompt
  max_length = 2048,              -- tokens of a rendered prompt at most
  chat_template = "",             -- how prompts render: "" = the model's own; a .jinja file or a name (docs/chat_formats.md)
}

local tok = tokenizer.load(cfg.model)
local model = models.load(cfg.model, { dtype = cfg.dtype, device = cfg.device })
if cfg.adapter ~= "" then
  lora.load(model, cfg.adapter)
  lora.merge(model)  -- plain weights again: the fast decode step takes no adapter
end
print(tostring(model))
metrics.mkdir(cfg.output:match("^(.*)/[^/]*$") or ".")
local s = train.generate(model, {
  prompts = require("paths").resolve(cfg.prompts), out = cfg.output, tokenizer = tok,
  max_new_tokens = cfg.max_new_tokens, temperature = cfg.temperature, top_k = cfg.top_k, top_p = cfg.top_p,
  seed = cfg.seed, batch_size = cfg.batch_size, max_records = cfg.max_prompts, max_length = cfg.max_length,
  chat_template = cfg.chat_template })
print(string.format("%d prompts in %.1f s: %d new tokens, %.1f tokens/s", s.prompts, s.seconds, s.new_tokens,
                    s.tokens_per_s))
print("wrote: " .. cfg.output)
