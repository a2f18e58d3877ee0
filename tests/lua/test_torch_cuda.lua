-- tests/lua/test_torch_cuda.lua: torch on CUDA (label gpu). Exits 77, which CTest counts as
-- skipped, on machines without CUDA; LUATUNE_TEST_GPU_AS=cpu rehearses it on the CPU (harness.lua).
local h = require "harness"
local DEV, DEV_NAME = h.gpu_device()

h.test("auto picks CUDA and tensors move both ways exactly", function()
  h.eq(torch.device("auto"), DEV_NAME)
  local a = torch.randn(64, 32)
  local g = a:to(DEV)
  h.eq(g:device(), DEV_NAME)
  h.ok(torch.equal(g:to("cpu"), a))
end)

h.test("matmul on CUDA matches the CPU", function()
  local a, b = torch.randn(128, 64), torch.randn(64, 32)
  local gpu = a:to(DEV):matmul(b:to(DEV)):to("cpu")
  h.ok(torch.allclose(gpu, a:matmul(b), { rtol = 1e-4, atol = 1e-4 }))
end)

h.test("bf16 on CUDA and creation with device", function()
  local z = torch.zeros(2, 3, { dtype = "bf16", device = DEV })
  h.eq(z:dtype(), "bfloat16")
  h.eq(z:device(), DEV_NAME)
  z:release()
end)

h.run()
