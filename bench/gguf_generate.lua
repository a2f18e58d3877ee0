-- bench/gguf_generate.lua: luatune's side of bench/gguf_generate.sh.
--   mode=init: a random Llama (models.init) of the given shape with the given tokenizer, saved as an HF directory
--   to output= (not model=: config{} checks that a model= path exists, and init is about to create it).
--   mode=bench: CPU greedy generation with the KV cache (model:generate, float32): one warm-up, then
--   `reps` runs of 1 and of `new_tokens` new tokens; decode tok/s = (new_tokens - 1) / (t_N - t_1), so
--   the prompt's prefill is not counted, as llama.cpp's --bench does not count it. One JSON line.
local cfg = config {
  mode = "bench",
  model = "",              -- bench: the HF directory
  output = "",             -- init: where to write the HF directory
  tokenizer = "",          -- init: a tokenizer directory
  hidden_size = 768, intermediate_size = 2048, num_hidden_layers = 6, num_attention_heads = 12,
  num_key_value_heads = 4,
  prompt_tokens = 64, new_tokens = 64, reps = 3,
  fast_decode = true,      -- bench: false times every step through the forward pass (the path before the fast step)
  seed = 0,
}

if cfg.mode == "init" then
  assert(cfg.output ~= "", "gguf_generate: mode=init needs output=DIR (where to write the model)")
  local tok = tokenizer.load(cfg.tokenizer)
  local model = models.init { arch = "llama", tokenizer = tok, seed = cfg.seed, dtype = "float32",
    hidden_size = cfg.hidden_size, intermediate_size = cfg.intermediate_size, num_hidden_layers = cfg.num_hidden_layers,
    num_attention_heads = cfg.num_attention_heads, num_key_value_heads = cfg.num_key_value_heads,
    tie_word_embeddings = false, max_position_embeddings = 4096 }
  model:save(cfg.output, { tokenizer = tok })
  print(string.format("wrote %s: %.1fM parameters", cfg.output, model:num_params().total / 1e6))
  return
end

local tok = tokenizer.load(cfg.model)
local model = models.load(cfg.model, { dtype = "float32", device = "cpu" })
-- The text generate.mjs --bench repeats, repeated here until it holds at least prompt_tokens ids.
local sentence = "The quick brown fox jumps over the lazy dog. Three plus four is seven. "
local prompt = sentence
while #tok:encode(prompt) < cfg.prompt_tokens do prompt = prompt .. sentence end
local ids = tok:encode(prompt)
prompt = tok:decode({ unpack(ids, 1, cfg.prompt_tokens - 1) })  -- generate adds BOS: ~prompt_tokens in all
local n_prompt = #tok:encode(prompt, { special = true })

local function run(n)
  local t0 = metrics.clock()
  local _, r = model:generate(tok, prompt, { max_new_tokens = n, temperature = 0, fast_decode = cfg.fast_decode })
  return metrics.clock() - t0, r.new_tokens
end
run(cfg.new_tokens)  -- warm-up
local rates, t1s = {}, {}
for _ = 1, cfg.reps do
  local t1 = run(1)
  local tn, n = run(cfg.new_tokens)
  assert(n > 1, "generation stopped after " .. n .. " token(s) (an EOS); use another seed")
  rates[#rates + 1] = (n - 1) / (tn - t1)
  t1s[#t1s + 1] = t1
end
table.sort(rates)
table.sort(t1s)
print(string.format('{"model":"%s","prompt_tokens":%d,"new_tokens":%d,"gen_tok_s":%.3f,"prefill_plus_one_s":%.4f,"runs":[%s]}',
  cfg.model, n_prompt, cfg.new_tokens, rates[math.floor(#rates / 2) + 1], t1s[math.floor(#t1s / 2) + 1],
  table.concat((function() local o = {} for i, v in ipairs(rates) do o[i] = string.format("%.3f", v) end return o end)(), ",")))
