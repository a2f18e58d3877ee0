-- tests/recipes/gguf_greedy.lua: luatune's side of the GGUF export test (test_gguf_export.sh):
-- greedy generation (model:generate at temperature 0, float32) for a few prompts and, when the
-- tokenizer has a chat template, one rendered chat; one JSON line per prompt with the prompt's ids
-- and the generated ids, which the test replays through llama.cpp on the exported file.
local cfg = config {
  model = "",
  adapter = "",  -- a PEFT LoRA directory merged in first, as export_gguf's adapter= does
  max_new_tokens = 8,
}
local tok = tokenizer.load(cfg.model)
local model = models.load(cfg.model, { dtype = "float32" })
if cfg.adapter ~= "" then
  lora.load(model, cfg.adapter)
  lora.merge(model)
end

local function list(t, first, last)
  local out = {}
  for i = first, last do out[#out + 1] = string.format("%d", t[i]) end
  return "[" .. table.concat(out, ",") .. "]"
end

local function jstr(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    if c == '"' or c == "\\" then return "\\" .. c end
    return string.format("\\u%04x", c:byte())
  end) .. '"'
end

local bos = tok:special().bos
local adds_bos = bos ~= nil and tok:encode("a", { special = true })[1] == bos

local function run(kind, text, prompt)
  local _, info = model:generate(tok, text, { max_new_tokens = cfg.max_new_tokens })
  local n_prompt = #info.ids - info.new_tokens
  print(string.format('{"kind":"%s","prompt":%s,"add_bos":%s,"prompt_ids":%s,"ids":%s,"finish_reason":"%s"}', kind,
                      jstr(prompt), tostring(adds_bos), list(info.ids, 1, n_prompt),
                      list(info.ids, n_prompt + 1, #info.ids), info.finish_reason))
end

for _, p in ipairs { "The capital of France is", "Hello", "1 2 3 4 5 6", "def f(x):\n    return x" } do
  run("text", p, p)
end
if tok:chat_template() and tok:chat_template() ~= "" then
  local q = "What is 2 + 2?"
  local text = tok:render_chat({ { role = "user", content = q } }, { add_generation_prompt = true })
  run("chat", text, q)
end
