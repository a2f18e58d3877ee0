-- tests/lua/test_metrics.lua: the `metrics` module (bindings/metrics.cpp): metrics.open, log:write,
-- log:summary, log:close, the JSONL file it leaves, and its errors.
-- Run: build/runner tests/lua/test_metrics.lua
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

local tmp = os.getenv("TMPDIR") or "/tmp"
local function tmpfile(name) return string.format("%s/luatune_lua_metrics_%s_%d.jsonl", tmp, name, os.time()) end

local function lines_of(path)
  local out = {}
  for line in io.lines(path) do out[#out + 1] = line end
  return out
end

test("write appends one JSON line per call, config first, keys by name, whole numbers as integers", function()
  local path = tmpfile("write")
  local log = metrics.open { console = false, jsonl = path, config = { lr = 2e-4, lora = { r = 8 } }, report = false }
  eq(tostring(log), "Metrics(1 sink)")
  log:write(1, { lr = 2e-4, tokens_per_s = 1000, loss = 2.5, grad_norm = 1, zz = 3 })
  log:write(2, { loss = 2.25, note = "warmup done" })
  -- Flushed per write: the file is complete before close.
  local lines = lines_of(path)
  eq(#lines, 3)
  eq(lines[1], '{"config":{"lora":{"r":8},"lr":0.0002}}')
  ok(lines[2]:find('^{"step":1,"time":[%d.]+,"elapsed":[%d.e-]+,"grad_norm":1,"loss":2.5,"lr":0.0002,'
                   .. '"tokens_per_s":1000,"zz":3}$'), lines[2])
  ok(lines[3]:find('"step":2,.*"loss":2.25,"note":"warmup done"}$'), lines[3])
  log:summary { eval_loss = 1.5 }
  log:close()
  eq(tostring(log), "Metrics(closed)")
  eq(lines_of(path)[4], '{"summary":{"eval_loss":1.5}}')
  os.remove(path)
end)

test("a table's __order (what trainer:step returns carries one) decides the order; other keys follow by name", function()
  local path = tmpfile("order")
  local log = metrics.open { console = false, jsonl = path, report = false }
  local s = setmetatable({ tokens = 480, loss = 2.5, lr = 1e-4, extra = 7 }, { __order = { "loss", "lr", "tokens" } })
  log:write(1, s)
  log:close()
  local line = lines_of(path)[1]
  ok(line:find('"elapsed":[%d.e-]+,"loss":2.5,"lr":0.0001,"tokens":480,"extra":7}$'), line)
  os.remove(path)
end)

test("resume appends to the same file; a fresh run starts it again", function()
  local path = tmpfile("resume")
  local log = metrics.open { console = false, jsonl = path, config = { steps = 10 }, report = false }
  log:write(1, { loss = 1 })
  log:close()
  log = metrics.open { console = false, jsonl = path, config = { steps = 10 }, resume = true, report = false }
  log:write(2, { loss = 0.5 })
  log:close()
  local lines = lines_of(path)
  eq(#lines, 3)
  ok(lines[3]:find('"step":2,'), lines[3])
  log = metrics.open { console = false, jsonl = path, report = false }
  log:write(1, { loss = 3 })
  log:release()  -- closes too
  lines = lines_of(path)
  eq(#lines, 1)
  ok(lines[1]:find('"loss":3}'), lines[1])
  os.remove(path)
end)

test("the console prints plain lines when stdout is not a terminal", function()
  local log = metrics.open { total_steps = 4, progress_seconds = 0 }
  for step = 1, 4 do log:write(step, { loss = 1 / step, lr = 1e-4 }) end
  log:write(4, { eval_loss = 0.5 })
  print("print between writes goes through metrics.print")
  log:summary { loss = 0.25 }
  log:close()
  eq(print, metrics.print)
end)

test("errors name the key, the option or the state", function()
  local path = tmpfile("errors")
  local log = metrics.open { console = false, jsonl = path, report = false }
  raises(function() log:write(1, { loss = "2.5" }) end, "log:write: value 'loss' must be a number, got string")
  raises(function() log:write(1, { loss = torch.tensor { 1 } }) end,
         "value 'loss' must be a number, got userdata (for a one-element Tensor pass t:item())")
  raises(function() log:write(1, { note = 3 }) end, "log:write: note must be a string, got number")
  raises(function() log:write(1, { 1, 2 }) end, "log:write: keys must be names, got a number key")
  raises(function() log:write(1.5, {}) end, "(integer expected, got 1.5)")
  raises(function() log:summary { acc = true } end, "log:summary: value 'acc' must be a number, got boolean")
  log:close()
  raises(function() log:write(3, { loss = 1 }) end, "metrics: write after close")
  os.remove(path)
  raises(function() metrics.open { jsonl = path, progress_secs = 10 } end,
         "unknown option 'progress_secs' (did you mean 'progress_seconds'?)")
  raises(function() metrics.open { every = 10 } end, "unknown option 'every'")  -- removed: progress_seconds
  metrics.open { console = false, wandb = { project = "proj", mode = "disabled" } }:close()  -- disabled: no sink
  metrics.open { console = false, wandb = "" }:close()  -- empty: accepted, nothing to do
  assert(metrics.open { console = false }:stopped() == false)
  raises(function() metrics.open { wandb = 3 } end, "metrics.open: wandb must be a project name or a table of W&B settings, got number")
  raises(function() metrics.open { wandb = { project = "p", tags = { 1 } } } end, "metrics.open: wandb.tags[1] must be a string")
  raises(function() metrics.open { wandb = { projet = "p" } } end, "projet")
  raises(function() metrics.open { console = false, wandb = { project = "p", mode = "sometimes" } } end,
         "wandb: WANDB_MODE must be online, offline or disabled, got 'sometimes'")
  raises(function() metrics.open { progress_seconds = -1 } end, "metrics.open: progress_seconds must be 0 or more, got -1")
  raises(function() metrics.open { report = "yes" } end, "report")
  raises(function() metrics.open { config = 3 } end, "metrics.open: config must be the config table")
end)

test("closing a log writes report.html and report.md beside its metrics.jsonl", function()
  local dir = string.format("%s/luatune_lua_metrics_report_%d", tmp, os.time())
  local log = metrics.open { console = false, jsonl = dir .. "/metrics.jsonl", config = { max_steps = 3 } }
  for step = 1, 3 do log:write(step, { loss = 3 / step, lr = 1e-4 }) end
  log:write(3, { eval_loss = 1.5 })
  log:close()
  local f = assert(io.open(dir .. "/report.html"))
  local html = f:read("*a")
  f:close()
  ok(html:find('<polyline class="series" data%-name="loss" points="[%d.]+,[%d.]+ [%d.]+,[%d.]+ [%d.]+,[%d.]+"'), html)
  ok(html:find("max_steps", 1, true), "the config is in the report")
  f = assert(io.open(dir .. "/report.md"))
  ok(f:read("*a"):find("| eval_loss | 1.5000 | step 3 |", 1, true))
  f:close()
  for _, name in ipairs { "report.html", "report.md", "metrics.jsonl" } do os.remove(dir .. "/" .. name) end
  os.remove(dir)
end)

test("a config's device is recorded as what it resolved to, with the device's name, and the report shows both", function()
  local dir = string.format("%s/luatune_lua_metrics_hardware_%d", tmp, os.time())
  local want = tostring(torch.device("auto"))  -- "cpu" here, "cuda:0" on a GPU
  local log = metrics.open { console = false, jsonl = dir .. "/metrics.jsonl", config = { device = "auto", max_steps = 1 } }
  log:write(1, { loss = 1 })
  log:close()
  local first = lines_of(dir .. "/metrics.jsonl")[1]
  ok(first:find('^{"config":{"device":"auto","max_steps":1},"hardware":{"device":"' .. want .. '","name":"[^"]+"}}$'), first)
  local f = assert(io.open(dir .. "/report.md"))
  local md = f:read("*a")
  f:close()
  ok(md:find("| device | " .. want .. " (config: auto) |", 1, true), md)
  ok(md:find("| " .. (want == "cpu" and "CPU" or "GPU") .. " | ", 1, true), md)
  ok(not md:find("device (config)", 1, true), md)
  for _, name in ipairs { "report.html", "report.md", "metrics.jsonl" } do os.remove(dir .. "/" .. name) end
  os.remove(dir)
end)

test("write_json writes a whole file atomically", function()
  local dir = string.format("%s/luatune_lua_metrics_json_%d", os.getenv("TMPDIR") or "/tmp", os.time())
  local path = dir .. "/sub/summary.json"
  metrics.write_json(path, { ppl = { before = 3.5, after = 4 }, shape = { 1, 2, 3 }, name = "x", ok = true })
  local f = assert(io.open(path))
  local text = f:read("*a")
  f:close()
  ok(text:find('"before": 3.5', 1, true) or text:find('"before":3.5', 1, true), text)
  ok(text:find('"name"', 1, true) and text:find("%[%s*1,%s*2,%s*3%s*%]"), text)
  raises(function() metrics.write_json(path, { f = print }) end, "metrics.write_json: value")
  local t0 = metrics.clock()
  local x = 0
  for i = 1, 1e6 do x = x + i end
  local dt = metrics.clock() - t0
  ok(dt > 0 and dt < 10, "clock difference " .. dt)
  os.execute("rm -rf " .. dir)
end)

test("mkdir makes nested directories, again is fine, a file in the way fails in one line", function()
  local dir = string.format("%s/luatune_lua_metrics_mkdir_%d", os.getenv("TMPDIR") or "/tmp", os.time())
  metrics.mkdir(dir .. "/a b/c'd/e")  -- what a shell would need quoted
  local f = assert(io.open(dir .. "/a b/c'd/e/x.txt", "w"))
  f:close()
  metrics.mkdir(dir .. "/a b/c'd/e")
  f = assert(io.open(dir .. "/file", "w"))
  f:close()
  raises(function() metrics.mkdir(dir .. "/file/sub") end,
         "metrics.mkdir: cannot create directory '" .. dir .. "/file/sub': '" .. dir .. "/file' is a file, not a directory")
  local _, err = pcall(metrics.mkdir, dir .. "/file/sub")
  ok(not tostring(err):find("\n"), "one line: " .. tostring(err))
  raises(function() metrics.mkdir() end, "bad argument #1 to 'mkdir'")
  os.execute("rm -rf '" .. dir .. "'")
end)

h.run()
