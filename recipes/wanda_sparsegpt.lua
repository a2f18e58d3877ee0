-- One-shot pruning compared: magnitude vs Wanda vs SparseGPT at 50% unstructured and 2:4, by perplexity on held-out rows.
-- runner wanda_sparsegpt base_model=/models/Llama-3.2-1B data=corpus.jsonl [calibration_rows=128 max_length=2048 check=true]
-- Each run reloads the model, calibrates on the same calibration_rows packed rows of max_length tokens
-- (the papers: 128 x 2048 from C4), prunes every decoder linear layer by layer (docs/pruning.md) and
-- evaluates on the same held-out rows. Writes output_dir/results.json and results.md.
local cfg = config {
  base_model = "models/Llama-3.2-1B",  -- model to prune: a local Hugging Face directory or a hub name (org/name)
  data = "data/example_text.jsonl",    -- plain text JSONL, {"text": ...} per line; default: the example text the build writes
  output_dir = "out/wanda_sparsegpt",  -- results.json and results.md go here
  dtype = "fp32",                      -- weight dtype: fp32, bf16, fp16 or "auto" (the checkpoint's torch_dtype)
  device = "auto",                     -- "auto" (cuda when there is one, else cpu), cuda, cuda:N or cpu
  calibration_rows = 128,              -- calibration rows every method sees (the papers: 128)
  max_length = 2048,                   -- tokens per row (the papers: 2048)
  batch_size = 8,                      -- rows per forward
  eval_fraction = 0.1,                 -- share of the rows held out for perplexity
  eval_batches = 0,                    -- held-out batches each perplexity reads; 0 = all of them
  methods = { "magnitude", "wanda", "sparsegpt" },  -- methods compared, each on a fresh copy of the model
  patterns = { "50%", "2:4" },         -- "NN%" unstructured, or "n:m" (n of every m weights zero)
  blocksize = 128,                     -- SparseGPT: columns pruned and compensated together
  dampening = 0.01,                    -- SparseGPT: this x mean(diag H) added to the Hessian's diagonal
  seed = 0,                            -- seeds the data order: which rows calibrate and which are held out
  check = false,                       -- fail unless Wanda and SparseGPT beat magnitude at 50% (the papers' ordering)
}

local P = require("pruning")
local tok = tokenizer.load(cfg.base_model)
-- The same calibration rows for every method: the first calibration_rows of a seeded shuffle.
local _, eval_set, calibration = P.text_sets(cfg, tok)

local function load() return models.load(cfg.base_model, { dtype = cfg.dtype, device = cfg.device }) end
local function perplexity(model)
  return P.perplexity(model, eval_set, { batch_size = cfg.batch_size, max_batches = cfg.eval_batches })
end

local results = { { method = "dense", pattern = "-", sparsity = 0, perplexity = perplexity(load()) } }
print(("%-10s %-6s sparsity %.3f  perplexity %10.3f"):format("dense", "-", 0, results[1].perplexity))
for _, pattern in ipairs(cfg.patterns) do
  for _, method in ipairs(cfg.methods) do
    local model = load()  -- fresh weights for every run
    local opts = { method = method, blocksize = cfg.blocksize, dampening = cfg.dampening }
    local percent = pattern:match("^(%d+)%%$")
    if percent then opts.sparsity = tonumber(percent) / 100 else opts.pattern = pattern end
    local report = prune.unstructured(model, method ~= "magnitude" and calibration or nil, opts)
    local r = { method = method, pattern = pattern, sparsity = report.sparsity, perplexity = perplexity(model) }
    results[#results + 1] = r
    print(("%-10s %-6s sparsity %.3f  perplexity %10.3f"):format(method, pattern, r.sparsity, r.perplexity))
    model:release()
  end
end

-- results.json (one object per run) and a markdown table.
metrics.mkdir(cfg.output_dir)
local json, md = {}, { "| method | pattern | sparsity | perplexity |", "|---|---|---|---|" }
for _, r in ipairs(results) do
  json[#json + 1] = ('  {"method": "%s", "pattern": "%s", "sparsity": %.6f, "perplexity": %.6f}')
      :format(r.method, r.pattern, r.sparsity, r.perplexity)
  md[#md + 1] = ("| %s | %s | %.3f | %.3f |"):format(r.method, r.pattern, r.sparsity, r.perplexity)
end
local f = assert(io.open(cfg.output_dir .. "/results.json", "w"))
f:write("[\n", table.concat(json, ",\n"), "\n]\n")
f:close()
f = assert(io.open(cfg.output_dir .. "/results.md", "w"))
f:write(table.concat(md, "\n"), "\n")
f:close()
print("\n" .. table.concat(md, "\n"))
print("wrote " .. cfg.output_dir .. "/results.json and results.md")

if cfg.check then
  local ppl = {}
  for _, r in ipairs(results) do ppl[r.method .. " " .. r.pattern] = r.perplexity end
  for _, method in ipairs { "wanda", "sparsegpt" } do
    local mine, base = ppl[method .. " 50%"], ppl["magnitude 50%"]
    assert(mine and base, "check=true needs magnitude, wanda and sparsegpt at 50%")
    assert(mine < base, ("%s at 50%% (%.3f) is not below magnitude (%.3f)"):format(method, mine, base))
  end
  print("check: wanda and sparsegpt beat magnitude at 50%")
end
