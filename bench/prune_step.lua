-- bench/prune_step.lua: what pruning and distillation cost per training step, as ratios against a
-- plain full fine-tuning step measured in the same run on the same model and batch: the Sheared
-- masks phase (all four mask kinds, one sample per step, Lagrangian), distillation from a teacher
-- of the same size (forward KL, chunked logits), and a one-shot pass of each unstructured pruner.
-- Run: build/runner bench/prune_step.lua [steps=10]
local cfg = config { steps = 10, vocab_size = 32000, hidden_size = 128, layers = 4, rows = 8, length = 128 }
local function tiny(seed)
  return models.init { arch = "llama", vocab_size = cfg.vocab_size, hidden_size = cfg.hidden_size,
                       intermediate_size = 4 * cfg.hidden_size, num_hidden_layers = cfg.layers,
                       num_attention_heads = 8, num_key_value_heads = 4, seed = seed }
end
local function timeit(n, f)
  f()  -- warm up
  local t0 = metrics.clock()
  for _ = 1, n do f() end
  return (metrics.clock() - t0) / n
end
torch.manual_seed(0)
local b = train.batch { ids = torch.randint(0, cfg.vocab_size, { cfg.rows, cfg.length }, { dtype = "int64" }) }
local opts = { learning_rate = 1e-4, schedule = "constant" }

local plain_t = train.new(tiny(1), opts)
local plain = timeit(cfg.steps, function() plain_t:step(b) end)

local m = tiny(1)
local pruner = prune.sheared(m, { layers = 0.25, heads = 0.5, hidden = 0.25, intermediate = 0.5 })
local sheared_t = train.new(m, { learning_rate = 1e-4, schedule = "constant", hooks = { pruner } })
local sheared = timeit(cfg.steps, function() sheared_t:step(b) end)

local student, teacher = tiny(1), tiny(2)
local kd = distill.new(teacher, student, { loss = "forward_kl", alpha = 0.5 })
local kd_t = train.new(student, { learning_rate = 1e-4, schedule = "constant", hooks = { kd } })
local distilled = timeit(cfg.steps, function() kd_t:step(b) end)

print(("model: %d layers, hidden %d, vocab %d; batch %d x %d tokens"):format(cfg.layers, cfg.hidden_size,
                                                                          cfg.vocab_size, cfg.rows, cfg.length))
print(("full fine-tuning step            %.3f s  1.00x"):format(plain))
print(("Sheared masks step (4 kinds)     %.3f s  %.2fx"):format(sheared, sheared / plain))
print(("distillation step (same-size t.) %.3f s  %.2fx"):format(distilled, distilled / plain))
for _, method in ipairs { "magnitude", "wanda", "sparsegpt" } do
  local target = tiny(3)
  local t0 = metrics.clock()
  prune.unstructured(target, method ~= "magnitude" and { b } or nil, { method = method, sparsity = 0.5 })
  print(("%-9s 50%% one-shot, 1 batch     %.3f s  %.2fx a training step"):format(method, metrics.clock() - t0,
                                                                               (metrics.clock() - t0) / plain))
end
