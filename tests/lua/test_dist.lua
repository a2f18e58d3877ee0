-- tests/lua/test_dist.lua: the `dist` module (bindings/dist.cpp) in a single process, where it is
-- rank 0 of 1 and every collective leaves its tensor alone. Multi-process behaviour: tests/dist/.
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

test("a single process is rank 0 of 1", function()
  eq(dist.rank(), 0)
  eq(dist.world_size(), 1)
  eq(dist.local_rank(), 0)
  ok(dist.is_main())
  local i = dist.info()
  eq(i.world_size, 1)
  eq(i.backend, "none")
end)

test("collectives are identities with one process", function()
  local t = torch.tensor({ 1.5, -2, 3 })
  ok(torch.equal(dist.all_reduce(t), torch.tensor({ 1.5, -2, 3 })))
  ok(torch.equal(dist.all_reduce(t, "mean"), torch.tensor({ 1.5, -2, 3 })))
  ok(torch.equal(dist.broadcast(t, 0), torch.tensor({ 1.5, -2, 3 })))
  dist.barrier()
end)

test("errors", function()
  raises(function() dist.all_reduce(torch.ones({ 2 }), "max") end, 'op must be "sum" or "mean", got "max"')
  raises(function() dist.broadcast(torch.ones({ 2 }), 1) end, "root 1 is not a rank (0..0)")
  raises(function() dist.all_reduce(3) end, "Tensor expected")
end)

h.run()
