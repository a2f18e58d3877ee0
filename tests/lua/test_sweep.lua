-- tests/lua/test_sweep.lua: the `sweep` module (being written).
local h = require "harness"
h.test("the sweep module loads", function() assert(type(sweep) == "table") end)
h.run()
