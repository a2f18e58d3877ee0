-- tests/real_model/adapter_logits.lua: luatune's side of the PEFT check in test_smollm2_chat.sh. The base
-- model with a trained PEFT LoRA adapter loaded (lora.load), float32: the logits of a chat prompt's last
-- position, and every position's argmax, as JSON in $OUT. Usage: MODEL_DIR= ADAPTER= OUT= runner adapter_logits.lua
local dir, adapter, out = os.getenv("MODEL_DIR"), os.getenv("ADAPTER"), os.getenv("OUT")
local tok = tokenizer.load(dir)
local model = models.load(dir, { dtype = "fp32", device = "cpu" })
lora.load(model, adapter)
local ids = tok:encode_chat({ { role = "user", content = "What is 12 + 43?" } }, { add_generation_prompt = true })
local logits = model:forward({ ids }):select(0, 0)
metrics.write_json(out, { ids = ids, last_logits = logits:select(0, #ids - 1):tolist(), argmax = logits:argmax(-1):tolist() })
