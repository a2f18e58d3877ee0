-- tests/lua/test_torch.lua: the `torch` module (bindings/torch.cpp) on the CPU.
-- Run: build/runner tests/lua/test_torch.lua (CUDA behaviour lives in test_torch_cuda.lua).
-- Index rule under test (host/core/tensor_ops.h): tensor positions are 0-based as in PyTorch,
-- negative from the end, slices half-open "start:stop:step"; Lua tables we get back (shape,
-- tolist, chunk/split lists) are ordinary 1-based Lua lists.
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

-- ============================================================================================
-- Coverage: before any test runs, every function of the module table and of the tensor methods
-- table is replaced by a recording wrapper. The wrapper is a tail call, so it is transparent:
-- every argument (trailing nils included, as `...` keeps them) and every result pass through,
-- and LuaJIT drops the wrapper's frame, so error positions still name the test's calling line.
-- The last test checks that every name was called at least once (through either table).

local methods = getmetatable(torch.zeros(1)).methods
local called = {}
local covered_names = {}  -- every function name of the module table and the methods table

local function wrap_all(tbl)
  local names = {}
  for name, f in pairs(tbl) do
    if type(f) == "function" then names[#names + 1] = name end
  end
  for _, name in ipairs(names) do
    local f = tbl[name]
    covered_names[name] = true
    tbl[name] = function(...)
      called[name] = true
      return f(...)
    end
  end
end
wrap_all(torch)
wrap_all(methods)

-- ============================================================================================
-- Helpers

local TOL = 1e-5  -- float32 results against float64 hand values

local function T(values, dtype) return torch.tensor(values, dtype and { dtype = dtype } or nil) end
local function I(values) return torch.tensor(values, { dtype = "int64" }) end

local function sigmoid(x) return 1 / (1 + math.exp(-x)) end
local function lse(list)
  local s = 0
  for _, v in ipairs(list) do s = s + math.exp(v) end
  return math.log(s)
end
local function line_here() return debug.getinfo(2, "l").currentline end

-- ============================================================================================
-- Creation

test("tensor: nested tables give shape, values, float32 by default", function()
  local t = torch.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
  eq(t:shape(), { 2, 3 })
  eq(t:dtype(), "float32")
  eq(t:tolist(), { { 1, 2, 3 }, { 4, 5, 6 } })
  local t3 = torch.tensor({ { { 1 }, { 2 } }, { { 3 }, { 4 } } })
  eq(t3:shape(), { 2, 2, 1 })
  eq(t3:tolist(), { { { 1 }, { 2 } }, { { 3 }, { 4 } } })
  local s = torch.tensor(2.5)
  eq(s:dim(), 0)
  eq(s:shape(), {})
  eq(s:item(), 2.5)
  local e = torch.tensor({})
  eq(e:shape(), { 0 })
  eq(e:numel(), 0)
  eq(torch.tensor({ {}, {} }):shape(), { 2, 0 })
end)

test("tensor: booleans make bool tensors; dtype and requires_grad options", function()
  local b = torch.tensor({ true, false, true })
  eq(b:dtype(), "bool")
  eq(b:tolist(), { true, false, true })
  local i = torch.tensor({ 1.7, -2.7, 3 }, { dtype = "int64" })
  eq(i:dtype(), "int64")
  eq(i:tolist(), { 1, -2, 3 })  -- truncated toward zero, as a cast does
  eq(torch.tensor({ 0.1 }, { dtype = "float64" }):item(), 0.1)  -- exact in float64
  local f32 = torch.tensor({ 0.1 }):item()
  ok(f32 ~= 0.1 and math.abs(f32 - 0.1) < 1e-8, "0.1 rounds to float32: " .. f32)
  local g = torch.tensor({ 1, 2 }, { requires_grad = true })
  ok(g:requires_grad(), "requires_grad option")
  ok(not torch.tensor({ 1, 2 }):requires_grad(), "no requires_grad by default")
end)

test("zeros, ones: sizes as numbers or a list, options", function()
  local z = torch.zeros(2, 3)
  eq(z:shape(), { 2, 3 })
  eq(z:dtype(), "float32")
  eq(z:tolist(), { { 0, 0, 0 }, { 0, 0, 0 } })
  local zi = torch.zeros({ 3 }, { dtype = "int32" })
  eq(zi:dtype(), "int32")
  eq(zi:tolist(), { 0, 0, 0 })
  eq(torch.zeros({}):dim(), 0)
  local o = torch.ones(2, 2, { dtype = "float64", requires_grad = true })
  eq(o:dtype(), "float64")
  eq(o:tolist(), { { 1, 1 }, { 1, 1 } })
  ok(o:requires_grad(), "ones requires_grad")
  eq(torch.ones({ 1, 2 }):tolist(), { { 1, 1 } })
end)

test("full: value, dtype from the value or the options", function()
  local f = torch.full({ 2, 2 }, 7)
  eq(f:dtype(), "float32")
  eq(f:tolist(), { { 7, 7 }, { 7, 7 } })
  eq(torch.full({ 3 }, -1.5):tolist(), { -1.5, -1.5, -1.5 })
  local b = torch.full({ 2 }, true)
  eq(b:dtype(), "bool")
  eq(b:tolist(), { true, true })
  local i = torch.full({ 2 }, 4, { dtype = "int64" })
  eq(i:dtype(), "int64")
  eq(i:tolist(), { 4, 4 })
end)

test("rand, randn: shape, dtype, distribution", function()
  torch.manual_seed(1)
  local r = torch.rand(2000)
  eq(r:shape(), { 2000 })
  eq(r:dtype(), "float32")
  ok(r:min():item() >= 0 and r:max():item() < 1, "rand in [0, 1)")
  ok(math.abs(r:mean():item() - 0.5) < 0.05, "rand mean near 0.5")
  eq(torch.rand(2, 3, { dtype = "float64" }):dtype(), "float64")
  eq(torch.rand({ 4, 1 }):shape(), { 4, 1 })
  local n = torch.randn(4000)
  eq(n:dtype(), "float32")
  ok(math.abs(n:mean():item()) < 0.1, "randn mean near 0: " .. n:mean():item())
  ok(math.abs(n:std():item() - 1) < 0.1, "randn std near 1: " .. n:std():item())
  eq(torch.randn(3, 2):shape(), { 3, 2 })
  ok(torch.randn(2, { requires_grad = true }):requires_grad(), "randn requires_grad")
end)

test("randint: integers in [low, high), int64 by default", function()
  torch.manual_seed(2)
  local r = torch.randint(0, 5, { 1000 })
  eq(r:dtype(), "int64")
  eq(r:shape(), { 1000 })
  eq(r:min():item(), 0)
  eq(r:max():item(), 4)
  local seen = {}
  for _, v in ipairs(r:tolist()) do
    ok(v == math.floor(v), "whole numbers")
    seen[v] = true
  end
  for v = 0, 4 do ok(seen[v], "value " .. v .. " drawn") end
  eq(torch.randint(3, 4, { 2, 2 }):tolist(), { { 3, 3 }, { 3, 3 } })
  eq(torch.randint(0, 2, { 3 }, { dtype = "int32" }):dtype(), "int32")
end)

test("manual_seed: the same seed gives the same numbers", function()
  torch.manual_seed(42)
  local a, ai = torch.rand(5), torch.randint(0, 100, { 5 })
  torch.manual_seed(42)
  local b, bi = torch.rand(5), torch.randint(0, 100, { 5 })
  eq(a:tolist(), b:tolist())
  eq(ai:tolist(), bi:tolist())
  torch.manual_seed(43)
  ok(not torch.equal(a, torch.rand(5)), "another seed, other numbers")
end)

test("arange: int64 when bounds are whole, float32 otherwise", function()
  local a = torch.arange(5)
  eq(a:dtype(), "int64")
  eq(a:tolist(), { 0, 1, 2, 3, 4 })
  eq(torch.arange(2, 5):tolist(), { 2, 3, 4 })
  eq(torch.arange(5, 0, -2):tolist(), { 5, 3, 1 })
  local f = torch.arange(0, 1, 0.25)
  eq(f:dtype(), "float32")
  eq(f:tolist(), { 0, 0.25, 0.5, 0.75 })
  local d = torch.arange(3, { dtype = "float64" })
  eq(d:dtype(), "float64")
  eq(d:tolist(), { 0, 1, 2 })
end)

test("linspace, eye", function()
  local l = torch.linspace(0, 1, 5)
  eq(l:dtype(), "float32")
  eq(l:tolist(), { 0, 0.25, 0.5, 0.75, 1 })
  eq(torch.linspace(-1, 1, 3, { dtype = "float64" }):dtype(), "float64")
  eq(torch.linspace(-1, 1, 3):tolist(), { -1, 0, 1 })
  local e = torch.eye(2)
  eq(e:dtype(), "float32")
  eq(e:tolist(), { { 1, 0 }, { 0, 1 } })
  eq(torch.eye(2, 3):tolist(), { { 1, 0, 0 }, { 0, 1, 0 } })
  local ei = torch.eye(2, { dtype = "int64" })
  eq(ei:dtype(), "int64")
  eq(ei:tolist(), { { 1, 0 }, { 0, 1 } })
  eq(torch.eye(3, 2, { dtype = "float64" }):shape(), { 3, 2 })
end)

test("zeros_like, ones_like, full_like: shape and dtype from the tensor, options override", function()
  local t = I({ { 5, 6, 7 }, { 8, 9, 10 } })
  local z = torch.zeros_like(t)
  eq(z:dtype(), "int64")
  eq(z:tolist(), { { 0, 0, 0 }, { 0, 0, 0 } })
  eq(torch.zeros_like(t, { dtype = "float64" }):dtype(), "float64")
  local o = torch.ones_like(t)
  eq(o:dtype(), "int64")
  eq(o:tolist(), { { 1, 1, 1 }, { 1, 1, 1 } })
  ok(torch.ones_like(T({ 1 }), { requires_grad = true }):requires_grad(), "ones_like requires_grad")
  local f = torch.full_like(t, 3)
  eq(f:dtype(), "int64")
  eq(f:tolist(), { { 3, 3, 3 }, { 3, 3, 3 } })
  local ff = torch.full_like(t, 0.5, { dtype = "float32" })
  eq(ff:dtype(), "float32")
  eq(ff:tolist(), { { 0.5, 0.5, 0.5 }, { 0.5, 0.5, 0.5 } })
  eq(torch.zeros_like(t):device(), "cpu")
end)

-- ============================================================================================
-- Dtypes and devices

test("dtype names: canonical PyTorch names and short forms", function()
  local names = {
    float32 = "float32", f32 = "float32", fp32 = "float32", float = "float32",
    bfloat16 = "bfloat16", bf16 = "bfloat16",
    float16 = "float16", f16 = "float16", fp16 = "float16", half = "float16",
    float64 = "float64", f64 = "float64", double = "float64",
    int64 = "int64", i64 = "int64", long = "int64",
    int32 = "int32", i32 = "int32", int = "int32",
    int16 = "int16", i16 = "int16", int8 = "int8", i8 = "int8",
    uint8 = "uint8", u8 = "uint8", bool = "bool",
  }
  for name, canonical in pairs(names) do
    eq(torch.zeros(1, { dtype = name }):dtype(), canonical)
    eq(torch.ones(1):to(name):dtype(), canonical)
  end
end)

test("to: dtype names, device names, another tensor, option table", function()
  local t = T({ 1.5, -2.5, 3 })
  local d = t:to("float64")
  eq(d:dtype(), "float64")
  eq(d:tolist(), { 1.5, -2.5, 3 })
  eq(t:to("int64"):tolist(), { 1, -2, 3 })
  eq(t:to("int64"):dtype(), "int64")
  eq(t:to("bf16"):dtype(), "bfloat16")
  eq(t:to("bf16"):tolist(), { 1.5, -2.5, 3 })  -- exact in bfloat16
  local c = t:to("cpu")
  eq(c:device(), "cpu")
  eq(c:tolist(), t:tolist())
  local like = I({ 0 })
  eq(t:to(like):dtype(), "int64")
  eq(torch.to(t, { dtype = "int32" }):dtype(), "int32")
  eq(t:to({ dtype = "float16", device = "cpu" }):dtype(), "float16")
  eq(t:to({ device = "cpu" }):dtype(), "float32")  -- dtype kept when only the device is given
  eq(t:dtype(), "float32")  -- to() returns a new tensor
end)

local function gpu_device_node()
  local f = io.open("/dev/nvidiactl", "rb")
  if f then f:close() end
  return f ~= nil
end

test("devices without a GPU: cuda_available is false, auto -> cpu, cuda fails clearly", function()
  eq(type(torch.cuda_available()), "boolean")
  eq(torch.device("cpu"), "cpu")
  eq(torch.zeros(2):device(), "cpu")
  eq(torch.device(torch.zeros(2, { device = "cpu" })), "cpu")
  raises(function() torch.device("tpu") end, "unknown device 'tpu'")
  raises(function() T({ 1 }):to("nonsense") end, "unknown device 'nonsense'")
  if gpu_device_node() then  -- a GPU machine: CUDA itself is tested by test_torch_cuda.lua
    eq(torch.device("auto"), torch.cuda_available() and "cuda:0" or "cpu")
    return
  end
  eq(torch.cuda_available(), false)  -- no NVIDIA device node: there can be no CUDA device
  eq(torch.device("auto"), "cpu")
  eq(torch.zeros(2, { device = "auto" }):device(), "cpu")
  eq(T({ 1 }):to("auto"):device(), "cpu")
  raises(function() torch.zeros(2, { device = "cuda" }) end, "no CUDA device is available")
  raises(function() T({ 1 }):to("cuda:0") end, "no CUDA device is available")
end)

-- ============================================================================================
-- Arithmetic and operators

test("add, sub, mul, div: function and method forms, tensors and numbers", function()
  local a, b = T({ 1, 2, 3 }), T({ 4, 5, 6 })
  eq(torch.add(a, b):tolist(), { 5, 7, 9 })
  eq(a:add(10):tolist(), { 11, 12, 13 })
  eq(torch.add(10, a):tolist(), { 11, 12, 13 })
  eq(torch.sub(a, b):tolist(), { -3, -3, -3 })
  eq(torch.sub(10, a):tolist(), { 9, 8, 7 })
  eq(a:sub(0.5):tolist(), { 0.5, 1.5, 2.5 })
  eq(torch.mul(a, b):tolist(), { 4, 10, 18 })
  eq(a:mul(-2):tolist(), { -2, -4, -6 })
  eq(torch.div(b, a):tolist(), { 4, 2.5, 2 })
  eq(torch.div(1, T({ 2, 4 })):tolist(), { 0.5, 0.25 })
  eq(a:div(2):tolist(), { 0.5, 1, 1.5 })
end)

test("pow, remainder, maximum, minimum", function()
  local a = T({ 1, 2, 3 })
  eq(torch.pow(a, 2):tolist(), { 1, 4, 9 })
  eq(a:pow(T({ 3, 2, 0 })):tolist(), { 1, 4, 1 })
  eq(torch.pow(2, a):tolist(), { 2, 4, 8 })
  eq(a:pow(0.5):tolist(), { 1, math.sqrt(2), math.sqrt(3) }, TOL)
  eq(torch.remainder(T({ -7, 7, 5.5 }), 3):tolist(), { 2, 1, 2.5 })  -- sign of the divisor, like Lua's %
  eq(I({ 10, -10 }):remainder(I({ 3, 3 })):tolist(), { 1, 2 })
  eq(torch.maximum(T({ 1, 5, -2 }), T({ 3, 4, -1 })):tolist(), { 3, 5, -1 })
  eq(torch.minimum(T({ 1, 5, -2 }), T({ 3, 4, -1 })):tolist(), { 1, 4, -2 })
  eq(T({ 1, 5 }):maximum(2):tolist(), { 2, 5 })
  eq(T({ 1, 5 }):minimum(2):tolist(), { 1, 2 })
end)

test("matmul: matrix-matrix, matrix-vector, vector-vector", function()
  local a = T({ { 1, 2, 3 }, { 4, 5, 6 } })
  local b = T({ { 1, 0 }, { 0, 1 }, { 2, -1 } })
  local c = torch.matmul(a, b)
  eq(c:shape(), { 2, 2 })
  eq(c:tolist(), { { 7, -1 }, { 16, -1 } })
  local v = a:matmul(T({ 1, 1, 1 }))
  eq(v:shape(), { 2 })
  eq(v:tolist(), { 6, 15 })
  local dot = T({ 1, 2, 3 }):matmul(T({ 4, 5, 6 }))
  eq(dot:dim(), 0)
  eq(dot:item(), 32)
  eq(I({ { 1, 2 } }):matmul(I({ { 3 }, { 4 } })):dtype(), "int64")
end)

test("type promotion: numbers act like Python scalars", function()
  local i = I({ 1, 2, 3 })
  eq((i + 1):dtype(), "int64")
  eq((i + 1):tolist(), { 2, 3, 4 })
  eq((i / 2):dtype(), "float32")  -- true division
  eq((i / 2):tolist(), { 0.5, 1, 1.5 })
  eq((T({ 1 }) * 2):dtype(), "float32")
  eq((T({ 1 }, "float64") + 1):dtype(), "float64")
  eq((T({ 1 }, "bf16") * 2.5):dtype(), "bfloat16")
  eq((i + T({ 0.5, 0.5, 0.5 })):dtype(), "float32")
  eq((torch.tensor({ true, false }) + 1):dtype(), "int64")
  eq((torch.tensor({ 1 }, { dtype = "int32" }) + 1):dtype(), "int32")  -- a whole number does not widen int32
end)

test("type promotion: a fractional number with an integer tensor gives float32, as a Python float does", function()
  local i = I({ 1, 2, 3 })
  eq((i * 0.5):tolist(), { 0.5, 1, 1.5 })
  eq((i * 0.5):dtype(), "float32")
  eq((0.5 + i):dtype(), "float32")
  eq(torch.tensor({ true }):mul(0.5):dtype(), "float32")
  eq(torch.where(torch.tensor({ true, false }), 0.5, 0):dtype(), "float32")
end)

test("broadcasting", function()
  local col = T({ { 1 }, { 2 } })
  local row = T({ 10, 20, 30 })
  local s = col + row
  eq(s:shape(), { 2, 3 })
  eq(s:tolist(), { { 11, 21, 31 }, { 12, 22, 32 } })
  eq((torch.ones(2, 3) * T({ 1, 2, 3 })):tolist(), { { 1, 2, 3 }, { 1, 2, 3 } })
end)

test("operators + - * / % ^ and unary -", function()
  local a, b = T({ 6, -4, 9 }), T({ 3, 2, 2 })
  eq((a + b):tolist(), { 9, -2, 11 })
  eq((a - b):tolist(), { 3, -6, 7 })
  eq((a * b):tolist(), { 18, -8, 18 })
  eq((a / b):tolist(), { 2, -2, 4.5 })
  eq((a % b):tolist(), { 0, 0, 1 })
  eq((a % 4):tolist(), { 2, 0, 1 })
  eq((b ^ 2):tolist(), { 9, 4, 4 })
  eq((b ^ b):tolist(), { 27, 4, 4 })
  eq((-a):tolist(), { -6, 4, -9 })
  eq((-I({ 1, -2 })):dtype(), "int64")
  eq((1 + a):tolist(), { 7, -3, 10 })
  eq((10 - a):tolist(), { 4, 14, 1 })
  eq((2 * b):tolist(), { 6, 4, 4 })
  eq((18 / b):tolist(), { 6, 9, 9 })
  eq((7 % b):tolist(), { 1, 1, 1 })
  eq((2 ^ b):tolist(), { 8, 4, 4 })
  eq((a - 1.5):tolist(), { 4.5, -5.5, 7.5 })
  eq((a + b * 2 - 1):tolist(), { 11, -1, 12 })  -- Lua precedence
end)

-- ============================================================================================
-- Comparisons

test("eq, ne, lt, le, gt, ge: elementwise, bool results", function()
  local a, b = T({ 1, 2, 3 }), T({ 3, 2, 1 })
  local r = torch.eq(a, b)
  eq(r:dtype(), "bool")
  eq(r:tolist(), { false, true, false })
  eq(a:ne(b):tolist(), { true, false, true })
  eq(torch.lt(a, b):tolist(), { true, false, false })
  eq(a:le(b):tolist(), { true, true, false })
  eq(torch.gt(a, b):tolist(), { false, false, true })
  eq(a:ge(b):tolist(), { false, true, true })
  eq(a:eq(2):tolist(), { false, true, false })
  eq(a:gt(1.5):tolist(), { false, true, true })
  eq(torch.lt(2, a):tolist(), { false, false, true })
  eq(a:ge(b):dtype(), "bool")
end)

test("logical_and, logical_or, logical_not", function()
  local p, q = torch.tensor({ true, true, false, false }), torch.tensor({ true, false, true, false })
  eq(torch.logical_and(p, q):tolist(), { true, false, false, false })
  eq(p:logical_or(q):tolist(), { true, true, true, false })
  eq(torch.logical_not(p):tolist(), { false, false, true, true })
  eq(T({ 0, 2 }):logical_not():tolist(), { true, false })
  eq(T({ 0, 2 }):logical_and(T({ 1, 1 })):dtype(), "bool")
  eq(p:logical_and(true):tolist(), { true, true, false, false })
end)

test("== is torch.equal: same shape, dtype and values", function()
  local a = T({ 1, 2, 3 })
  ok(a == T({ 1, 2, 3 }), "same values")
  ok(not (a == T({ 1, 2, 4 })), "other values")
  ok(a ~= T({ 1, 2, 4 }), "~=")
  ok(not (a == I({ 1, 2, 3 })), "other dtype")
  ok(not (a == T({ { 1, 2, 3 } })), "other shape")
  ok(not (a == 1), "a number is never == a tensor")
  eq(torch.equal(a, T({ 1, 2, 3 })), true)
  eq(a:equal(T({ 1, 2, 4 })), false)
  eq(a:equal(I({ 1, 2, 3 })), false)
  eq(torch.equal(T({ 1, 2 }), T({ 1, 2, 3 })), false)
end)

test("allclose: rtol and atol", function()
  local a = T({ 1, 2 }, "float64")
  eq(torch.allclose(a, a + 1e-9), true)
  eq(a:allclose(a + 1e-3), false)
  eq(a:allclose(a + 1e-3, { atol = 1e-2 }), true)
  eq(a:allclose(a * 1.01, { rtol = 0.02 }), true)
  eq(a:allclose(a * 1.01, { rtol = 0.001, atol = 0 }), false)
end)

test("< and <= compare one-element tensors", function()
  local one, two = torch.tensor(1), torch.tensor({ 2 })
  ok(one < two, "1 < 2")
  ok(not (two < one), "not 2 < 1")
  ok(one <= one, "1 <= 1")
  ok(not (two <= one), "not 2 <= 1")
  ok(two > one, "2 > 1 (Lua swaps to <)")
  ok(two >= two, "2 >= 2")
  ok(torch.tensor(-0.5) < torch.tensor(-0.25), "fractions")
  raises(function() local _ = T({ 1, 2 }) < T({ 3, 4 }) end, "compare one-element tensors")
  raises(function() local _ = T({ 1, 2 }) <= T({ 3 }) end, "compare one-element tensors")
end)

test("where: tensors or numbers for either branch", function()
  local t = T({ { 1, 2, 3 }, { 4, 5, 6 } })
  local w = torch.where(t:gt(2), t, 0)
  eq(w:dtype(), "float32")
  eq(w:tolist(), { { 0, 0, 3 }, { 4, 5, 6 } })
  eq(torch.where(t:gt(2), -1, t):tolist(), { { 1, 2, -1 }, { -1, -1, -1 } })
  eq(torch.where(t:lt(3), t, t * 10):tolist(), { { 1, 2, 30 }, { 40, 50, 60 } })
  local n = torch.where(torch.tensor({ true, false }), 1, 0)
  eq(n:tolist(), { 1, 0 })
  eq(n:dtype(), "int64")
  eq(torch.where(torch.tensor({ true, false }), 0.5, 0):tolist(), { 0.5, 0 })
end)

test("isnan, isinf, isfinite", function()
  local t = T({ 1, 0 / 0, 1 / 0, -1 / 0 })
  eq(torch.isnan(t):tolist(), { false, true, false, false })
  eq(t:isinf():tolist(), { false, false, true, true })
  eq(t:isfinite():tolist(), { true, false, false, false })
  eq(t:isnan():dtype(), "bool")
end)

-- ============================================================================================
-- Reductions

local X = { { 1, 2, 3 }, { 4, 5, 6 } }

test("sum: all, one dim, negative dim, a list of dims, keepdim", function()
  local x = T(X)
  local s = torch.sum(x)
  eq(s:dim(), 0)
  eq(s:item(), 21)
  eq(x:sum(0):tolist(), { 5, 7, 9 })
  eq(x:sum(1):tolist(), { 6, 15 })
  eq(x:sum(-1):tolist(), { 6, 15 })
  eq(x:sum({ 0, 1 }):item(), 21)
  eq(x:sum({ 0, 1 }):dim(), 0)
  local k = x:sum(1, true)
  eq(k:shape(), { 2, 1 })
  eq(k:tolist(), { { 6 }, { 15 } })
  eq(I({ 1, 2 }):sum():dtype(), "int64")
  eq(torch.tensor({ true, true, false }):sum():item(), 2)
end)

test("mean, prod", function()
  local x = T(X)
  eq(torch.mean(x):item(), 3.5)
  eq(x:mean(0):tolist(), { 2.5, 3.5, 4.5 })
  local m = x:mean({ 0, 1 }, true)
  eq(m:shape(), { 1, 1 })
  eq(m:tolist(), { { 3.5 } })
  eq(torch.prod(x):item(), 720)
  eq(x:prod(1):tolist(), { 6, 120 })
  local p = x:prod(0, true)
  eq(p:shape(), { 1, 3 })
  eq(p:tolist(), { { 4, 10, 18 } })
end)

test("std, var: unbiased (n - 1)", function()
  local x = T(X)
  eq(torch.var(x):item(), 3.5, TOL)  -- sum of squared deviations 17.5, / 5
  eq(x:std():item(), math.sqrt(3.5), TOL)
  eq(x:var(1):tolist(), { 1, 1 }, TOL)
  eq(x:var(0):tolist(), { 4.5, 4.5, 4.5 }, TOL)
  eq(torch.std(x, 0):tolist(), { math.sqrt(4.5), math.sqrt(4.5), math.sqrt(4.5) }, TOL)
  eq(x:std(1, true):shape(), { 2, 1 })
  eq(x:var({ 0, 1 }):item(), 3.5, TOL)
end)

test("logsumexp: over a dim, keepdim", function()
  local x = T(X)
  eq(torch.logsumexp(x, 1):tolist(), { lse({ 1, 2, 3 }), lse({ 4, 5, 6 }) }, TOL)
  eq(x:logsumexp(0):tolist(), { lse({ 1, 4 }), lse({ 2, 5 }), lse({ 3, 6 }) }, TOL)
  eq(x:logsumexp(1, true):shape(), { 2, 1 })
  eq(x:logsumexp({ 0, 1 }):item(), lse({ 1, 2, 3, 4, 5, 6 }), TOL)
end)

test("logsumexp: no dim reduces over all elements, like the other reductions", function()
  local r = T(X):logsumexp()
  eq(r:dim(), 0)
  eq(r:item(), lse({ 1, 2, 3, 4, 5, 6 }), TOL)
end)

test("norm: p = 2 by default, other p, over dims", function()
  local x = T(X)
  eq(torch.norm(x):item(), math.sqrt(91), TOL)
  eq(x:norm(1):item(), 21, TOL)
  eq(x:norm(2, 1):tolist(), { math.sqrt(14), math.sqrt(77) }, TOL)
  eq(x:norm(1, 0):tolist(), { 5, 7, 9 }, TOL)
  eq(x:norm(2, 1, true):shape(), { 2, 1 })
  eq(T({ -3, 4 }):norm(math.huge):item(), 4, TOL)
end)

test("max, min: all elements, or values and 0-based indices along a dim", function()
  local y = T({ { 3, 9, 1 }, { 7, 2, 8 } })
  eq(torch.max(y):item(), 9)
  eq(y:min():item(), 1)
  eq(y:max():dim(), 0)
  local v, i = y:max(1)
  eq(v:tolist(), { 9, 8 })
  eq(i:tolist(), { 1, 2 })
  eq(i:dtype(), "int64")
  v, i = torch.min(y, 1)
  eq(v:tolist(), { 1, 2 })
  eq(i:tolist(), { 2, 1 })
  v, i = y:max(0, true)
  eq(v:shape(), { 1, 3 })
  eq(v:tolist(), { { 7, 9, 8 } })
  eq(i:tolist(), { { 1, 0, 1 } })
  v, i = y:min(-1)
  eq(v:tolist(), { 1, 2 })
  eq(i:tolist(), { 2, 1 })
  eq(select("#", y:max(1)), 2)
  eq(select("#", y:max()), 1)
end)

test("argmax, argmin: flat index, along a dim, keepdim", function()
  local y = T({ { 3, 9, 1 }, { 7, 2, 8 } })
  local a = torch.argmax(y)
  eq(a:dim(), 0)
  eq(a:item(), 1)
  eq(a:dtype(), "int64")
  eq(y:argmin():item(), 2)
  eq(y:argmax(0):tolist(), { 1, 0, 1 })
  eq(torch.argmin(y, 0):tolist(), { 0, 1, 0 })
  eq(y:argmax(1, true):shape(), { 2, 1 })
  eq(y:argmax(1, true):tolist(), { { 1 }, { 2 } })
  eq(y:argmin(-1):tolist(), { 2, 1 })
end)

test("all, any", function()
  local b = torch.tensor({ { true, false }, { true, true } })
  eq(torch.all(b):item(), false)
  eq(b:any():item(), true)
  eq(b:all(1):tolist(), { false, true })
  eq(torch.any(b, 0):tolist(), { true, true })
  eq(b:all(0, true):shape(), { 1, 2 })
  eq(b:all(0, true):tolist(), { { true, false } })
  eq(torch.tensor({ false, false }):any():item(), false)
  eq(torch.ones(3):all():item(), true)
  eq(T({ 1, 0 }):all():item(), false)
  eq(T({ 1, 0 }):any():dtype(), "bool")
end)

test("cumsum, softmax, log_softmax", function()
  eq(torch.cumsum(T({ 1, 2, 3, 4 }), 0):tolist(), { 1, 3, 6, 10 })
  eq(T(X):cumsum(1):tolist(), { { 1, 3, 6 }, { 4, 9, 15 } })
  eq(T(X):cumsum(0):tolist(), { { 1, 2, 3 }, { 5, 7, 9 } })
  eq(I({ 1, 2 }):cumsum(0):dtype(), "int64")
  local s = torch.softmax(T({ 1, 2, 3 }), 0)
  local z = math.exp(1) + math.exp(2) + math.exp(3)
  eq(s:tolist(), { math.exp(1) / z, math.exp(2) / z, math.exp(3) / z }, TOL)
  local rows = T(X):softmax(1)
  eq(rows:sum(1):tolist(), { 1, 1 }, TOL)
  eq(rows:tolist()[2], { math.exp(4 - lse({ 4, 5, 6 })), math.exp(5 - lse({ 4, 5, 6 })), math.exp(6 - lse({ 4, 5, 6 })) }, TOL)
  local ls = T({ 1, 2, 3 }):log_softmax(0)
  eq(ls:tolist(), { 1 - lse({ 1, 2, 3 }), 2 - lse({ 1, 2, 3 }), 3 - lse({ 1, 2, 3 }) }, TOL)
  eq(torch.log_softmax(T(X), -1):tolist()[1], { 1 - lse({ 1, 2, 3 }), 2 - lse({ 1, 2, 3 }), 3 - lse({ 1, 2, 3 }) }, TOL)
end)

-- ============================================================================================
-- Elementwise math

test("neg, abs, sign, reciprocal, square", function()
  eq(torch.neg(T({ 1, -2, 0 })):tolist(), { -1, 2, 0 })
  eq(T({ -1.5, 2 }):abs():tolist(), { 1.5, 2 })
  eq(I({ -3, 4 }):abs():tolist(), { 3, 4 })
  eq(torch.sign(T({ -3, 0, 2 })):tolist(), { -1, 0, 1 })
  eq(T({ 2, 4, -0.5 }):reciprocal():tolist(), { 0.5, 0.25, -2 })
  eq(torch.square(T({ 3, -2 })):tolist(), { 9, 4 })
end)

test("exp, log, log1p, sqrt, rsqrt", function()
  eq(torch.exp(T({ 0, 1, -1 })):tolist(), { 1, math.exp(1), math.exp(-1) }, TOL)
  eq(T({ 1, math.exp(1), 0.5 }):log():tolist(), { 0, 1, math.log(0.5) }, TOL)
  eq(T({ 0, math.exp(1) - 1 }):log1p():tolist(), { 0, 1 }, TOL)
  eq(torch.sqrt(T({ 4, 9, 2 })):tolist(), { 2, 3, math.sqrt(2) }, TOL)
  eq(T({ 4, 0.25 }):rsqrt():tolist(), { 0.5, 2 }, TOL)
  eq(torch.log(T({ 0 })):tolist(), { -math.huge })
  ok(torch.sqrt(T({ -1 })):isnan():item(), "sqrt(-1) is nan")
end)

test("sin, cos, tanh, sigmoid", function()
  eq(torch.sin(T({ 0, math.pi / 2, -math.pi / 6 })):tolist(), { 0, 1, -0.5 }, TOL)
  eq(T({ 0, math.pi, math.pi / 3 }):cos():tolist(), { 1, -1, 0.5 }, TOL)
  eq(T({ 0, 1, -2 }):tanh():tolist(), { 0, math.tanh(1), math.tanh(-2) }, TOL)
  eq(torch.sigmoid(T({ 0, 2, -1 })):tolist(), { 0.5, sigmoid(2), sigmoid(-1) }, TOL)
end)

test("relu, gelu (exact, erf), silu", function()
  eq(torch.relu(T({ -1, 0, 2.5 })):tolist(), { 0, 0, 2.5 })
  -- gelu(x) = x * Phi(x): Phi(1) = 0.8413447460685429, Phi(-1) = 0.15865525393145707
  eq(T({ 0, 1, -1, 3 }):gelu():tolist(), { 0, 0.8413447460685429, -0.15865525393145707, 3 * 0.9986501019683699 }, TOL)
  eq(torch.silu(T({ 0, 1, -2 })):tolist(), { 0, sigmoid(1), -2 * sigmoid(-2) }, TOL)
end)

test("floor, ceil, round (half to even)", function()
  eq(torch.floor(T({ 1.5, -1.5, 2 })):tolist(), { 1, -2, 2 })
  eq(T({ 1.5, -1.5, 2 }):ceil():tolist(), { 2, -1, 2 })
  eq(T({ 0.5, 1.5, 2.5, 2.4, -0.5, -1.6 }):round():tolist(), { 0, 2, 2, 2, 0, -2 })
  eq(T({ 1.5 }):floor():dtype(), "float32")
end)

test("contiguous, clone, detach", function()
  local t = T(X):transpose(0, 1)
  raises(function() t:view(6) end, "view")  -- a transposed tensor is not contiguous
  local c = torch.contiguous(t)
  eq(c:tolist(), { { 1, 4 }, { 2, 5 }, { 3, 6 } })
  eq(c:view(6):tolist(), { 1, 4, 2, 5, 3, 6 })
  local orig = T({ 1, 2, 3 })
  local cl = orig:clone()
  eq(cl:tolist(), { 1, 2, 3 })
  cl[0] = 100
  eq(cl:tolist(), { 100, 2, 3 })
  eq(orig:tolist(), { 1, 2, 3 })  -- the clone owns its memory
  local g = T({ 1, 2 })
  g:requires_grad_()
  local d = torch.detach(g * 2)
  ok(not d:requires_grad(), "detached")
  eq(d:tolist(), { 2, 4 })
  local base = T({ 1, 2 })
  local view = base:detach()
  view[0] = 7
  eq(base:tolist(), { 7, 2 })  -- detach shares memory, as in PyTorch
end)

test("clamp: min, max, either may be nil", function()
  local t = T({ -2, 0.5, 3 })
  eq(torch.clamp(t, 0, 1):tolist(), { 0, 0.5, 1 })
  eq(t:clamp(nil, 1):tolist(), { -2, 0.5, 1 })
  eq(t:clamp(0):tolist(), { 0, 0.5, 3 })
  eq(t:clamp(0, nil):tolist(), { 0, 0.5, 3 })
  eq(I({ -5, 5 }):clamp(-1, 1):tolist(), { -1, 1 })
  raises(function() t:clamp() end, "clamp needs a min, a max or both")
end)

test("masked_fill, tril, triu, gather", function()
  local t = T({ -1, 2, -3 })
  eq(torch.masked_fill(t, t:lt(0), 0):tolist(), { 0, 2, 0 })
  eq(t:masked_fill(torch.tensor({ true, false, false }), 9.5):tolist(), { 9.5, 2, -3 })
  local o = torch.ones(3, 3)
  eq(torch.tril(o):tolist(), { { 1, 0, 0 }, { 1, 1, 0 }, { 1, 1, 1 } })
  eq(o:tril(-1):tolist(), { { 0, 0, 0 }, { 1, 0, 0 }, { 1, 1, 0 } })
  eq(torch.triu(o):tolist(), { { 1, 1, 1 }, { 0, 1, 1 }, { 0, 0, 1 } })
  eq(o:triu(1):tolist(), { { 0, 1, 1 }, { 0, 0, 1 }, { 0, 0, 0 } })
  local g = T({ { 1, 2 }, { 3, 4 } })
  eq(torch.gather(g, 1, I({ { 0, 0 }, { 1, 0 } })):tolist(), { { 1, 1 }, { 4, 3 } })
  eq(g:gather(0, I({ { 1, 0 } })):tolist(), { { 3, 2 } })
end)

-- ============================================================================================
-- Shapes

test("reshape, view: sizes as numbers or a list, -1 inferred", function()
  local t = torch.arange(6)
  local r = torch.reshape(t, 2, 3)
  eq(r:shape(), { 2, 3 })
  eq(r:tolist(), { { 0, 1, 2 }, { 3, 4, 5 } })
  eq(t:reshape({ 3, -1 }):tolist(), { { 0, 1 }, { 2, 3 }, { 4, 5 } })
  eq(r:reshape(-1):tolist(), { 0, 1, 2, 3, 4, 5 })
  eq(torch.view(t, { 1, 6 }):shape(), { 1, 6 })
  local v = t:view(3, 2)
  eq(v:tolist(), { { 0, 1 }, { 2, 3 }, { 4, 5 } })
  v[{ 0, 0 }] = 99
  eq(t:tolist()[1], 99)  -- a view shares memory
  raises(function() t:reshape(4, 2) end, "invalid")
end)

test("permute, transpose, expand", function()
  local t = torch.arange(24):reshape(2, 3, 4)
  local p = torch.permute(t, 2, 0, 1)
  eq(p:shape(), { 4, 2, 3 })
  eq(p[{ 3, 1, 2 }]:item(), t[{ 1, 2, 3 }]:item())
  eq(t:permute({ 1, 0, 2 }):shape(), { 3, 2, 4 })
  local m = T(X)
  eq(torch.transpose(m, 0, 1):tolist(), { { 1, 4 }, { 2, 5 }, { 3, 6 } })
  eq(m:transpose(-1, -2):shape(), { 3, 2 })
  local e = T({ { 1, 2 } }):expand(3, 2)
  eq(e:shape(), { 3, 2 })
  eq(e:tolist(), { { 1, 2 }, { 1, 2 }, { 1, 2 } })
  eq(torch.expand(T({ { 5 }, { 6 } }), { 2, 3 }):tolist(), { { 5, 5, 5 }, { 6, 6, 6 } })
  eq(T({ 1, 2 }):expand(2, -1):shape(), { 2, 2 })
end)

test("flatten, squeeze, unsqueeze", function()
  local t = torch.zeros(2, 3, 4)
  eq(torch.flatten(t):shape(), { 24 })
  eq(t:flatten(1):shape(), { 2, 12 })
  eq(t:flatten(0, 1):shape(), { 6, 4 })
  eq(torch.arange(4):reshape(2, 2):flatten():tolist(), { 0, 1, 2, 3 })
  local s = torch.zeros(1, 3, 1)
  eq(torch.squeeze(s):shape(), { 3 })
  eq(s:squeeze(0):shape(), { 3, 1 })
  eq(s:squeeze(-1):shape(), { 1, 3 })
  eq(s:squeeze(1):shape(), { 1, 3, 1 })  -- size 3 is not squeezed
  local u = T({ 1, 2, 3 })
  eq(torch.unsqueeze(u, 0):shape(), { 1, 3 })
  eq(u:unsqueeze(1):tolist(), { { 1 }, { 2 }, { 3 } })
  eq(u:unsqueeze(-1):shape(), { 3, 1 })
end)

test("narrow, select", function()
  local t = torch.arange(12):reshape(3, 4)
  eq(torch.narrow(t, 0, 1, 2):tolist(), { { 4, 5, 6, 7 }, { 8, 9, 10, 11 } })
  eq(t:narrow(1, 2, 2):tolist(), { { 2, 3 }, { 6, 7 }, { 10, 11 } })
  eq(t:narrow(-1, 0, 1):shape(), { 3, 1 })
  eq(torch.select(t, 0, 0):tolist(), { 0, 1, 2, 3 })
  eq(t:select(1, -1):tolist(), { 3, 7, 11 })
  eq(t:select(1, 2):shape(), { 3 })
end)

test("chunk, split: 1-based Lua lists of tensors", function()
  local t = torch.arange(6)
  local c = torch.chunk(t, 2)
  eq(#c, 2)
  eq(c[1]:tolist(), { 0, 1, 2 })
  eq(c[2]:tolist(), { 3, 4, 5 })
  local m = torch.arange(6):reshape(2, 3)
  local cols = m:chunk(3, 1)
  eq(#cols, 3)
  eq(cols[3]:tolist(), { { 2 }, { 5 } })
  local s = torch.split(torch.arange(10), 4)
  eq(#s, 3)
  eq(s[1]:tolist(), { 0, 1, 2, 3 })
  eq(s[2]:tolist(), { 4, 5, 6, 7 })
  eq(s[3]:tolist(), { 8, 9 })
  local rows = m:split(1, 0)
  eq(#rows, 2)
  eq(rows[2]:tolist(), { { 3, 4, 5 } })
  ok(torch.is_tensor(rows[1]), "items are tensors")
end)

test("cat, stack", function()
  local a, b = T({ { 1, 2 } }), T({ { 3, 4 } })
  local c = torch.cat({ a, b })
  eq(c:shape(), { 2, 2 })
  eq(c:tolist(), { { 1, 2 }, { 3, 4 } })
  eq(torch.cat({ a, b }, 1):tolist(), { { 1, 2, 3, 4 } })
  eq(torch.cat({ a, b, a }, -1):shape(), { 1, 6 })
  local s = torch.stack({ T({ 1, 2 }), T({ 3, 4 }) })
  eq(s:shape(), { 2, 2 })
  eq(s:tolist(), { { 1, 2 }, { 3, 4 } })
  local s1 = torch.stack({ T({ 1, 2 }), T({ 3, 4 }) }, 1)
  eq(s1:tolist(), { { 1, 3 }, { 2, 4 } })
  eq(torch.stack({ T({ 1 }) }):shape(), { 1, 1 })
  raises(function() torch.cat({}) end, "non-empty list of tensors expected")
end)

-- ============================================================================================
-- Indexing (0-based positions, negative from the end, half-open slices)

test("t[i]: 0-based, negative from the end", function()
  local x = torch.arange(12):reshape(3, 4)
  eq(x[0]:tolist(), { 0, 1, 2, 3 })
  eq(x[2]:tolist(), { 8, 9, 10, 11 })
  eq(x[-1]:tolist(), { 8, 9, 10, 11 })
  eq(x[-3]:tolist(), { 0, 1, 2, 3 })
  eq(x[1][2]:item(), 6)
  eq(x[1][2]:dim(), 0)
  raises(function() local _ = x[3] end, "out of bounds")
  raises(function() local _ = x[-4] end, "out of bounds")
end)

test("t[{...}]: positions, slices, ..., none", function()
  local x = torch.arange(12):reshape(3, 4)
  eq(x[{ 1, 2 }]:item(), 6)
  eq(x[{ -1, -1 }]:item(), 11)
  eq(x[{ ":", 1 }]:tolist(), { 1, 5, 9 })
  eq(x[{ "1:3", "::2" }]:tolist(), { { 4, 6 }, { 8, 10 } })
  eq(x[{ 0, "1:" }]:tolist(), { 1, 2, 3 })
  eq(x[{ 0, ":2" }]:tolist(), { 0, 1 })        -- half-open: stop excluded
  eq(x[{ 0, "-2:" }]:tolist(), { 2, 3 })
  eq(x[{ 0, "1:-1" }]:tolist(), { 1, 2 })
  eq(x[{ 0, "1:100" }]:tolist(), { 1, 2, 3 })  -- slices clamp, as in PyTorch
  eq(x[{ "...", -1 }]:tolist(), { 3, 7, 11 })
  eq(x[{ "..." }]:shape(), { 3, 4 })
  eq(x[{ "none" }]:shape(), { 1, 3, 4 })
  eq(x[{ ":", "none", 0 }]:shape(), { 3, 1 })
  eq(x[{ 2 }]:tolist(), { 8, 9, 10, 11 })
end)

test("t[\"text\"]: a string that is not a name is a text index; names are methods", function()
  local x = torch.arange(12):reshape(3, 4)
  eq(x["1:3, 0"]:tolist(), { 4, 8 })
  eq(x["-1"]:tolist(), { 8, 9, 10, 11 })
  eq(type(x.sum), "function")
  eq(x.no_such_method, nil)
  raises(function() x.foo = 1 end, "cannot set field 'foo' on a Tensor")
  x["0, 0"] = 100
  eq(x[{ 0, 0 }]:item(), 100)
end)

test("index: text specs, masks and position tensors", function()
  local x = torch.arange(12):reshape(3, 4)
  eq(torch.index(x, "1, 1:3"):tolist(), { 5, 6 })
  eq(x:index("-1"):tolist(), { 8, 9, 10, 11 })
  eq(x:index(" : , 3"):tolist(), { 3, 7, 11 })
  eq(x:index(2):tolist(), { 8, 9, 10, 11 })
  eq(x:index({ 0, "::3" }):tolist(), { 0, 3 })
  eq(x:index("..., none"):shape(), { 3, 4, 1 })
  eq(x:index(x:gt(9)):tolist(), { 10, 11 })
  eq(x[x:lt(2)]:tolist(), { 0, 1 })
  eq(x[I({ 2, 0 })]:tolist(), { { 8, 9, 10, 11 }, { 0, 1, 2, 3 } })
  eq(x[{ ":", I({ 3, 0 }) }]:tolist(), { { 3, 0 }, { 7, 4 }, { 11, 8 } })
  eq(x:index({ I({ 0, 2 }), I({ 1, 3 }) }):tolist(), { 1, 11 })
  raises(function() x:index("a") end, "bad index 'a'")
  raises(function() x:index("::-1") end, "slice step must be positive")
  raises(function() x:index("1:2:3:4") end, "at most start:stop:step")
end)

test("t[i] = v, t[{...}] = v, index_set: scalars, tensors, masks; views write through", function()
  local x = torch.arange(12):reshape(3, 4)
  x[0] = 100
  eq(x[0]:tolist(), { 100, 100, 100, 100 })
  x[{ 1, 2 }] = -1
  eq(x[1]:tolist(), { 4, 5, -1, 7 })
  x[{ ":", -1 }] = I({ 70, 80, 90 })
  eq(x:tolist(), { { 100, 100, 100, 70 }, { 4, 5, -1, 80 }, { 8, 9, 10, 90 } })
  x[x:gt(50)] = 0
  eq(x:tolist(), { { 0, 0, 0, 0 }, { 4, 5, -1, 0 }, { 8, 9, 10, 0 } })
  local r = torch.index_set(x, "2, ::2", 5)
  ok(rawequal(r, x), "index_set returns the tensor itself")
  eq(x[2]:tolist(), { 5, 9, 5, 0 })
  x:index_set({ 0, "1:3" }, I({ 1, 2 }))
  eq(x[0]:tolist(), { 0, 1, 2, 0 })
  x["1, 0"] = 33  -- a text index works for assignment too
  eq(x[{ 1, 0 }]:item(), 33)
  local row = x[2]  -- basic indexing gives a view
  row[0] = 42
  eq(x[{ 2, 0 }]:item(), 42)
  local f = torch.zeros(2)
  f[1] = 0.25
  eq(f:tolist(), { 0, 0.25 })
  eq(f:dtype(), "float32")
  local b = torch.tensor({ false, false })
  b[0] = true
  eq(b:tolist(), { true, false })
end)

-- ============================================================================================
-- Information and conversion

test("shape, size, dim, numel, # : Lua numbers and 1-based lists", function()
  local t = torch.zeros(2, 3, 4)
  local s = torch.shape(t)
  eq(s, { 2, 3, 4 })
  eq(s[1], 2)  -- a plain 1-based Lua list
  eq(t:size(0), 2)
  eq(torch.size(t, 2), 4)
  eq(t:size(-1), 4)
  eq(t:dim(), 3)
  eq(torch.dim(torch.tensor(1)), 0)
  eq(t:numel(), 24)
  eq(torch.numel(torch.tensor(1)), 1)
  eq(#t, 2)
  eq(#torch.zeros(5), 5)
  eq(#torch.zeros(0), 0)
  raises(function() local _ = #torch.tensor(3) end, "0-dim tensor")
  raises(function() t:size(3) end, "out of range")
end)

test("dtype, device, item, tolist", function()
  local t = T({ { 1.5, 2 } })
  eq(torch.dtype(t), "float32")
  eq(t:device(), "cpu")
  eq(torch.item(T({ 2.5 })), 2.5)
  eq(torch.tensor({ { 7 } }):item(), 7)
  eq(I({ 3 }):item(), 3)
  eq(torch.tensor(true):item(), true)
  eq(torch.tensor({ false }):item(), false)
  eq(type(torch.tensor(true):item()), "boolean")
  raises(function() t:item() end, "expected a tensor with one element, got shape [1, 2]")
  eq(torch.tolist(t), { { 1.5, 2 } })
  eq(torch.tensor(4):tolist(), 4)  -- 0-dim: a plain number
  eq(torch.tensor(true):tolist(), true)
  eq(I({ { 1 }, { 2 } }):tolist(), { { 1 }, { 2 } })
  local g = T({ 1, 2 })
  g:requires_grad_()
  eq((g * 3):tolist(), { 3, 6 })  -- works on tensors that require grad
end)

test("str and tostring", function()
  local t = T({ { 1, 2 }, { 3, 4 } })
  local s = torch.str(t)
  eq(type(s), "string")
  ok(s:find("1", 1, true) and s:find("4", 1, true), "str shows values: " .. s)
  ok(s:find("CPUFloatType{2,2}", 1, true), "str names type and shape: " .. s)
  ok(I({ 12345 }):str():find("12345", 1, true), "int values")
  eq(tostring(t), "Tensor(float32, [2, 2], cpu)")
  eq(tostring(torch.tensor(1)), "Tensor(float32, [], cpu)")
  eq(tostring(torch.zeros(3, { dtype = "bf16" })), "Tensor(bfloat16, [3], cpu)")
  eq(tostring(torch.zeros(2, { requires_grad = true })), "Tensor(float32, [2], cpu, requires_grad)")
end)

test("is_tensor", function()
  eq(torch.is_tensor(torch.zeros(1)), true)
  eq(torch.is_tensor(1), false)
  eq(torch.is_tensor({}), false)
  eq(torch.is_tensor(nil), false)
  eq(torch.is_tensor("Tensor"), false)
  local r = torch.zeros(1)
  r:release()
  eq(torch.is_tensor(r), false)  -- a released tensor is no longer a live Tensor
end)

test("release: frees the tensor; later use is an error; twice is fine", function()
  local t = torch.ones(3)
  local other = t  -- the same userdata
  eq(t:release(), nil)
  eq(tostring(t), "Tensor(released)")
  raises(function() other:sum() end, "Tensor was released")
  torch.release(t)  -- releasing again is a no-op
  eq(tostring(t), "Tensor(released)")
  local kept = torch.ones(2)
  local view = kept[{ ":" }]
  view:release()
  eq(kept:tolist(), { 1, 1 })  -- other tensors sharing the memory are unaffected
end)

-- ============================================================================================
-- Autograd

test("requires_grad via the creation option and requires_grad_", function()
  local a = torch.zeros(2, { requires_grad = true })
  eq(torch.requires_grad(a), true)
  local b = torch.zeros(2)
  eq(b:requires_grad(), false)
  local r = torch.requires_grad_(b)
  ok(rawequal(r, b), "requires_grad_ returns the tensor itself")
  eq(b:requires_grad(), true)
  b:requires_grad_(false)
  eq(b:requires_grad(), false)
  b:requires_grad_(true)
  eq(b:requires_grad(), true)
  eq((b * 2):requires_grad(), true)  -- results of ops on it track grad
  eq((torch.zeros(2) * 2):requires_grad(), false)
  raises(function() torch.zeros(2, { dtype = "int64", requires_grad = true }) end, "floating point")
end)

test("backward, grad: hand-derived gradients", function()
  -- f(x) = sum(3 x^2 + 2 x): df/dx = 6 x + 2
  local x = T({ 1, 2, 3 })
  x:requires_grad_()
  eq(x:grad(), nil)  -- no grad before backward
  local f = (x ^ 2 * 3 + x * 2):sum()
  f:backward()
  local g = torch.grad(x)
  eq(g:tolist(), { 8, 14, 20 }, TOL)
  eq(g:shape(), { 3 })
  eq(g:dtype(), "float32")

  -- f(A) = sum(A b): df/dA[i][j] = b[j]; b has no grad
  local A = torch.tensor({ { 1, 2 }, { 3, 4 } }, { requires_grad = true })
  local b = T({ 5, -1 })
  A:matmul(b):sum():backward()
  eq(A:grad():tolist(), { { 5, -1 }, { 5, -1 } }, TOL)
  eq(b:grad(), nil)

  -- f(w) = mean((w * x0 - y)^2) with x0 = {1, 2}, y = {0, 1}, w = 1: df/dw = mean(2 (w x0 - y) x0) = (2*1*1 + 2*1*2)/2 = 3
  local w = torch.tensor(1, { requires_grad = true })
  local x0, y = T({ 1, 2 }), T({ 0, 1 })
  local loss = ((w * x0 - y) ^ 2):mean()
  loss:backward()
  eq(w:grad():item(), 3, TOL)
  eq(w:grad():dim(), 0)
end)

test("backward with an explicit gradient; grads accumulate; zero_grad clears", function()
  local x = torch.tensor({ 1, 2, 3 }, { requires_grad = true })
  local y = x * 2
  y:backward(T({ 1, 0.5, 0 }))
  eq(x:grad():tolist(), { 2, 1, 0 })
  x:zero_grad()
  eq(x:grad(), nil)  -- cleared (set to none, as PyTorch's zero_grad does by default)
  local function f() return (x * x):sum() end
  f():backward()
  eq(x:grad():tolist(), { 2, 4, 6 })
  f():backward()
  eq(x:grad():tolist(), { 4, 8, 12 })  -- accumulated
  torch.zero_grad(x)
  eq(torch.grad(x), nil)
  f():backward()
  eq(x:grad():tolist(), { 2, 4, 6 })  -- fresh after zero_grad
end)

test("backward errors: tensor without grad, non-scalar without a gradient", function()
  raises(function() torch.ones(2):sum():backward() end, "does not require grad")
  local x = torch.ones(2, { requires_grad = true })
  raises(function() (x * 2):backward() end, "grad can be implicitly created only for scalar outputs")
end)

test("no_grad: results do not track grad, returns fn's results, passes arguments", function()
  local x = torch.ones(2, { requires_grad = true })
  local r, extra = torch.no_grad(function(a, k) return a * k, "second" end, x, 3)
  eq(r:requires_grad(), false)
  eq(r:tolist(), { 3, 3 })
  eq(extra, "second")
  eq(select("#", torch.no_grad(function() end)), 0)
  eq(select("#", torch.no_grad(function() return nil, nil, 1 end)), 3)
  eq(torch.no_grad(function(...) return select("#", ...) end, nil, nil), 2)
  eq((x * 2):requires_grad(), true)  -- grad mode is back on afterwards
  raises(function() torch.no_grad(x) end, "function expected")
  raises(function() torch.no_grad(function() error("inside no_grad") end) end, "inside no_grad")
  eq((x * 2):requires_grad(), true)  -- and back on after an error inside
  -- an update under no_grad, as a training loop does
  local w = torch.tensor({ 1, 2 }, { requires_grad = true })
  local loss = (w * w):sum()
  loss:backward()
  torch.no_grad(function() w:index_set(":", w - w:grad() * 0.5) end)
  eq(w:tolist(), { 0, 0 })
  eq(w:requires_grad(), true)
end)

-- ============================================================================================
-- Files

local function with_tmp(fn)
  local path = os.tmpname()
  local ok_, err = pcall(fn, path)
  os.remove(path)
  if not ok_ then error(err, 0) end
  ok(io.open(path, "rb") == nil, "temp file removed")
end

test("save/load: one tensor round-trips exactly", function()
  with_tmp(function(path)
    torch.manual_seed(3)
    local t = torch.randn(3, 4)
    torch.save(t, path)
    local back = torch.load(path)
    ok(torch.is_tensor(back), "load returns a tensor")
    eq(back:dtype(), "float32")
    eq(back:shape(), { 3, 4 })
    ok(back == t, "exactly equal")
    eq(back:tolist(), t:tolist())
    local i = I({ { 1, -2 }, { 3, 9007199254740 } })
    torch.save(i, path)  -- overwriting the same path
    local bi = torch.load(path)
    eq(bi:dtype(), "int64")
    ok(bi == i, "int64 exactly equal")
    torch.save(torch.tensor(-3.25), path)  -- 0-dim
    local b0 = torch.load(path)
    eq(b0:dim(), 0)
    eq(b0:item(), -3.25)
    local tr = torch.arange(6):reshape(2, 3):transpose(0, 1)  -- a non-contiguous view
    torch.save(tr, path)
    eq(torch.load(path):tolist(), { { 0, 3 }, { 1, 4 }, { 2, 5 } })
  end)
end)

test("save/load: a table of named tensors round-trips exactly", function()
  with_tmp(function(path)
    torch.manual_seed(4)
    local named = {
      weight = torch.randn(2, 3),
      bias = torch.arange(3),
      mask = torch.tensor({ true, false }),
      half = torch.rand(4, { dtype = "bf16" }),
    }
    torch.save(named, path)
    local back = torch.load(path)
    eq(type(back), "table")
    local n = 0
    for name, t in pairs(back) do
      n = n + 1
      ok(named[name], "unexpected name " .. tostring(name))
      eq(t:dtype(), named[name]:dtype())
      eq(t:shape(), named[name]:shape())
      ok(t == named[name], name .. " exactly equal")
    end
    eq(n, 4)
  end)
end)

test("save/load errors", function()
  with_tmp(function(path)
    raises(function() torch.save({ 1, 2 }, path) end, "table of name = Tensor expected")
    raises(function() torch.save({ w = 5 }, path) end, "table of name = Tensor expected")
    raises(function() torch.save(torch.zeros(1)) end, "string expected")
  end)
  raises(function() torch.load("/nonexistent/dir/luatune_missing.pt") end, "luatune_missing.pt")
end)

test("load: a file that is not a tensor file gives a one-line reason, no C++ backtrace", function()
  with_tmp(function(path)
    local f = assert(io.open(path, "wb"))
    f:write("this is not a tensor file")
    f:close()
    local err = raises(function() torch.load(path) end, "not a PyTorch tensor file")
    ok(not err:find("Exception raised from", 1, true) and not err:find("frame #", 1, true),
       "LibTorch's C++ backtrace leaks into the message: " .. err)
  end)
end)

-- ============================================================================================
-- Losses

test("mse_loss: mean, sum, none", function()
  local a, b = T({ 1, 2, 3 }), T({ 1, 0, 6 })  -- squared errors 0, 4, 9
  local m = torch.mse_loss(a, b)
  eq(m:dim(), 0)
  eq(m:item(), 13 / 3, TOL)
  eq(torch.mse_loss(a, b, { reduction = "sum" }):item(), 13)
  eq(torch.mse_loss(a, b, { reduction = "none" }):tolist(), { 0, 4, 9 })
  raises(function() torch.mse_loss(a, b, { reduction = "max" }) end, "reduction 'max' unknown")
  raises(function() torch.mse_loss(a, b, { reduce = "sum" }) end, "unknown option 'reduce'")
end)

test("cross_entropy: mean, none, sum, ignore_index, label_smoothing", function()
  local logits = T({ { 1, 2, 3 }, { 1, 1, 1 } })
  local targets = I({ 2, 0 })
  local l1, l2 = lse({ 1, 2, 3 }) - 3, math.log(3)
  local ce = torch.cross_entropy(logits, targets)
  eq(ce:dim(), 0)
  eq(ce:item(), (l1 + l2) / 2, TOL)
  eq(torch.cross_entropy(logits, targets, { reduction = "none" }):tolist(), { l1, l2 }, TOL)
  eq(torch.cross_entropy(logits, targets, { reduction = "sum" }):item(), l1 + l2, TOL)
  eq(torch.cross_entropy(logits, targets, { ignore_index = 0 }):item(), l1, TOL)  -- mean over the kept sample
  -- label smoothing eps: (1 - eps) * nll + eps * mean over classes of -log p
  local eps = 0.1
  local s1 = (1 - eps) * l1 + eps * ((lse({ 1, 2, 3 }) - 1) + (lse({ 1, 2, 3 }) - 2) + (lse({ 1, 2, 3 }) - 3)) / 3
  local s2 = l2  -- uniform logits: every class has the same loss
  eq(torch.cross_entropy(logits, targets, { label_smoothing = eps }):item(), (s1 + s2) / 2, TOL)
  raises(function() torch.cross_entropy(logits, targets, { weight = 1 }) end, "unknown option 'weight'")
end)

test("losses have gradients", function()
  -- mse: d/dx mean((x - t)^2) = 2 (x - t) / n
  local x = torch.tensor({ 1, 2, 4 }, { requires_grad = true })
  torch.mse_loss(x, T({ 0, 2, 1 })):backward()
  eq(x:grad():tolist(), { 2 / 3, 0, 2 }, TOL)
  -- cross entropy: d/dlogits = (softmax - onehot) / N
  local z = torch.tensor({ { 0, 0 } }, { requires_grad = true })
  torch.cross_entropy(z, I({ 1 })):backward()
  eq(z:grad():tolist(), { { 0.5, -0.5 } }, TOL)
end)

-- ============================================================================================
-- Errors

test("LibTorch errors become Lua errors with LibTorch's message and the calling line", function()
  local a, b = torch.zeros(2, 3), torch.zeros(4, 5)
  local line
  local err = raises(function() line = line_here(); a:matmul(b) end, "cannot be multiplied")
  ok(err:find("test_torch.lua:" .. line .. ":", 1, true), "position of the calling line " .. line .. " in: " .. err)
  ok(err:find("(2x3 and 4x5)", 1, true), "shapes in the message: " .. err)
  ok(not err:find("Exception raised from", 1, true), "no C++ backtrace: " .. err)
  err = raises(function() line = line_here(); torch.matmul(a, b) end, "cannot be multiplied")
  ok(err:find("test_torch.lua:" .. line .. ":", 1, true), "module form: " .. err)
  err = raises(function() line = line_here(); local _ = a + torch.zeros(4) end, "must match the size")
  ok(err:find("test_torch.lua:" .. line .. ":", 1, true), "operator form: " .. err)
  err = raises(function() line = line_here(); a:reshape(7) end, "invalid for input of size 6")
  ok(err:find("test_torch.lua:" .. line .. ":", 1, true), "method form: " .. err)
end)

test("wrong argument types: Tensor expected", function()
  raises(function() torch.exp(5) end, "Tensor expected, got number")
  raises(function() torch.sum({}) end, "Tensor expected, got table")
  raises(function() torch.add(1, 2) end, "Tensor expected, got number")
  raises(function() T({ 1 }):add("x") end, "Tensor expected, got string")
  raises(function() local _ = T({ 1 }) + {} end, "Tensor expected, got table")
  raises(function() torch.matmul(T({ 1 }), nil) end, "Tensor expected, got nil")
  raises(function() torch.equal(T({ 1 }), 1) end, "Tensor expected, got number")
  raises(function() torch.masked_fill(T({ 1 }), true, 0) end, "Tensor expected, got boolean")
  raises(function() torch.where(T({ 1 }), "a", 0) end, "Tensor expected, got string")
  raises(function() torch.cat({ T({ 1 }), 5 }) end, "list of tensors expected")
  raises(function() torch.zeros(2.5) end, "integer expected")
  raises(function() torch.zeros({ 2, "x" }) end, "list of integers expected")
  raises(function() T({ 1, 2 }):sum(0, "yes") end, "boolean expected")
  raises(function() T({ 1 })[true] = 1 end, "index")
end)

test("use after release: Tensor was released", function()
  local t = torch.ones(2)
  local live = torch.ones(2)
  t:release()
  raises(function() t:sum() end, "Tensor was released")
  raises(function() torch.exp(t) end, "Tensor was released")
  raises(function() local _ = t + 1 end, "Tensor was released")
  raises(function() local _ = live + t end, "Tensor was released")
  raises(function() local _ = -t end, "Tensor was released")
  raises(function() local _ = t[0] end, "Tensor was released")
  raises(function() t[0] = 1 end, "Tensor was released")
  raises(function() live:matmul(t) end, "Tensor was released")
  raises(function() t:tolist() end, "Tensor was released")
  raises(function() local _ = #t end, "Tensor was released")
  raises(function() torch.cat({ live, t }) end, "not a live Tensor")
  eq(live:tolist(), { 1, 1 })
end)

test("unknown option keys", function()
  local err = raises(function() torch.zeros(2, { dtyp = "int64" }) end, "unknown option 'dtyp'")
  ok(err:find("did you mean 'dtype'", 1, true), "suggests the nearest: " .. err)
  raises(function() torch.tensor({ 1 }, { device = "cpu", grad = true }) end, "unknown option 'grad'")
  raises(function() T({ 1 }):to({ dtype = "f32", shape = 2 }) end, "unknown option 'shape'")
  raises(function() torch.allclose(T({ 1 }), T({ 1 }), { tol = 1 }) end, "unknown option 'tol'")
  raises(function() torch.arange(3, { step = 1 }) end, "unknown option 'step'")
  raises(function() torch.zeros(2, { requires_grad = "yes" }) end, "option 'requires_grad' expects a boolean")
  raises(function() torch.zeros(2, { dtype = 5 }) end, "option 'dtype' expects a string")
end)

test("unknown dtype names", function()
  local err = raises(function() torch.zeros(2, { dtype = "float33" }) end, "unknown dtype 'float33'")
  ok(err:find("did you mean 'float32'", 1, true), "suggests the nearest: " .. err)
  raises(function() torch.tensor({ 1 }, { dtype = "complex" }) end, "unknown dtype 'complex'")
  raises(function() T({ 1 }):to({ dtype = "int128" }) end, "unknown dtype 'int128'")
end)

test("torch.tensor: ragged or mixed nested tables", function()
  raises(function() torch.tensor({ { 1, 2 }, { 3 } }) end, "ragged")
  raises(function() torch.tensor({ { 1 }, 2 }) end, "ragged")
  raises(function() torch.tensor({ 1, { 2 } }) end, "value[2]: expected a value, got a list")
  raises(function() torch.tensor({ { { 1 } }, { 2 } }) end, "ragged")
  raises(function() torch.tensor({ 1, true }) end, "mixes booleans and numbers")
  raises(function() torch.tensor({ a = 1 }) end, "expected numbers, booleans or lists of them")
  raises(function() torch.tensor({ "x" }) end, "got string")
  local err = raises(function() torch.tensor({ { 1, 2 }, { 3 } }) end, "value[2]")
  ok(err:find("expected 2 items, got 1", 1, true), "says what was expected: " .. err)
end)

-- ============================================================================================
-- Coverage wrappers (they must be transparent) and the coverage check (registered last)

test("coverage wrappers are transparent: nil arguments, several results, identity", function()
  ok(torch.clamp ~= nil and methods.clamp ~= nil, "wrapped functions exist")
  eq(T({ -2, 2 }):clamp(nil, 1):tolist(), { -2, 1 })  -- a nil in the middle passes through
  local v, i = torch.max(T({ { 1, 5 } }), 1)             -- both results pass through
  eq(v:tolist(), { 5 })
  eq(i:tolist(), { 1 })
  local t = torch.zeros(1)
  ok(rawequal(t:requires_grad_(false), t), "the same userdata comes back")
  eq(select("#", torch.manual_seed(0)), 0)               -- no results stay no results
end)

test("coverage: every function of the torch module was called", function()
  local names = {}
  for name in pairs(covered_names) do names[#names + 1] = name end
  table.sort(names)
  local missing = {}
  for _, name in ipairs(names) do
    if not called[name] then missing[#missing + 1] = name end
  end
  ok(#names > 100, "found " .. #names .. " functions to cover")
  for name, f in pairs(torch) do ok(covered_names[name] or type(f) ~= "function", "unwrapped " .. name) end
  if #missing > 0 then error("never called: " .. table.concat(missing, ", "), 0) end
end)

h.run()
