-- scripts/lua/gguf_out.lua: the `gguf = "q8_0"` key of the training and pruning recipes. At the end
-- of a run, writes output_dir/model.gguf (llama.cpp, Ollama, LM Studio) from the Hugging Face
-- directory the recipe just saved, through export.gguf (docs/gguf.md).
--   local gguf_out = require("gguf_out").check(cfg.gguf)  -- after config{}: a bad outtype fails before training
--   gguf_out.write(cfg.gguf, cfg.output_dir, cfg.output_dir .. "/model")                -- a full model
--   gguf_out.write(cfg.gguf, cfg.output_dir, cfg.base_model, cfg.output_dir .. "/adapter")  -- base + LoRA merged
-- outtype "" (the recipes' default) writes nothing. Under `runner --nproc N` only the main rank writes.
local M = {}

local OUTTYPES = { f32 = true, f16 = true, bf16 = true, q8_0 = true, q4_0 = true, q4_k = true }

-- Fails at once on an outtype export.gguf would refuse at the end of the run; returns the module.
function M.check(outtype)
  if outtype ~= nil and outtype ~= "" and not OUTTYPES[outtype] then
    error(string.format("gguf: outtype '%s' is not one of f32, f16, bf16, q8_0, q4_0, q4_k (or \"\" for none)",
                        tostring(outtype)), 0)
  end
  return M
end

-- Returns the path written, or nil when outtype is "" (or on a rank other than the main one).
function M.write(outtype, output_dir, model_dir, adapter_dir)
  if outtype == nil or outtype == "" then return nil end
  if not dist.is_main() then return nil end
  local path = output_dir .. "/model.gguf"
  local r = export.gguf(model_dir, path, { outtype = outtype, adapter = adapter_dir or "" })
  print(string.format("GGUF (%s, llama.cpp): %s (%d tensors, %.1f MiB)%s", r.outtype, r.path, r.tensors,
                      r.bytes / 2 ^ 20, adapter_dir and (", adapter " .. adapter_dir .. " merged") or ""))
  return r.path
end

return M
