-- tests/dist/env_probe.lua: a model-free recipe for the launcher tests (tests/dist/test_launch.sh).
-- Prints the variables its launcher set, one line to stdout and one to stderr, then exits: with
-- status 3 on rank fail_rank, forever busy on rank hang_rank: in Lua, or in a child
-- `sleep HANG_SLEEP` when hang_sleep is set (a unique number of seconds, so a test can see that a
-- rank's own children stop too). With ready_file set, the hanging rank creates it and the failing
-- rank waits for it, so the failure always finds the other rank hanging. Reads the environment
-- only: it needs no process group, so it runs whatever the runner does with WORLD_SIZE > 1.
local cfg = config {
  fail_rank = -1, hang_rank = -1,
  hang_sleep = "",  -- e.g. "1000.4321"
  marker = "",      -- any text; lets a test find the ranks with pgrep -f
  ready_file = "",
}

local rank = tonumber(os.getenv("RANK") or "0")
print(string.format("probe RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s LOCAL_WORLD_SIZE=%s MASTER_ADDR=%s MASTER_PORT=%s",
                    os.getenv("RANK"), os.getenv("WORLD_SIZE"), os.getenv("LOCAL_RANK"),
                    os.getenv("LOCAL_WORLD_SIZE"), os.getenv("MASTER_ADDR"), os.getenv("MASTER_PORT")))
print(string.format("probe OMP_NUM_THREADS=%s TORCHELASTIC_USE_AGENT_STORE=%s",
                    os.getenv("OMP_NUM_THREADS"), os.getenv("TORCHELASTIC_USE_AGENT_STORE")))
io.stderr:write(string.format("probe stderr from rank %d\n", rank))
io.stdout:write("probe no newline at the end")  -- the launcher still ends the line
io.stdout:flush()

if rank == cfg.hang_rank then
  print("\nprobe hanging " .. cfg.marker)
  io.stdout:flush()
  if cfg.hang_sleep ~= "" then  -- ready once the child runs
    os.execute((cfg.ready_file ~= "" and "touch '" .. cfg.ready_file .. "'; " or "") .. "sleep " .. cfg.hang_sleep)
  elseif cfg.ready_file ~= "" then
    assert(io.open(cfg.ready_file, "w")):close()
  end
  jit.off()  -- the runner stops a recipe from a Lua hook, and hooks do not run in compiled loops
  while true do end
end
if rank == cfg.fail_rank then
  while cfg.ready_file ~= "" and not io.open(cfg.ready_file) do os.execute("sleep 0.05") end
  os.exit(3)
end
print()
