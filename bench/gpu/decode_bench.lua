-- bench/gpu/decode_bench.lua: luatune's side of the generation pair (the other: bench/gpu/hf_decode.py;
-- scripts/gpu_validate.py runs both, each in its own process). A random model of a real shape
-- (bench/gpu/shapes.json) generates `new` tokens greedily after a `prompt`-token prompt with its KV cache;
-- decode tokens/s = (new - 1) / (t_new - t_1), so the prefill is timed apart (prefill_s = t_1), median of
-- `reps` after a warm-up. One JSON object to out= (docs/generation.md).
--   build/runner bench/gpu/decode_bench.lua shape=llama-3.2-1b device=cuda dtype=bf16 out=/tmp/lt-decode.json
local cfg = config {
  shape = "tiny",        -- a key of shapes.json
  prompt = 128, new = 128, reps = 3,
  device = "auto", dtype = "bf16", out = "", seed = 0,
  shapes = "",           -- the shapes file; "" = shapes.json beside this script
}
assert(cfg.out ~= "", "decode_bench: out=FILE.json is required")
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local shape = hw.read_json(cfg.shapes ~= "" and cfg.shapes or here .. "/shapes.json").shapes[cfg.shape]
assert(shape, "decode_bench: unknown shape '" .. cfg.shape .. "'")
local device = tostring(torch.device(cfg.device))
local spec = { arch = shape.arch, seed = cfg.seed, dtype = cfg.dtype, device = device }
for k, v in pairs(shape.config) do spec[k] = v end
local model = models.init(spec)
-- The in-tree byte-level tokenizer (the GPU machine has no network): its ids fit every shape's vocabulary.
local tok = tokenizer.load(here .. "/../../tests/fixtures/tokenizers/bytelevel")
local text = "The quick brown fox jumps over the lazy dog. "
while #tok:encode(text) < cfg.prompt do text = text .. text end
local ids = tok:encode(text)
local prompt = tok:decode({ unpack(ids, 1, cfg.prompt) })
local function run(n)
  local t0 = metrics.clock()
  local _, r = model:generate(tok, prompt, { max_new_tokens = n, temperature = 0 })
  return metrics.clock() - t0, r.new_tokens
end
run(cfg.new)  -- warm-up (and CUDA's first kernels)
local rates, firsts, counts = {}, {}, {}
for i = 1, cfg.reps do
  local t1 = run(1)
  local tn, n = run(cfg.new)
  rates[i], firsts[i], counts[i] = (n - 1) / math.max(tn - t1, 1e-9), t1, n
end
table.sort(rates)
table.sort(firsts)
local result = { library = "luatune", shape = cfg.shape, device = device, dtype = cfg.dtype, prompt_tokens = #tok:encode(prompt),
                 new_tokens = counts[1], tokens_per_s = rates[math.floor(#rates / 2) + 1],
                 prefill_s = firsts[math.floor(#firsts / 2) + 1], runs = rates }
metrics.write_json(cfg.out, result)
print(string.format("decode_bench: %s on %s: %.1f tokens/s after a %d-token prefill of %.3f s", cfg.shape, device,
                    result.tokens_per_s, result.prompt_tokens, result.prefill_s))
