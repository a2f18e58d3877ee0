-- tests/lua/tiny.lua: the tiny CPU Llama models and random batches the tests/lua files build.
--   local tiny = require "tiny"
--   local m = tiny.model { num_hidden_layers = 4, seed = 2 }  -- these fields over tiny.model's defaults
--   local b = tiny.batch(7, 50, 4, 10)                        -- 4 rows of 10 ids below 50, seed 7
local M = {}

-- models.init of a Llama with hidden 32, intermediate 40, 2 layers, 4 heads in 2 KV groups, a
-- 50-token vocabulary and seed 1; `fields` adds config fields or replaces these.
function M.model(fields)
  local config = { arch = "llama", vocab_size = 50, hidden_size = 32, intermediate_size = 40, num_hidden_layers = 2,
                   num_attention_heads = 4, num_key_value_heads = 2, seed = 1 }
  for k, v in pairs(fields or {}) do config[k] = v end
  return models.init(config)
end

-- A train.batch of `rows` rows of `len` random ids below `vocab`, after torch.manual_seed(seed).
function M.batch(seed, vocab, rows, len)
  torch.manual_seed(seed)
  return train.batch { ids = torch.randint(0, vocab, { rows, len }, { dtype = "int64" }) }
end

return M
