-- scripts/lua/paths.lua: paths in recipe defaults that are relative to the luatune checkout (such
-- as the tokenizer scripts/setup.sh fetches) or to the runner's own directory (the example data set
-- the build writes, build/data/example_chat.jsonl) work from any working directory.
--   local paths = require "paths"
--   local dir = paths.resolve(cfg.tokenizer)
local M = {}

local function exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end

-- The checkout this helper lives in (scripts/lua/.. /..): an installed runner's PREFIX/share/luatune.
local here = debug.getinfo(1, "S").source:match("^@(.*)/scripts/lua/[^/]*$")

-- The directory of the runner running this (build/ in a checkout, PREFIX/bin installed).
local function runner_dir()
  local ok, exe = pcall(hw.runner_path)
  return ok and exe:match("^(.*)/[^/]*$") or nil
end

-- `path` when it exists as given (relative to the working directory, or absolute); else the same
-- path under the luatune checkout, then beside the runner, the first that exists; else `path`
-- unchanged (the caller's own error then names it). `runner validate` looks in the same places
-- (host/cli/config_checks.cpp).
function M.resolve(path)
  if path:sub(1, 1) == "/" or exists(path) then return path end
  for _, dir in ipairs({ here or false, runner_dir() or false }) do
    if dir and exists(dir .. "/" .. path) then return dir .. "/" .. path end
  end
  return path
end

return M
