-- scripts/make_example_data.lua: writes the example data sets (scripts/lua/example_data.lua) into the
-- directory of `output`: example_chat.jsonl (`output` itself), example_text.jsonl,
-- example_preferences.jsonl and example_prompts.jsonl. The build runs it after linking the runner
-- (CMakeLists.txt): build/data/, which `cmake --install` copies to PREFIX/share/luatune/data. By hand:
--   build/runner scripts/make_example_data.lua output=/tmp/data/example_chat.jsonl
local cfg = config {
  output = "data/example_chat.jsonl",  -- the chat JSONL to write; the others go beside it; its directory must exist
}
-- The module beside this script, not one under $LUATUNE_HOME: the build writes what its checkout says.
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local example = dofile(here .. "/lua/example_data.lua")
local dir, name = cfg.output:match("^(.*)/([^/]*)$")
dir, name = dir or ".", name or cfg.output
assert(name == "example_chat.jsonl", "make_example_data: output must name example_chat.jsonl (the others go beside it), got "
  .. cfg.output)
local written = example.write_all(dir)
local names = {}
for file in pairs(written) do names[#names + 1] = file end
table.sort(names)
for _, file in ipairs(names) do print(("example data: %d lines -> %s/%s"):format(written[file], dir, file)) end
