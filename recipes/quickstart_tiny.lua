-- The quickstart on a tiny random model (seconds, for the test suite): a tiny Llama learns sums by full fine-tuning, then a LoRA teaches it to answer questions about them.
-- runner quickstart_tiny [check=true ...]  (the main job on a real model: runner quickstart)
-- It uses the real Llama 3.1 tokenizer and downloads nothing beyond set-up (scripts/setup.sh fetches the
-- tokenizer); under a minute on 2 CPU cores. Accuracy before and after the LoRA; both stages and the
-- accuracy table in output_dir/report.html (runner report output_dir draws it again).
-- Stage 1 (full fine-tuning, "pretraining"): statements "3 + 4 = 7" for every pair of digits.
-- Stage 2 (LoRA): question/answer pairs "What is 3 plus 4?\nAnswer: 7" for 80% of the pairs; the
-- other 20% are held out. Accuracy: 4-way multiple choice by log-likelihood (eval module), before
-- and after the LoRA, on seen and held-out questions.
local cfg = config {
  tokenizer = "tokenizers/llama3_1",  -- tokenizer directory (scripts/setup.sh fetches it)
  output_dir = "out/quickstart_tiny",  -- adapter/, metrics.jsonl (both stages) and report.html go here
  seed = 0,                       -- seeds the model's init, the data order, the held-out split and the distractors
  model = {                       -- the tiny Llama's shape (tied embeddings)
    hidden_size = 96,             -- width of the residual stream
    intermediate_size = 256,      -- MLP width
    num_hidden_layers = 2,        -- decoder layers
    num_attention_heads = 4,      -- query heads
    num_key_value_heads = 2,      -- key/value heads (grouped-query attention)
  },
  pretrain = {                    -- stage 1: full fine-tuning on "3 + 4 = 7" statements
    max_steps = 150,              -- optimizer steps
    learning_rate = 3e-3,         -- peak learning rate; 10 warm-up steps, cosine decay to 0
    batch_size = 8,               -- rows per step
  },
  lora = {                        -- stage 2: LoRA on the question/answer pairs (docs/lora.md)
    max_steps = 150,              -- optimizer steps
    learning_rate = 1e-2,         -- peak learning rate; 10 warm-up steps, cosine decay to 0
    batch_size = 8,               -- rows per step
    r = 16,                       -- rank of each adapter
    alpha = 32,                   -- scaling: an adapter's update is multiplied by alpha / r
    dropout = 0.0,                -- dropout on each adapter's input; 0 = none
    targets = { "q_proj", "k_proj", "v_proj", "o_proj",
                "gate_proj", "up_proj", "down_proj" },  -- modules that get adapters: names, or "all-linear"
  },
  eval_fraction = 0.2,            -- share of the digit pairs held out of the LoRA stage (held-out accuracy)
  shard = "none",                 -- ZeRO over data-parallel ranks: none | optimizer | gradients | full (docs/zero.md)
  optimizer = "adamw",            -- adamw | adamw8bit (blockwise 8-bit moments) | sgd
  optimizer_offload = "none",     -- none | cpu (fp32 masters and optimizer states in host memory)
  check = false,                  -- fail unless the LoRA clearly taught the task (the test suite sets it)
  wandb_project = "",             -- W&B project (one run, both stages); "" = none
  profile = "",                   -- trace profile_steps steps of each stage into DIR/pretrain, DIR/lora (docs/profiling.md)
  profile_steps = 2,              -- optimizer steps traced per stage when profile is set
  profile_skip = 1,               -- steps run untraced before each stage's trace starts (warm-up)
}

-- The task, generated: every (a, b) pair of digits, a deterministic 80/20 split, 3 distractors each.
local seed = cfg.seed
local function rand(n) seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n end
local pairs_all, seen, unseen = {}, {}, {}
for a = 0, 9 do for b = 0, 9 do pairs_all[#pairs_all + 1] = { a, b } end end
for _, p in ipairs(pairs_all) do
  if rand(1000) < cfg.eval_fraction * 1000 then unseen[#unseen + 1] = p else seen[#seen + 1] = p end
end
local function question(p) return ("What is %d plus %d?"):format(p[1], p[2]) end
local function mc_records(list)
  local out = {}
  for _, p in ipairs(list) do
    local right, choices = p[1] + p[2], {}
    local used = { [right] = true }
    choices[1] = tostring(right)
    while #choices < 4 do
      local d = rand(19)
      if not used[d] then used[d] = true; choices[#choices + 1] = tostring(d) end
    end
    local k = rand(4) + 1  -- where the right answer goes
    choices[1], choices[k] = choices[k], choices[1]
    out[#out + 1] = { question = question(p), choices = choices, answer = k - 1 }
  end
  return out
end
local eval_seen, eval_unseen = mc_records(seen), mc_records(unseen)

local tok = tokenizer.load(require("paths").resolve(cfg.tokenizer))  -- also from outside the checkout
local model = models.init { arch = "llama", tokenizer = tok, seed = cfg.seed, tie_word_embeddings = true,
                            hidden_size = cfg.model.hidden_size,
                            intermediate_size = cfg.model.intermediate_size,
                            num_hidden_layers = cfg.model.num_hidden_layers,
                            num_attention_heads = cfg.model.num_attention_heads,
                            num_key_value_heads = cfg.model.num_key_value_heads }
print(tostring(model))

-- One log for both stages: output_dir/metrics.jsonl, the LoRA's steps numbered after pretraining's,
-- each stage's first step noted with its name (the report's phases), the accuracies as eval_ values.
local total_steps = cfg.pretrain.max_steps + cfg.lora.max_steps
local log = metrics.open { console = true, jsonl = cfg.output_dir .. "/metrics.jsonl", total_steps = total_steps,
                           config = cfg, wandb = { project = cfg.wandb_project, group = "quickstart" } }

local function accuracy(tag, step)
  local a = eval.multiple_choice(model, tok, eval_seen, { choices_as = "text" })
  local b = eval.multiple_choice(model, tok, eval_unseen, { choices_as = "text" })
  print(("%-22s accuracy: seen %.2f (%d), held out %.2f (%d)"):format(tag, a.acc, a.n, b.acc, b.n))
  log:write(step, { eval_acc_seen = a.acc, eval_acc_held_out = b.acc })
  return a.acc, b.acc
end

-- One stage's loop, logged from step offset + 1; returns its first and last loss and its last step.
local function run_stage(name, note, ds, t, offset)
  -- train.new's keys of the config (shard, optimizer, profile, ...) and of the stage (learning_rate, max_steps,
  -- batch_size); no checkpoints (output_dir = ""); the profile traces into profile/<stage>.
  local trainer = require("run").trainer(model, cfg, config.pick(t, "train.new", {
    schedule = "cosine", warmup_steps = 10, weight_decay = 0.0, output_dir = "" }), name)
  local first, last, at = nil, nil, offset
  for step, batch in ds:batches { size = t.batch_size, max_steps = t.max_steps } do
    local s = trainer:step(batch)
    if step == 1 then s.note = note end
    first = first or s.loss
    last, at = s.loss, offset + step
    log:write(at, s)
    if log:stopped() then break end  -- stopped from the W&B UI
  end
  return first, last, at
end

-- Stage 1: full fine-tuning on statements (the base model).
local statements = {}
for _, p in ipairs(pairs_all) do statements[#statements + 1] = { text = ("%d + %d = %d"):format(p[1], p[2], p[1] + p[2]) } end
local pre = data.from_records(statements, { tokenizer = tok, format = "text", max_length = 64, pack = true,
                                            seed = cfg.seed })
local pre_first, pre_last, pre_end = run_stage("pretrain", "pretraining (full fine-tuning on statements)", pre,
                                               cfg.pretrain, 0)
local base_seen, base_unseen = accuracy("after pretraining", pre_end)

-- Stage 2: LoRA on question/answer pairs (prompt masked, loss on the answer and EOS).
local qa = {}
for _, p in ipairs(seen) do qa[#qa + 1] = { prompt = question(p) .. "\nAnswer:", response = " " .. (p[1] + p[2]) } end
local sft = data.from_records(qa, { tokenizer = tok, format = "prompt_response", chat = false, max_length = 64,
                                    pack = true, seed = cfg.seed })
lora.apply(model, config.pick(cfg.lora, "lora.apply", { seed = cfg.seed }))
local n = model:num_params()
print(("LoRA: %d trainable of %d parameters"):format(n.trainable, n.total))
local lora_first, lora_last, lora_end = run_stage("lora", "LoRA (questions and answers)", sft, cfg.lora, pre_end)
local lora_seen, lora_unseen = accuracy("after LoRA", lora_end)
lora.save(model, cfg.output_dir .. "/adapter")
log:close()  -- writes output_dir/report.html: both stages' curves, the phases and the accuracy table

print("\nsummary")
print(("  %-28s %10s %10s"):format("", "seen", "held out"))
print(("  %-28s %10.2f %10.2f"):format("chance", 0.25, 0.25))
print(("  %-28s %10.2f %10.2f"):format("accuracy before LoRA", base_seen, base_unseen))
print(("  %-28s %10.2f %10.2f"):format("accuracy after LoRA", lora_seen, lora_unseen))
print(("  %-28s %10.3f -> %.3f"):format("pretraining loss", pre_first, pre_last))
print(("  %-28s %10.3f -> %.3f"):format("LoRA loss (answers only)", lora_first, lora_last))
print("  adapter (PEFT format): " .. cfg.output_dir .. "/adapter")
if cfg.check then
  assert(pre_last < pre_first / 4, "pretraining did not lower the loss enough")
  assert(lora_last < lora_first / 2, "the LoRA stage did not lower the loss enough")
  assert(lora_seen >= base_seen + 0.3, "LoRA did not raise accuracy on the questions it was trained on")
  assert(lora_unseen > base_unseen, "LoRA did not raise accuracy on held-out questions")
end
