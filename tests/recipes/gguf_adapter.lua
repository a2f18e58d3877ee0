-- tests/recipes/gguf_adapter.lua: a LoRA adapter with nonzero B for the GGUF export test, so that
-- export_gguf's adapter= merge changes the model (test_gguf_export.sh).
local cfg = config { model = "", output_dir = "" }
local model = models.load(cfg.model, { dtype = "float32" })
lora.apply(model, { r = 4, alpha = 8, targets = "all-linear", seed = 1 })
torch.no_grad(function()
  for name, t in pairs(lora.parameters(model)) do
    if name:find("lora_B") then t[":"] = torch.randn(t:shape()) * 0.5 end
  end
end)
lora.save(model, cfg.output_dir)
print("wrote " .. cfg.output_dir)
