-- tests/lua/test_torch_cuda.lua: torch on CUDA (label gpu). Exits 77, which CTest counts as
-- skipped, on machines without CUDA.
local h = require "harness"
if not torch.cuda_available() then
  print("SKIP no CUDA device")
  os.exit(77)
end

h.test("auto picks CUDA and tensors move both ways exactly", function()
  h.eq(torch.device("auto"), "cuda:0")
  local a = torch.randn(64, 32)
  local g = a:to("cuda")
  h.eq(g:device(), "cuda:0")
  h.ok(torch.equal(g:to("cpu"), a))
end)

h.test("matmul on CUDA matches the CPU", function()
  local a, b = torch.randn(128, 64), torch.randn(64, 32)
  local gpu = a:to("cuda"):matmul(b:to("cuda")):to("cpu")
  h.ok(torch.allclose(gpu, a:matmul(b), { rtol = 1e-4, atol = 1e-4 }))
end)

h.test("bf16 on CUDA and creation with device", function()
  local z = torch.zeros(2, 3, { dtype = "bf16", device = "cuda" })
  h.eq(z:dtype(), "bfloat16")
  h.eq(z:device(), "cuda:0")
  z:release()
end)

h.run()
