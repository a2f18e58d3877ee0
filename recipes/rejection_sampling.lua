-- Rejection sampling (best-of-N): the policy samples n responses per prompt, the reward model scores them,
-- and the best become fine-tuning data. The output is JSONL that data.jsonl and
-- recipes/lora_finetune.lua read (each row keeps its reward and every candidate's); fine-tune on it,
-- and repeat (Llama 2's recipe). docs/alignment.md.
-- runner rejection_sampling policy=/models/sft reward_model=out/reward_model/model prompts=data/prompts.jsonl
local cfg = config {
  policy = "models/Llama-3.1-8B-Instruct",  -- the model that samples: a local directory or a hub name (org/name)
  adapter = "",                    -- a PEFT LoRA adapter for the policy; "" = none
  reward_model = "out/reward_model/model",  -- the scorer: recipes/reward_model.lua's output
  prompts = "data/example_prompts.jsonl",  -- JSONL of {"prompt": string or messages} (or {"messages": [...]}); default: the example prompts
  output = "out/rejection_sampling/best_of_n.jsonl",  -- the JSONL to write: one row per prompt
  dtype = "bf16",                  -- weight dtype: bf16, fp16, fp32 or "auto" (the checkpoint's torch_dtype)
  device = "auto",                 -- "auto" (cuda when there is one, else cpu), cuda, cuda:N or cpu
  n = 8,                           -- responses sampled per prompt
  temperature = 0.8,               -- sampling temperature
  top_p = 0.95,                    -- nucleus sampling: the smallest set of tokens this likely; 1 = off
  top_k = 0,                       -- sample among the k most likely tokens; 0 = off
  max_new_tokens = 256,            -- longest response sampled
  max_length = 2048,               -- tokens of prompt + response; a prompt must leave room for a response
  max_prompts = -1,                -- prompts to use; -1 = every prompt
  chat_template = "",              -- how prompts render: "" = the policy's own; a .jinja file or a name (docs/chat_formats.md)
  seed = 0,                        -- seeds the sampling
}

local tok = tokenizer.load(cfg.policy)
local policy = models.load(cfg.policy, { dtype = cfg.dtype, device = cfg.device })
if cfg.adapter ~= "" then lora.load(policy, cfg.adapter) end
local reward = train.reward_model(models.load(cfg.reward_model, { dtype = cfg.dtype, device = cfg.device }),
                                  { load = cfg.reward_model })
print(tostring(policy), tostring(reward))

metrics.mkdir(cfg.output:match("^(.*)/[^/]*$") or ".")
local s = train.rejection_sample(policy, reward, {
  prompts = require("paths").resolve(cfg.prompts), out = cfg.output, tokenizer = tok, n = cfg.n, temperature = cfg.temperature,
  top_p = cfg.top_p, top_k = cfg.top_k, max_new_tokens = cfg.max_new_tokens, max_length = cfg.max_length,
  max_records = cfg.max_prompts, seed = cfg.seed, chat_template = cfg.chat_template })
print(string.format("%d prompts x %d candidates in %.1f s: mean reward %.4f, mean best %.4f (%.1f new tokens each)",
                    s.prompts, cfg.n, s.seconds, s.mean_reward, s.mean_best, s.mean_new_tokens))
print("wrote: " .. cfg.output)
