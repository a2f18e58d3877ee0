-- Rejection sampling (best-of-N): for each prompt the policy samples n responses, the reward model
-- scores them, and the best becomes supervised fine-tuning data (JSONL that data.jsonl and
-- recipes/lora_finetune.lua read; each row keeps its reward and every candidate's). Then fine-tune
-- on it, and repeat (Llama 2's recipe). docs/alignment.md.
-- runner rejection_sampling policy=/models/sft reward_model=out/reward_model/model prompts=data/prompts.jsonl
local cfg = config {
  policy = "models/Llama-3.1-8B-Instruct",      -- the model that samples
  adapter = "",                                  -- a PEFT LoRA adapter for the policy, if any
  reward_model = "out/reward_model/model",       -- recipes/reward_model.lua's output
  prompts = "data/prompts.jsonl",                -- {"prompt": string or messages} (or {"messages": [...]})
  out = "out/rejection_sampling/best_of_n.jsonl",
  dtype = "bf16", device = "auto",
  n = 8, temperature = 0.8, top_p = 0.95, top_k = 0, max_new_tokens = 256,
  max_length = 2048, max_prompts = -1,           -- -1: every prompt
  seed = 0,
}

local tok = tokenizer.load(cfg.policy)
local policy = models.load(cfg.policy, { dtype = cfg.dtype, device = cfg.device })
if cfg.adapter ~= "" then lora.load(policy, cfg.adapter) end
local reward = train.reward_model(models.load(cfg.reward_model, { dtype = cfg.dtype, device = cfg.device }),
                                  { load = cfg.reward_model })
print(tostring(policy), tostring(reward))

os.execute("mkdir -p '" .. (cfg.out:match("^(.*)/[^/]*$") or ".") .. "'")
local s = train.rejection_sample(policy, reward, {
  prompts = cfg.prompts, out = cfg.out, tokenizer = tok, n = cfg.n, temperature = cfg.temperature,
  top_p = cfg.top_p, top_k = cfg.top_k, max_new_tokens = cfg.max_new_tokens, max_length = cfg.max_length,
  max_records = cfg.max_prompts, seed = cfg.seed })
print(string.format("%d prompts x %d candidates in %.1f s: mean reward %.4f, mean best %.4f (%.1f new tokens each)",
                    s.prompts, cfg.n, s.seconds, s.mean_reward, s.mean_best, s.mean_new_tokens))
print("wrote: " .. cfg.out)
