-- scripts/lua/paths.lua: paths in recipe defaults that are relative to the luatune checkout (such
-- as the tokenizer scripts/setup.sh fetches) work from any working directory.
--   local paths = require "paths"
--   local dir = paths.resolve(cfg.tokenizer)
local M = {}

local function exists(path)
  local f = io.open(path, "r")
  if f then f:close() return true end
  return false
end

-- The checkout this helper lives in (scripts/lua/.. /..).
local here = debug.getinfo(1, "S").source:match("^@(.*)/scripts/lua/[^/]*$")

-- `path` when it exists as given (relative to the working directory, or absolute); else the same
-- path under the luatune checkout when it exists there; else `path` unchanged (the caller's
-- own error then names it).
function M.resolve(path)
  if path:sub(1, 1) == "/" or exists(path) or not here then return path end
  local alt = here .. "/" .. path
  if exists(alt) then return alt end
  return path
end

return M
