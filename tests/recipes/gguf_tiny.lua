-- tests/recipes/gguf_tiny.lua: a tiny random model of one architecture for the GGUF export test
-- (tests/recipes/test_gguf_export.sh), saved in float32 with its family's tokenizer. Unlike
-- recipes/tiny_model.lua it sets Gemma 2's query_pre_attn_scalar to head_dim, the scale llama.cpp
-- uses for every Gemma 2 size but 27B (docs/gguf.md).
local cfg = config {
  arch = "llama",
  tokenizer = "",
  output_dir = "",
  seed = 0,
  hidden_size = 64, intermediate_size = 128,  -- 58 and 115: a pruned model's odd widths
  initializer_range = 0.02,
}
local tok = tokenizer.load(cfg.tokenizer)
local spec = {
  arch = cfg.arch, tokenizer = tok, seed = cfg.seed, dtype = "float32",
  hidden_size = cfg.hidden_size, intermediate_size = cfg.intermediate_size, num_hidden_layers = 2, num_attention_heads = 4,
  num_key_value_heads = 2, head_dim = 16, max_position_embeddings = 4096,
  initializer_range = cfg.initializer_range,
}
if cfg.arch == "gemma2" then spec.query_pre_attn_scalar = 16 end
local model = models.init(spec)
model:save(cfg.output_dir, { tokenizer = tok })
print(string.format("wrote %s (%s)", cfg.output_dir, tostring(model)))
