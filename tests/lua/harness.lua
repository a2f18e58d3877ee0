-- tests/lua/harness.lua: the small test harness every tests/lua/test_<module>.lua uses.
-- test(name, fn) registers; run() runs them all, prints one line per test, exits 1 on failure.
local M = {}
local tests = {}

function M.test(name, fn) tests[#tests + 1] = { name = name, fn = fn } end

local function show(v)
  if type(v) == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = show(x) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  return tostring(v)
end
M.show = show

local function deep_eq(a, b, tol)
  if type(a) == "number" and type(b) == "number" then return a == b or math.abs(a - b) <= (tol or 0) end
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  if #a ~= #b then return false end
  for i = 1, #a do if not deep_eq(a[i], b[i], tol) then return false end end
  for k, v in pairs(a) do if type(k) ~= "number" and not deep_eq(v, b[k], tol) then return false end end
  return true
end

-- eq(actual, expected [, tol]): deep equality of numbers, strings, booleans and nested lists.
function M.eq(actual, expected, tol)
  if not deep_eq(actual, expected, tol) then
    error("expected " .. show(expected) .. ", got " .. show(actual), 2)
  end
end

-- read_file(path): the file's whole text; fails naming the path when it cannot be opened.
function M.read_file(path)
  local f = assert(io.open(path, "rb"), "cannot open " .. path)
  local text = f:read("*a")
  f:close()
  return text
end

function M.ok(cond, msg) if not cond then error(msg or "condition is false", 2) end end

-- raises(fn, text): fn must fail with a message containing `text` (plain text, not a pattern).
function M.raises(fn, text)
  local ok, err = pcall(fn)
  if ok then error("expected an error containing '" .. text .. "', but it succeeded", 2) end
  err = tostring(err)
  if not err:find(text, 1, true) then
    error("expected an error containing '" .. text .. "', got: " .. err, 2)
  end
  return err
end

-- The device of a `gpu` test: "cuda" where CUDA is present. Elsewhere the test exits 77 (CTest's
-- skip), unless LUATUNE_TEST_GPU_AS=cpu asks for a rehearsal: the same script on the CPU, so that CI
-- catches a GPU test's own mistakes (a wrong call, a bad option) before a GPU session runs it.
-- Returns the device and the name tensors report for it ("cuda:0" or "cpu").
function M.gpu_device()
  if torch.cuda_available() then return "cuda", "cuda:0" end
  if os.getenv("LUATUNE_TEST_GPU_AS") == "cpu" then return "cpu", "cpu" end
  print("SKIP no CUDA device")
  os.exit(77)
end

function M.run()
  local failed = 0
  for _, t in ipairs(tests) do
    local ok, err = xpcall(t.fn, debug.traceback)
    if ok then
      print("PASS " .. t.name)
    else
      failed = failed + 1
      print("FAIL " .. t.name .. "\n" .. tostring(err))
    end
  end
  print(string.format("%d tests, %d failed", #tests, failed))
  if failed > 0 then os.exit(1) end
end

return M
