-- tests/lua/test_hw.lua: the `hw` module (bindings/hw.cpp): catalog, params, plan, plan_text,
-- profile, project, monitor (the no-NVML path on CPU), run_summary, read_json, report's arguments.
-- Run: build/runner tests/lua/test_hw.lua
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

local tmp = os.getenv("TMPDIR") or "/tmp"
local function tmpfile(name) return string.format("%s/luatune_lua_hw_%s_%d", tmp, name, os.time()) end

test("catalog lists the GPUs with peaks and dated prices; a user file replaces it", function()
  local cat = hw.catalog()
  eq(#cat, 12)
  eq(cat[1].name, "H100 SXM")
  eq(cat[1].bf16_tflops, 989)
  ok(cat[1].price_date ~= "" and cat[1].price_source ~= "")
  local path = tmpfile("catalog") .. ".json"
  local f = assert(io.open(path, "w"))
  f:write('{"gpus": [{"name": "Mine", "memory_gb": 24, "bandwidth_gbs": 900, "bf16_tflops": 100, '
          .. '"fp16_tflops": 100, "price_per_hour": 0.5}]}')
  f:close()
  local mine = hw.catalog(path)
  eq(#mine, 1)
  eq(mine[1].name, "Mine")
  raises(function() hw.catalog("/nonexistent.json") end, "hw.catalog: no catalog file '/nonexistent.json'")
end)

test("params counts a preset and a config table exactly", function()
  eq(hw.params("llama3.1-8b").total, 8030261248)
  eq(hw.params("mistral-7b").total, 7241732096)
  eq(hw.params("gemma2-9b").total, 9241705984)
  local tiny = hw.params { arch = "llama", vocab_size = 100, hidden_size = 8, intermediate_size = 16,
                           num_hidden_layers = 1, num_attention_heads = 2, num_key_value_heads = 1,
                           tie_word_embeddings = true }
  -- embed 800 + q 64 + k 32 + v 32 + o 64 + mlp 3*128 + norms 2*8 + final 8
  eq(tiny.total, 800 + 64 + 32 + 32 + 64 + 384 + 16 + 8)
end)

test("plan: components in GiB, one row per GPU, advice where it does not fit", function()
  local p = hw.plan { model = "llama3.1-8b", method = "full", max_length = 2048, batch_size = 1 }
  ok(p.total_gb > 120, "full 8B: " .. p.total_gb)
  eq(#p.gpus, 12)
  for _, g in ipairs(p.gpus) do
    if g.gpu == "H100 SXM" then
      eq(g.fits, false)
      eq(g.max_micro_batch, 0)
      ok(g.advice[1]:find("add optimizer_offload=cpu (", 1, true), g.advice[1])  -- one GPU: offload, then LoRA
      ok(g.advice[2]:find("use LoRA", 1, true), g.advice[2])
    end
  end
  local q = hw.plan { model = "llama3.1-8b", method = "qlora", gradient_checkpointing = true, gpu = "T4" }
  eq(#q.gpus, 1)
  eq(q.gpus[1].fits, true)
  ok(q.total_gb < 16)
  ok(hw.plan_text(q):find("T4", 1, true))
  raises(function() hw.plan { model = "llama3.1-8b", mehtod = "lora" } end, "unknown option 'mehtod'")
  raises(function() hw.plan { model = "llama3.1-8b", method = "dora" } end, "hw.plan: unknown method 'dora'")
end)

test("plan: the recipes' names and a recipe's lora table; the old names still work", function()
  local a = hw.plan { model = "llama3.1-8b", method = "lora", batch_size = 2, max_length = 512,
                      gradient_checkpointing = true, lora = { r = 8, alpha = 16, dropout = 0, targets = { "q_proj" } } }
  local b = hw.plan { model = "llama3.1-8b", method = "lora", micro_batch = 2, seq_len = 512, checkpointing = true,
                      lora_r = 8, lora_dropout = 0, lora_targets = { "q_proj" } }
  eq({ a.batch_size, a.max_length, a.gradient_checkpointing, a.lora_r, a.trainable }, { 2, 512, true, 8, 8 * (4096 + 4096) * 32 })
  eq(b.total_gb, a.total_gb)
  eq(b.trainable, a.trainable)
  raises(function() hw.plan { model = "llama3.1-8b", lora = { rank = 8 } } end, "unknown option 'rank'")
  raises(function() hw.plan { model = "llama3.1-8b", lora = { r = 4 }, lora_r = 8 } end,
         "options 'lora_r' and 'lora.r' are one option")
end)

test("plan: max_steps and gradient_accumulation_steps give each GPU the run's time and cost", function()
  local o = { model = "llama3.1-8b", method = "lora", batch_size = 4, gradient_checkpointing = true, gpu = "H100 SXM" }
  local memory_only = hw.plan(o)
  o.max_steps, o.gradient_accumulation_steps = 1000, 8
  local run = hw.plan(o)
  eq({ run.max_steps, run.gradient_accumulation_steps, run.run_tokens }, { 1000, 8, 1000 * 8 * 4 * 2048 })
  ok(run.gpus[1].run_hours > 0 and run.gpus[1].cost_usd > 0, "an H100 run has hours and a cost")
  eq(memory_only.run_tokens, 0)
  eq(memory_only.gpus[1].run_hours, nil)
  eq(run.total_gb, memory_only.total_gb)  -- memory is per micro-batch
  local old = hw.plan { model = "llama3.1-8b", method = "lora", batch_size = 4, gradient_checkpointing = true,
                        gpu = "H100 SXM", max_steps = 1000, grad_accum = 8 }
  eq(old.run_tokens, run.run_tokens)
end)

test("plan from a recipe's config uses the recipes' keys", function()
  local p = hw.plan { recipe_config = { base_model = "/none", batch_size = 2, max_length = 512,
                                        gradient_checkpointing = true, lora = { r = 8, targets = { "q_proj" } } },
                      recipe = "lora_finetune", model_preset = "mistral-7b" }
  eq(p.method, "lora")
  eq(p.batch_size, 2)
  eq(p.max_length, 512)
  eq(p.trainable, 8 * (4096 + 4096) * 32)
end)

test("plan: shard, 8-bit moments and offload change the terms by the formula; host RAM reported", function()
  local N = 8030261248
  local gib = 1024 ^ 3
  local base = hw.plan { model = "llama3.1-8b", gpus = 8 }
  local z3 = hw.plan { model = "llama3.1-8b", nproc = 8, shard = "full" }
  eq(z3.shard, "full")
  eq(z3.n_gpus, 8)
  -- 8 ranks split both groups exactly: masters and moments are an eighth of the replicated ones
  ok(math.abs(z3.components.master_weights - base.components.master_weights / 8) < 1e-9)
  ok(math.abs(z3.components.optimizer_states - base.components.optimizer_states / 8) < 1e-9)
  ok(math.abs(z3.components.optimizer_states * gib - N) < 1)  -- 8 N / 8 bytes
  ok(z3.components.gather_buffers > 0 and base.components.gather_buffers == 0)
  ok(z3.notes.weights:find("decoder layers sharded 1/8", 1, true), z3.notes.weights)
  ok(hw.plan_text(z3):find("shard=full: ZeRO-3", 1, true))
  ok(z3.memory_formula:find("+ gather buffers", 1, true), z3.memory_formula)
  ok(z3.memory_formula:find("shard=full (ZeRO-3) over 8 GPUs", 1, true), z3.memory_formula)
  eq(hw.plan { model = "llama3.1-8b", nproc = 8, shard = 3 }.components.weights, z3.components.weights)
  local q = hw.plan { model = "llama3.1-8b", optimizer = "adamw8bit" }
  ok(math.abs(q.components.optimizer_states * gib - 2.03125 * N) < 1, q.components.optimizer_states)
  local off = hw.plan { model = "llama3.1-8b", nproc = 8, shard = "full", optimizer_offload = "cpu" }
  eq(off.components.optimizer_states, 0)
  eq(off.host_ram.ranks_per_node, 8)
  ok(math.abs(off.host_ram.per_node_gb * gib - 16 * N) < 8, off.host_ram.per_node_gb)  -- (4 + 8 + 4) N / 8 x 8
  eq(base.host_ram.per_node_gb, 0)
  raises(function() hw.plan { model = "llama3.1-8b", gpus = 2, nproc = 2 } end, "give gpus= or nproc=")
  raises(function() hw.plan { model = "llama3.1-8b", shard = "zero3" } end, "hw.plan: unknown shard 'zero3'")
  raises(function() hw.plan { model = "llama3.1-8b", optimizer_offload = "disk" } end,
         'optimizer_offload must be "none" or "cpu"')
end)

test("plan from a recipe's config reads shard, optimizer and optimizer_offload; plan keys win", function()
  local p = hw.plan { recipe_config = { base_model = "/none", batch_size = 4, max_length = 128,
                                        gradient_checkpointing = true, shard = "none", optimizer = "adamw",
                                        optimizer_offload = "none" },
                      recipe = "llama31_sheared", model_preset = "llama3.1-8b", nproc = 2, shard = "FULL_SHARD",
                      gpu = "A100 80GB" }
  eq(p.shard, "full")
  eq(p.gpus[1].fits, true)
  local c = hw.plan { recipe_config = { base_model = "/none", shard = "gradients", optimizer = "adamw8bit" },
                      recipe = "full_finetune", model_preset = "llama3.1-8b", gpus = 4 }
  eq(c.shard, "gradients")
  eq(c.optimizer, "adamw8bit")
  eq(c.optimizer_offload, "none")
end)

test("profile: MFU on the hardware.md check, cost, and no MFU on CPU", function()
  local p = hw.profile { model = "llama3.1-8b", tokens = 5762, seconds = 1, seq_len = 8192, steps = 1,
                         device = "NVIDIA H100 80GB HBM3" }
  eq(p.gpu, "H100 SXM")
  ok(math.abs(p.mfu - 0.337) < 0.0005, p.mfu)
  ok(math.abs(p.cost_usd - 3.99 / 3600) < 1e-12)
  ok(p.flops_formula:find("57.91 GFLOP/token", 1, true), p.flops_formula)
  local c = hw.profile { model = "llama3.1-8b", tokens = 100, seconds = 10, seq_len = 128 }
  eq(c.mfu, nil)
  eq(c.tokens_per_s, 10)
end)

test("project: measured on CPU -> every row projected at the default MFU; a plan marks rows that do not fit", function()
  local prof = hw.profile { model = "llama3.1-8b", tokens = 1000, seconds = 10, seq_len = 2048, method = "lora",
                            lora_params = 41943040 }
  local plan = hw.plan { model = "llama3.1-8b", method = "lora", gradient_checkpointing = true }
  local rows = hw.project(prof, { plan = plan, tokens = 1e8 })
  eq(#rows, 12)
  for _, r in ipairs(rows) do
    if r.fits then
      eq(r.kind, "projected")
      ok(r.note:find("assumes MFU 35 %", 1, true), r.note)
      ok(r.hours > 0 and r.cost_usd > 0)
    else
      eq(r.kind, "planned")
      eq(r.hours, nil)
    end
  end
  local planned = hw.project(nil, { model = "llama3.1-8b", plan = plan })
  eq(planned[1].kind, "planned")
  ok(hw.projection_rule():find("MFU", 1, true))
end)

test("monitor without NVML: stop() gives no samples and says why", function()
  local d = hw.probe()
  ok(d.cpu_cores > 0)
  if d.nvml then return end  -- a GPU machine: the no-NVML path is not reachable
  eq(d.kind, "cpu")
  local m = hw.monitor { interval = 0.01 }
  local s = m:stop()
  eq(s.samples, 0)
  ok(s.note:find("no NVML", 1, true), s.note)
  eq(m:stop().samples, 0)  -- idempotent
  raises(function() hw.monitor { intervall = 1 } end, "unknown option 'intervall'")
end)

test("run_summary reads a metrics.jsonl, leaving the first step out of the rate", function()
  local path = tmpfile("metrics") .. ".jsonl"
  local f = assert(io.open(path, "w"))
  f:write('{"config":{"base_model":"x","steps":3}}\n')
  f:write('{"step":1,"loss":3.0,"tokens":100,"step_time":5.0}\n')
  f:write('{"step":2,"loss":2.5,"tokens":100,"step_time":1.0}\n')
  f:write('{"step":3,"loss":2.0,"tokens":100,"step_time":1.0}\n')
  f:write('{"step":3,"eval_loss":2.2}\n')
  f:close()
  local s = hw.run_summary(path)
  eq(s.steps, 3)
  eq(s.timed_steps, 2)
  eq(s.step_time_s, 1)
  eq(s.tokens, 200)
  eq(s.seconds, 2)
  eq(s.tokens_per_s, 100)
  eq(s.loss, 2.0)
  eq(s.eval_loss, 2.2)
  eq(s.config.base_model, "x")
end)

test("read_json and report's arguments", function()
  local path = tmpfile("doc") .. ".json"
  metrics.write_json(path, { a = 1, b = { "x", "y" } })
  local j = hw.read_json(path)
  eq(j.a, 1)
  eq(j.b, { "x", "y" })
  raises(function() hw.report({}, {}) end, "hw.report: give markdown= and/or html= paths to write")
  raises(function() hw.report({}, { pdf = "x" }) end, "unknown option 'pdf'")
  ok(hw.runner_path():find("runner", 1, true))
end)

-- Tables reach the host as JSON through one converter (lt_to_json, bindings/lua_util.h); hw.report
-- converts its doc before it checks for output paths, so the second error means the doc converted.
test("tables as JSON: NaN and infinities, mixed keys, holes and functions fail naming the path", function()
  local converted = "hw.report: give markdown= and/or html= paths to write"
  raises(function() hw.report({ rows = { { mfu = 0 / 0 } } }, {}) end,
         "hw.report: doc.rows[1].mfu is nan; JSON has no NaN or infinity (leave the key out instead)")
  raises(function() hw.report({ x = 1 / 0 }, {}) end, "hw.report: doc.x is inf; JSON has no NaN or infinity")
  raises(function() hw.report({ x = -1 / 0 }, {}) end, "hw.report: doc.x is -inf")
  raises(function() hw.report({ rows = { 1, 2, x = 3 } }, {}) end,
         "hw.report: doc.rows mixes list items and named keys, or is a list with holes; JSON takes a list "
         .. "(keys 1..n) or a table of named keys")
  raises(function() hw.report({ rows = { [1] = 1, [3] = 3 } }, {}) end, "hw.report: doc.rows mixes list items")
  raises(function() hw.report({ [true] = 1 }, {}) end, "hw.report: doc has a key that is not a string")
  raises(function() hw.report({ f = print }, {}) end,
         "hw.report: doc.f is a function; JSON holds nil, booleans, numbers, strings and tables of them")
  raises(function() hw.report({ rows = {}, notes = {}, x = { y = {} } }, {}) end, converted)  -- empty tables are fine
end)

test("tables as JSON: 128 levels like JSON files, a table that contains itself fails naming its path", function()
  local deep = {}
  for _ = 1, 100 do deep = { deep } end  -- 101 levels: the old hw limit was 32
  raises(function() hw.report({ deep = deep }, {}) end, "hw.report: give markdown= and/or html= paths to write")
  local t = {}
  t.again = t
  raises(function() hw.report(t, {}) end, "hw.report: doc.again.again.again")
  raises(function() hw.report(t, {}) end, "nests tables deeper than 128 levels")
end)

h.run()
