-- tests/lua/test_distill.lua: the `distill` module on tiny CPU models.
-- Run: build/runner tests/lua/test_distill.lua
local h = require "harness"
local test, eq, ok, raises = h.test, h.eq, h.ok, h.raises

test("the module is registered", function()
  eq(type(distill), "table")
end)

h.run()
