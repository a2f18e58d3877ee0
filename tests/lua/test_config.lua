-- tests/lua/test_config.lua: the config module as a recipe sees it (overrides are covered by
-- tests/cli/test_cli.sh, which runs recipes with key=value arguments).
local h = require "harness"

local before = config.get()
-- The fixture the CLI tests run: config { lr = 2e-4, steps = 10, name = "run", pack = true,
-- lora = { r = 16, targets = { "q_proj", "v_proj" } } }, resolved with no overrides.
local cfg = dofile("tests/fixtures/recipes/typed.lua")

h.test("config.get is nil before config{} resolves", function()
  h.eq(before, nil)
end)

h.test("resolved values keep their Lua types", function()
  h.eq(cfg.lr, 2e-4)
  h.eq(cfg.steps, 10)
  h.eq(cfg.name, "run")
  h.eq(cfg.pack, true)
  h.eq(cfg.lora.r, 16)
  h.eq(cfg.lora.targets, { "q_proj", "v_proj" })
end)

h.test("reading a misspelt key raises with a suggestion", function()
  h.raises(function() return cfg.stpes end, "config: no key 'stpes' in the config (did you mean 'steps'?)")
  h.raises(function() return cfg.lora.alpha end, "config: no key 'lora.alpha'")
end)

h.test("config.get returns a plain copy of the resolved config", function()
  local got = config.get()
  h.eq(got.steps, 10)
  h.eq(got.lora.targets, { "q_proj", "v_proj" })
  got.steps = 99  -- a copy: the recipe's cfg is unchanged
  h.eq(cfg.steps, 10)
  h.eq(got.missing, nil)  -- plain table, not strict
end)

h.test("config.json serialises with sorted keys and integers", function()
  h.eq(config.json(), '{"lora":{"r":16,"targets":["q_proj","v_proj"]},"lr":0.0002,"name":"run","pack":true,"steps":10}')
end)

h.test("a second config{} is an error", function()
  h.raises(function() config { x = 1 } end, "config: config{} called twice")
end)

h.test("a list is not a config", function()
  h.raises(function() config { 1, 2 } end, "config: expected a table of named defaults")
end)

h.test("config.pick: the keys a function or option table declares, extra over them; or the keys listed", function()
  local picked = config.pick(cfg.lora, "lora.apply", { seed = 3 })
  h.eq(picked, { r = 16, targets = { "q_proj", "v_proj" }, seed = 3 })
  h.eq(getmetatable(picked), nil)  -- a plain table: a key it lacks reads as nil
  h.eq(picked.alpha, nil)
  h.eq(next(config.pick(cfg, "train.new")), nil)  -- old names (lr, steps) are not train.new's names
  h.eq(config.pick(cfg, "BatchesOpts", { size = 2 }), { size = 2 })
  h.eq(config.pick(cfg, { "name", "pack" }), { name = "run", pack = true })
  h.raises(function() config.pick(cfg, { "name", "nope" }) end, "config.pick: the config has no key 'nope'")
  h.raises(function() config.pick(cfg, "train.nope") end, "config.pick: 'train.nope' is no function with options")
  h.raises(function() config.pick(cfg, 3) end, "a list of keys expected")
end)

h.run()
