-- scripts/make_example_data.lua: writes the example chat data set (scripts/lua/example_data.lua) to `output`.
-- The build runs it after linking the runner (CMakeLists.txt): build/data/example_chat.jsonl, which
-- `cmake --install` copies to PREFIX/share/luatune/data. By hand:
--   build/runner scripts/make_example_data.lua output=/tmp/example_chat.jsonl
local cfg = config {
  output = "data/example_chat.jsonl",  -- the JSONL to write; its directory must exist
}
-- The module beside this script, not one under $LUATUNE_HOME: the build writes what its checkout says.
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local example = dofile(here .. "/lua/example_data.lua")
print(("example data: %d conversations -> %s"):format(example.write(cfg.output), cfg.output))
