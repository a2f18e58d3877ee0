-- tests/dist/ddp_train.lua: a few training steps on the tiny Llama, run as 1 process or as N ranks,
-- writing (rank 0) every step's loss and the final trainable weights to out/, for
-- tests/dist/test_ddp.sh to compare. die_rank/die_step make one rank exit abruptly (os.exit 9) or
-- hang (hang=true) before that step, for the failure tests.
local cfg = config {
  base = "build/tmp/tiny-llama", data = "tests/fixtures/data/text_small.jsonl", out = "",
  method = "full",          -- "full" or "lora"
  size = 4,                 -- rows per rank per step
  micro = 0,                -- micro_batch_size (0: whole batch)
  checkpoint_layers = false,
  shard = "none", optimizer = "adamw", offload = "none", dtype = "float32",
  out_dir = "",              -- the trainer's output_dir (checkpoints), with save_every/resume below
  save_every = 0, resume = false, kill_after = 0,  -- kill_after: this rank SIGKILLs itself after that step
  steps = 3, lr = 1e-3, weight_decay = 0.0,
  die_rank = -1, die_step = 0, hang = false,
}
local tok = tokenizer.load(cfg.base)
local model = models.load(cfg.base, { dtype = cfg.dtype })
if cfg.method == "lora" then
  lora.apply(model, { r = 4, alpha = 8, dropout = 0, targets = "all-linear", seed = 1 })
end
local ds = data.jsonl(cfg.data, { tokenizer = tok, max_length = 48, pack = true, seed = 3 })
local trainer = train.new(model, { learning_rate = cfg.lr, weight_decay = cfg.weight_decay, schedule = "constant",
                                   max_steps = cfg.steps, batch_size = cfg.micro,
                                   gradient_checkpointing = cfg.checkpoint_layers, shard = cfg.shard,
                                   optimizer = cfg.optimizer, optimizer_offload = cfg.offload,
                                   output_dir = cfg.out_dir ~= "" and cfg.out_dir or nil, save_steps = cfg.save_every })
local start = cfg.resume and trainer:resume() or 0
if start > 0 then print(string.format("resumed from step %d", start)) end
local mem = trainer:memory()
print(string.format("memory weights %d %d masters %d %d gradients %d %d optimizer %d %d host %d", mem.weights,
                    mem.full_weights, mem.masters, mem.full_masters, mem.gradients, mem.full_gradients, mem.optimizer,
                    mem.full_optimizer, mem.host))
local losses = {}
if cfg.out ~= "" and start > 0 then  -- a resumed run appends to the losses the first one wrote
  for l in io.lines(cfg.out .. "/losses.txt") do
    if not l:match("^eval") and #losses < start then losses[#losses + 1] = tonumber(l) end
  end
end
for step, batch in ds:batches { size = cfg.size, max_steps = cfg.steps, start = start } do
  if dist.rank() == cfg.die_rank and step == cfg.die_step then
    io.stderr:write(string.format("ddp_train: rank %d %s at step %d on purpose\n", dist.rank(),
                                  cfg.hang and "hangs" or "dies", step))
    io.stderr:flush()
    if cfg.hang then while true do os.execute("sleep 1") end end
    os.exit(9)
  end
  local s = trainer:step(batch)
  losses[#losses + 1] = s.loss
  if cfg.kill_after > 0 and step == cfg.kill_after then
    -- losses so far, then the hard kill a spot instance or the OOM killer gives
    if cfg.out ~= "" and dist.is_main() then
      os.execute("mkdir -p " .. cfg.out)
      local f = assert(io.open(cfg.out .. "/losses.txt", "w"))
      for _, l in ipairs(losses) do f:write(string.format("%.9f\n", l)) end
      f:close()
    end
    os.execute("kill -9 " .. io.open("/proc/self/stat"):read("*l"):match("^(%d+)"))
  end
  print(string.format("step %d loss %.9f tokens %d world %d tokens/s %.1f", step, s.loss, s.target_tokens,
                      dist.world_size(), s.tokens_per_s))
end
local e = trainer:evaluate(ds, { batch_size = 3 })
print(string.format("eval loss %.9f", e.loss))
if cfg.out ~= "" and dist.is_main() then
  os.execute("mkdir -p " .. cfg.out)
  local f = assert(io.open(cfg.out .. "/losses.txt", "w"))
  for _, l in ipairs(losses) do f:write(string.format("%.9f\n", l)) end
  f:write(string.format("eval %.9f\n", e.loss))
  f:close()
  local weights = cfg.method == "lora" and lora.parameters(model) or model:parameters()
  torch.save(weights, cfg.out .. "/weights.pt")
end
