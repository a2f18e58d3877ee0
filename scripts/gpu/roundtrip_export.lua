-- The luatune half of scripts/gpu/hf_roundtrip.py: what luatune writes and what it computes from it.
-- phase=export: tiny random models of every architecture, a pruned and two merged (LoRA, DoRA) Llamas,
-- LoRA and DoRA adapters in PEFT's format, each with luatune's logits for fixed ids (torch.save, read
-- by Python's torch.load), listed in WORK/manifest.json. phase=load: PEFT adapters written by peft in
-- Python (WORK/<adapter_root>/<name>) loaded onto the Llama base with lora.load, their logits saved.
-- Usage: runner scripts/gpu/roundtrip_export.lua work_dir=DIR [device=cuda] [phase=load adapters=lora,dora]
local cfg = config {
  work_dir = "out/hf_roundtrip",
  device = "cpu",             -- where the forwards run; everything is built and saved on the CPU
  phase = "export",           -- export | load
  adapter_root = "peft",      -- phase=load: adapters are WORK/<adapter_root>/<name>
  adapters = { "lora", "dora" },
  seed = 0,
}
assert(cfg.phase == "export" or cfg.phase == "load", "phase must be export or load, got " .. cfg.phase)
os.execute(("mkdir -p '%s/logits'"):format(cfg.work_dir))  -- torch.save creates no directories

-- The shapes of scripts/make_hf_fixtures.py: GQA (4 query heads, 2 KV), windows shorter than the
-- 12 ids, Gemma 2 softcaps, Qwen3 q/k norms, Qwen2 biases, Llama 3 RoPE with all three bands.
local COMMON = { vocab_size = 64, hidden_size = 32, intermediate_size = 48, num_hidden_layers = 2,
                 num_attention_heads = 4, num_key_value_heads = 2, max_position_embeddings = 64 }
local ARCHS = { "llama", "mistral", "qwen2", "qwen3", "gemma2" }
local EXTRA = {
  llama = { rope_theta = 500000.0, tie_word_embeddings = true,
            rope_scaling = { rope_type = "llama3", factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0,
                             original_max_position_embeddings = 16 } },
  mistral = { sliding_window = 5 },
  qwen2 = {},
  qwen3 = { head_dim = 8 },
  gemma2 = { head_dim = 16, query_pre_attn_scalar = 16, sliding_window = 4, attn_logit_softcapping = 50.0,
             final_logit_softcapping = 30.0 },
}

-- (2, 12) ids covering the vocabulary unevenly; Python reads them back from each logits file.
local rows = {}
for b = 0, 1 do
  rows[b + 1] = {}
  for t = 0, 11 do rows[b + 1][t + 1] = (7 * t + 13 * b + 3) % COMMON.vocab_size end
end
local IDS = torch.tensor(rows, { dtype = "int64" })

-- Tables iterate in no fixed order; draws from one generator must not depend on it.
local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  return keys
end

local function path(rel) return cfg.work_dir .. "/" .. rel end

-- Logits (B, T, vocab) float32 on the CPU; the forward runs on cfg.device and the model comes back.
local function logits(model, dtype)
  model:to { device = cfg.device, dtype = dtype or model:dtype() }
  local out = torch.no_grad(function() return model:forward(IDS:to(cfg.device)) end)
  out = out:to { dtype = "float32", device = "cpu" }
  model:to("cpu")
  return out
end

local function tiny(arch)
  local spec = { arch = arch, seed = cfg.seed, dtype = "float32" }
  for k, v in pairs(COMMON) do spec[k] = v end
  for k, v in pairs(EXTRA[arch]) do spec[k] = v end
  local model = models.init(spec)
  -- Norms start at 1 (Gemma: 0) and biases at 0: move them so a misread one shows in the logits.
  torch.manual_seed(cfg.seed + 1)
  torch.no_grad(function()
    local params = model:parameters()
    for _, name in ipairs(sorted_keys(params)) do
      local t = params[name]
      if t:dim() == 1 then t[":"] = t + torch.randn(t:shape()) * 0.1 end
    end
  end)
  return model
end

-- Give every adapter weight that starts at an identity (lora_B = 0, DoRA's magnitude = ||W||) a
-- value, so an adapter read wrongly cannot pass as the base model.
local function perturb(model, seed)
  torch.manual_seed(seed)
  torch.no_grad(function()
    local params = lora.parameters(model)
    for _, name in ipairs(sorted_keys(params)) do
      local t = params[name]
      if name:find("lora_B") then t[":"] = torch.randn(t:shape()) * 0.1 end
      if name:find("lora_magnitude_vector") then t[":"] = t * (torch.randn(t:shape()) * 0.1 + 1) end
    end
  end)
end

local manifest = { ids = IDS:tolist(), device = cfg.device, items = {} }
local function record(item)
  manifest.items[#manifest.items + 1] = item
  print(string.format("%-18s %-8s %s", item.name, item.kind, item.model or item.adapter))
end

-- ==== phase=load: PEFT's adapters onto the luatune-saved Llama ====================================
if cfg.phase == "load" then
  for _, name in ipairs(cfg.adapters) do
    local model = models.load(path("models/llama"))
    local adapter = cfg.adapter_root .. "/" .. name
    local read = lora.load(model, path(adapter))
    local file = "logits/" .. cfg.adapter_root .. "_" .. name .. ".pt"
    local out = logits(model)
    torch.save({ ids = IDS, logits_float32 = out }, path(file))
    local item = { name = name, kind = "load", adapter = adapter, logits = file, r = read.r, dora = read.dora }
    -- Our own adapters back (the CPU run without peft): they must give the logits they were saved with.
    if cfg.adapter_root == "adapters" then
      local saved = torch.load(path("logits/adapter_" .. name .. ".pt")).logits_float32
      item.max_abs_diff = (out - saved):abs():max():item()
    end
    record(item)
  end
  metrics.write_json(path("manifest_load_" .. cfg.adapter_root .. ".json"), manifest)
  return
end

-- ==== phase=export ================================================================================
-- 1. Every architecture: the saved model and its logits in float32 and bfloat16 (the same weights).
for _, arch in ipairs(ARCHS) do
  local model = tiny(arch)
  model:save(path("models/" .. arch))
  local f32 = logits(model)
  local bf16 = logits(model, "bfloat16")
  torch.save({ ids = IDS, logits_float32 = f32, logits_bfloat16 = bf16 }, path("logits/" .. arch .. ".pt"))
  record { name = arch, kind = "model", model = "models/" .. arch, logits = "logits/" .. arch .. ".pt" }
end

-- 2. Structured pruning changes every shape HF reads from config.json: 2 of 4 heads (one per KV
-- group), 24 of 48 MLP channels, 24 of 32 hidden channels (so hidden != heads * head_dim), 1 layer.
do
  local model = models.load(path("models/llama"))
  local keep_hidden, keep_mlp = {}, {}
  for i = 0, 23 do keep_hidden[#keep_hidden + 1] = (i * 5) % 32 end  -- a scattered subset
  for i = 0, 23 do keep_mlp[#keep_mlp + 1] = 2 * i + 1 end
  table.sort(keep_hidden)
  local shape = prune.apply(model, { layers = { 1 }, heads = { 0, 3 }, intermediate = keep_mlp,
                                     hidden = keep_hidden })
  print(string.format("pruned: %d layers, %d heads, %d kv heads, hidden %d, intermediate %d", shape.layers,
                      shape.heads, shape.kv_heads, shape.hidden, shape.intermediate))
  model:save(path("models/llama_pruned"))
  torch.save({ ids = IDS, logits_float32 = logits(model) }, path("logits/llama_pruned.pt"))
  record { name = "llama_pruned", kind = "model", model = "models/llama_pruned",
           logits = "logits/llama_pruned.pt" }
end

-- 3. Merged adapters: lora.merge, then model:save writes a plain HF model. The logits before the merge
-- (the adapted forward) go along, so Python checks the merge as well as the save.
for _, dora in ipairs { false, true } do
  local name = dora and "llama_merged_dora" or "llama_merged_lora"
  local model = models.load(path("models/llama"))
  lora.apply(model, { r = 4, alpha = 8, dropout = 0, targets = "all-linear", dora = dora, seed = 3 })
  perturb(model, 4)
  local adapted = logits(model)
  lora.merge(model)
  model:save(path("models/" .. name))
  torch.save({ ids = IDS, logits_float32 = logits(model), logits_adapted = adapted },
             path("logits/" .. name .. ".pt"))
  record { name = name, kind = "merged", model = "models/" .. name, logits = "logits/" .. name .. ".pt" }
end

-- 4. Adapters in PEFT's format on the saved Llama: LoRA on every linear (dropout on, as trained), and
-- DoRA with rsLoRA on three kinds in layer 1 only (layers_to_transform).
local ADAPTERS = {
  lora = { r = 4, alpha = 8, dropout = 0.05, targets = "all-linear", seed = 5 },
  dora = { r = 4, alpha = 16, dropout = 0, targets = { "q_proj", "v_proj", "down_proj" }, layers = { 1 },
           rslora = true, dora = true, seed = 6 },
}
for _, name in ipairs { "lora", "dora" } do
  local model = models.load(path("models/llama"))
  lora.apply(model, ADAPTERS[name])
  perturb(model, 7)
  lora.save(model, path("adapters/" .. name), { base_model = path("models/llama") })
  torch.save({ ids = IDS, logits_float32 = logits(model) }, path("logits/adapter_" .. name .. ".pt"))
  record { name = name, kind = "adapter", base = "models/llama", adapter = "adapters/" .. name,
           logits = "logits/adapter_" .. name .. ".pt" }
end

metrics.write_json(path("manifest.json"), manifest)
print("wrote " .. path("manifest.json"))
