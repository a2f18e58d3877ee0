-- tests/dist/distill_train.lua: a few distillation steps (the tiny Llama as the teacher, a smaller
-- random student), run as 1 process or as N ranks, writing (rank 0) every step's loss and kd_loss,
-- the evaluations and the final student weights to out/, for tests/dist/test_teacher_shard.sh to
-- compare (with tests/dist/compare.lua). Prints the teacher's layer memory ("teacher ...").
local cfg = config {
  base = "build/tmp/tiny-llama", data = "tests/fixtures/data/text_small.jsonl", out = "",
  size = 4,                 -- rows per rank per step
  size0 = 0,                -- rows on rank 0 instead (uneven ranks: different numbers of micro-batches)
  micro = 0,                -- micro_batch_size (0: whole batch)
  shard = "none",           -- the student's ZeRO stage
  shard_teacher = false,
  hidden = false,           -- also a hidden-state pair (student layer 1, teacher layer 1)
  steps = 3, lr = 1e-3,
}
local tok = tokenizer.load(cfg.base)
local teacher = models.load(cfg.base, { dtype = "float32" })
local tc = teacher:config()
local student = models.init { arch = "llama", vocab_size = tc.vocab_size, hidden_size = 32, intermediate_size = 48,
                              num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2, seed = 5 }
local kd = distill.new(teacher, student, { alpha = 0.5, chunk = 32, shard_teacher = cfg.shard_teacher,
                                           hidden_layers = cfg.hidden and { { 1, 1 } } or nil, seed = 2 })
local m = kd:teacher_memory()
print(string.format("teacher sharded %s layer_elements %d %d layer_bytes %d %d", tostring(m.sharded),
                    m.layer_elements, m.full_layer_elements, m.layer_bytes, m.full_layer_bytes))
local ds = data.jsonl(cfg.data, { tokenizer = tok, max_length = 48, pack = true, seed = 3 })
local size = (dist.rank() == 0 and cfg.size0 > 0) and cfg.size0 or cfg.size
local trainer = train.new(student, { learning_rate = cfg.lr, schedule = "constant", max_steps = cfg.steps, batch_size = cfg.micro,
                                     shard = cfg.shard, gradient_checkpointing = cfg.shard == "full", hooks = { kd } })
local lines = {}
for step, batch in ds:batches { size = size, max_steps = cfg.steps } do
  local s = trainer:step(batch)
  lines[#lines + 1] = string.format("loss %.9f", s.loss)
  lines[#lines + 1] = string.format("kd_loss %.9f", s.kd_loss)
  print(string.format("step %d loss %.9f kd_loss %.9f world %d", step, s.loss, s.kd_loss, dist.world_size()))
end
-- Evaluation: ranks take every N-th batch of 4 rows (15 batches: rank 0 evaluates one more), then
-- a list of batches of another length on each rank.
print(string.format("eval batches %d of %d rows", math.ceil(#ds / 4), #ds))  -- 15 of 60
local e = trainer:evaluate(ds, { batch_size = 4 })
lines[#lines + 1] = string.format("eval_loss %.9f", e.loss)
lines[#lines + 1] = string.format("eval_kd_loss %.9f", e.kd_loss)
local list = {}
torch.manual_seed(7 + dist.rank())
for i = 1, dist.rank() == 0 and 2 or 1 do
  list[i] = train.batch { ids = torch.randint(0, 1000, { 2, 12 }, { dtype = "int64" }) }
end
local el = trainer:evaluate(list)
print(string.format("eval loss %.9f kd_loss %.9f list kd_loss %.9f", e.loss, e.kd_loss, el.kd_loss))
m = kd:teacher_memory()  -- still sharded after the steps and evaluations
print(string.format("teacher after sharded %s layer_elements %d %d", tostring(m.sharded), m.layer_elements,
                    m.full_layer_elements))
if cfg.out ~= "" and dist.is_main() then
  os.execute("mkdir -p " .. cfg.out)
  local f = assert(io.open(cfg.out .. "/losses.txt", "w"))
  for _, l in ipairs(lines) do f:write(l, "\n") end
  f:close()
  torch.save(student:parameters(), cfg.out .. "/weights.pt")
end
