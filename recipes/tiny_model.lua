-- Write a tiny random-init Hugging Face model (any supported architecture) with a real tokenizer, to smoke-test a pipeline before renting a GPU.
-- runner tiny_model arch=qwen3 tokenizer=path/to/model_dir output_dir=out/tiny-qwen3
-- The default tokenizer is the Llama 3.1 one that scripts/setup.sh puts in tokenizers/llama3_1 (docs/install.md).
local cfg = config {
  arch = "llama",                       -- llama, mistral, qwen2, qwen3 or gemma2
  tokenizer = "tokenizers/llama3_1",  -- tokenizer directory; its vocabulary sizes the model
  output_dir = "out/tiny-model",        -- the model directory to write
  hidden_size = 64,                     -- width of the residual stream
  intermediate_size = 128,              -- MLP width
  num_hidden_layers = 2,                -- decoder layers
  num_attention_heads = 4,              -- query heads
  num_key_value_heads = 2,              -- key/value heads (grouped-query attention)
  head_dim = 16,                        -- width of each attention head
  max_position_embeddings = 4096,       -- longest sequence the config declares
  dtype = "bf16",                       -- dtype of the saved weights: bf16, fp16 or fp32
  seed = 0,                             -- seeds the random init
  prompt = "The capital of France is",  -- the reloaded model generates 8 tokens from this, as a check
}

local tok = tokenizer.load(require("paths").resolve(cfg.tokenizer))  -- also from outside the checkout
local model = models.init {
  arch = cfg.arch, tokenizer = tok, seed = cfg.seed, dtype = cfg.dtype,
  hidden_size = cfg.hidden_size, intermediate_size = cfg.intermediate_size,
  num_hidden_layers = cfg.num_hidden_layers, num_attention_heads = cfg.num_attention_heads,
  num_key_value_heads = cfg.num_key_value_heads, head_dim = cfg.head_dim,
  max_position_embeddings = cfg.max_position_embeddings,
}
local n = model:num_params()
print(string.format("%s: %.2fM parameters (embedding %.2fM, attention %.2fM, mlp %.2fM)", tostring(model),
                    n.total / 1e6, n.embedding / 1e6, n.attention / 1e6, n.mlp / 1e6))

model:save(cfg.output_dir, { tokenizer = tok })

-- Check what we wrote: it loads back to the same logits and generates.
local back = models.load(cfg.output_dir)
local ids = tok:encode(cfg.prompt, { special = true })
assert(torch.equal(model:forward(ids), back:forward(ids)), "reloaded model differs")
local text, info = back:generate(tok, cfg.prompt, { max_new_tokens = 8 })
print(string.format("wrote %s (%s); sample: %q (%d tokens, %s)", cfg.output_dir, cfg.arch, text,
                    info.new_tokens, info.finish_reason))
