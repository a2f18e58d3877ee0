-- tests/lua/test_api.lua: every function the Lua modules and classes expose at run time is declared
-- in types/luatune.d.lua (generated from bindings/api/*.yaml by `runner api --write`, which
-- `runner api --check` keeps current), and every function declared there exists; plus the option
-- type checks the declarations drive (bindings/lua_api.h).
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

local home = arg and arg[1] or os.getenv("LUATUNE_HOME") or "."
local path = home .. "/types/luatune.d.lua"
local file = assert(io.open(path, "r"), "cannot read " .. path .. " (set LUATUNE_HOME or pass the checkout)")
local text = file:read("*a")
file:close()

-- What the file declares: module tables ("lora = {}"), classes ("local Model = {}"), functions.
local declared_modules, declared_classes, declared = {}, {}, {}
for name in text:gmatch("\n([%w_]+) = {}\n") do declared_modules[name] = true end
for name in text:gmatch("\nlocal ([%w_]+) = {}\n") do declared_classes[name] = true end
for owner, sep, name in text:gmatch("\nfunction ([%w_]+)([.:])([%w_]+)%(") do
  declared[owner .. sep .. name] = true
end

-- The luatune modules loaded now: globals that are package.loaded tables of C functions, beyond
-- Lua's and LuaJIT's own libraries.
local stdlib = { _G = true, package = true, coroutine = true, table = true, io = true, os = true, string = true,
                 math = true, debug = true, bit = true, jit = true, ffi = true }
local function runtime_modules()
  local out = {}
  for name, value in pairs(package.loaded) do
    if not stdlib[name] and not name:find(".", 1, true) and type(value) == "table" and rawget(_G, name) == value then
      local c_functions = 0
      for _, f in pairs(value) do
        if type(f) == "function" and debug.getinfo(f, "S").what == "C" then c_functions = c_functions + 1 end
      end
      if c_functions > 0 then out[#out + 1] = name end
    end
  end
  table.sort(out)
  return out
end

-- The classes registered now: the registry's "luatune.<Class>" metatables and their methods.
local function runtime_classes()
  local out = {}
  for key, mt in pairs(debug.getregistry()) do
    if type(key) == "string" and key:match("^luatune%.") and type(mt) == "table" and type(mt.methods) == "table" then
      out[key:sub(#"luatune." + 1)] = mt.methods
    end
  end
  return out
end

test("every module the runner opens is declared", function()
  local mods = runtime_modules()
  ok(#mods >= 16, "expected the 16 luatune modules, found " .. #mods .. ": " .. table.concat(mods, ", "))
  for _, name in ipairs(mods) do
    ok(declared_modules[name], "module '" .. name .. "' is not declared in " .. path .. "; run `runner api --write`")
  end
  for name in pairs(declared_modules) do
    ok(type(rawget(_G, name)) == "table", path .. " declares module '" .. name .. "', which the runner does not open")
  end
end)

test("every module function is declared", function()
  local missing = {}
  for _, name in ipairs(runtime_modules()) do
    for key, value in pairs(_G[name]) do
      if type(value) == "function" and not declared[name .. "." .. key] then missing[#missing + 1] = name .. "." .. key end
    end
  end
  table.sort(missing)
  eq(missing, {})
end)

test("every class method is declared", function()
  local classes, missing = runtime_classes(), {}
  ok(classes.Model and classes.Tensor and classes.Trainer, "expected the Model, Tensor and Trainer classes")
  for class, methods in pairs(classes) do
    ok(declared_classes[class], "class '" .. class .. "' is not declared in " .. path)
    for key, value in pairs(methods) do
      local full = class .. ":" .. key
      if type(value) == "function" and not declared[full] then missing[#missing + 1] = full end
    end
  end
  table.sort(missing)
  eq(missing, {})
end)

test("every declared function exists", function()
  local classes, stale = runtime_classes(), {}
  for full in pairs(declared) do
    local owner, sep, name = full:match("^([%w_]+)([.:])([%w_]+)$")
    local found
    if sep == "." then
      found = type(rawget(_G, owner)) == "table" and type(_G[owner][name]) == "function"
    else
      found = classes[owner] ~= nil and type(classes[owner][name]) == "function"
    end
    if not found then stale[#stale + 1] = full end
  end
  table.sort(stale)
  eq(stale, {})
end)

test("the file is Lua that loads", function()
  ok(loadstring(text, "=" .. path))
end)

test("option tables are declared as classes with their keys", function()
  ok(text:find("---@class LoraApplyOpts\n---@field r? integer ", 1, true), "LoraApplyOpts with r")
  ok(text:find("---@param opts? LoraApplyOpts\n", 1, true), "lora.apply's opts parameter")
  ok(text:find("---@field tokenizer Tokenizer ", 1, true), "data's required tokenizer")
end)

test("declared option types are checked", function()
  raises(function() train.batch { ids = 5 } end, "bad argument #1 to 'batch' (option 'ids' expects a Tensor, got number)")
  raises(function() models.init { arch = "llama", tokenizer = "dir" } end,
         "(option 'tokenizer' expects a Tokenizer, got string)")
  raises(function() models.init { arch = "llama", tokenizer = torch.zeros(1) } end,
         "(option 'tokenizer' expects a Tokenizer, got Tensor)")
  raises(function() hw.monitor { device = "0" } end, "(option 'device' expects an integer, got string)")
  raises(function() hw.plan { model = "llama3.1-8b", shard = true } end,
         "(option 'shard' expects a string or an integer, got boolean)")
  raises(function() torch.zeros(2, { requires_grad = "yes" }) end, "option 'requires_grad' expects a boolean, got string")
  raises(function() hw.monitor { intervall = 1 } end, "unknown option 'intervall' (did you mean 'interval'?); valid options: interval, device")
end)

h.run()
