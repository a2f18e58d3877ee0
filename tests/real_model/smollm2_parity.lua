-- tests/real_model/smollm2_parity.lua: luatune's side of smollm2_parity.sh on a real pretrained model
-- (SmolLM2-135M-Instruct converted from its GGUF), float32 on the CPU: the chat-template ids of a
-- conversation, the logits of every position of that prompt, perplexity over real English prose (the
-- first 9000 bytes of the GPL-3 text Debian's base-files ships) in windows of 512 tokens, and greedy answers to two questions.
-- Writes one JSON document to $OUT. Usage: MODEL_DIR=DIR OUT=FILE runner tests/real_model/smollm2_parity.lua
local dir, out = assert(os.getenv("MODEL_DIR"), "MODEL_DIR"), assert(os.getenv("OUT"), "OUT")
local tok = tokenizer.load(dir)
local model = models.load(dir, { dtype = "fp32", device = "cpu" })
local questions = { "What is the capital of France?", "Name three primary colors." }
local result = { questions = questions, answers = {}, answer_ids = {} }

local ids = tok:encode_chat({ { role = "user", content = questions[1] } }, { add_generation_prompt = true })
result.prompt_ids = ids
local logits = model:forward({ ids }):select(0, 0)  -- (T, vocab)
result.last_logits = logits:select(0, #ids - 1):tolist()  -- the next-token distribution, whole
result.argmax = logits:argmax(-1):tolist()                 -- every position's likeliest token

local f = assert(io.open("/usr/share/common-licenses/GPL-3"))
local prose = f:read("a"):sub(1, 9000)  -- its first 9000 bytes (ASCII): about 2,000 tokens
f:close()
local ppl, info = model:perplexity(prose, { tokenizer = tok, max_length = 512 })
result.perplexity, result.perplexity_tokens = ppl, info.tokens

for i, q in ipairs(questions) do
  local prompt = tok:render_chat({ { role = "user", content = q } }, { add_generation_prompt = true })
  local text, gen = model:generate(tok, prompt, { max_new_tokens = 24 })
  result.answers[i] = text
  result.answer_ids[i] = gen.ids
end
metrics.write_json(out, result)
print(string.format("perplexity %.4f over %d tokens; answers: %q / %q", ppl, info.tokens, result.answers[1],
                    result.answers[2]))
