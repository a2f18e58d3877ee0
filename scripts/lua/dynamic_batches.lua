-- scripts/lua/dynamic_batches.lua: Sheared-LLaMA's dynamic batch loading (docs/pruning.md). Each
-- batch row picks its domain from the current proportions and takes that domain's next unused row;
-- every so often the recipe evaluates each domain and update() moves the proportions towards the
-- domains whose loss is furthest above its reference loss (the DoReMi-style rule).
--   local dyn = require("dynamic_batches").new { domains = { web = ds1, code = ds2 },
--                                                reference_loss = { web = 2.1, code = 0.9 } }
--   local b, counts = dyn:batch(8)          -- a Batch for trainer:step, rows per domain
--   dyn:update { web = 2.4, code = 0.95 }   -- per-domain evaluation losses
--   dyn:proportions()                       -- { web = 0.57, code = 0.43 }
local M = {}
M.__index = M

local OPTIONS = { domains = true, proportions = true, reference_loss = true, eta = true, smoothing = true, seed = true }

local function fail(msg) error("dynamic_batches: " .. msg, 3) end

-- Park-Miller "minimal standard" generator: products stay below 2^53, so doubles are exact.
local function next_uniform(self)
  self.rng = (self.rng * 48271) % 2147483647
  return self.rng / 2147483647
end

-- dynamic_batches.new{domains=, proportions= (default uniform), reference_loss=, eta=1,
-- smoothing=1e-4, seed=0}
function M.new(opts)
  if type(opts) ~= "table" then fail("new expects an options table") end
  for k in pairs(opts) do
    if not OPTIONS[k] then fail("unknown option '" .. tostring(k) .. "' (expected domains, proportions, "
                                .. "reference_loss, eta, smoothing, seed)") end
  end
  if type(opts.domains) ~= "table" then fail("option 'domains' must be a table of name = Dataset") end
  local names = {}
  for name, ds in pairs(opts.domains) do
    if type(name) ~= "string" then fail("domain names must be strings") end
    local ok, n = pcall(function() return ds:size() end)
    if not ok or type(n) ~= "number" then fail("domain '" .. name .. "' is not a Dataset") end
    if n < 1 then fail("domain '" .. name .. "' has no rows") end
    names[#names + 1] = name
  end
  if #names == 0 then fail("option 'domains' is empty") end
  table.sort(names)  -- a fixed order, so the draws depend only on the seed
  local self = setmetatable({ names = names, domains = opts.domains, weights = {}, next_row = {},
                              reference = {}, eta = opts.eta or 1, smoothing = opts.smoothing or 1e-4,
                              rng = ((opts.seed or 0) % 2147483646) + 1 }, M)
  for _ = 1, 10 do next_uniform(self) end  -- small seeds start with small draws; move past them
  if self.smoothing < 0 or self.smoothing > 1 then fail("smoothing must be in [0, 1]") end
  local total = 0
  for _, name in ipairs(names) do
    local w = opts.proportions and opts.proportions[name] or (opts.proportions and 0 or 1)
    if type(w) ~= "number" or w < 0 then fail("proportion of '" .. name .. "' must be a number >= 0") end
    self.weights[name] = w
    total = total + w
    self.next_row[name] = 1
  end
  for name in pairs(opts.proportions or {}) do
    if not opts.domains[name] then fail("proportions names '" .. tostring(name) .. "', which is not a domain") end
  end
  if total <= 0 then fail("proportions sum to 0") end
  for _, name in ipairs(names) do self.weights[name] = self.weights[name] / total end
  for name, v in pairs(opts.reference_loss or {}) do
    if not opts.domains[name] then fail("reference_loss names '" .. tostring(name) .. "', which is not a domain") end
    if type(v) ~= "number" then fail("reference_loss of '" .. name .. "' must be a number") end
    self.reference[name] = v
  end
  return self
end

-- The current proportions, a fresh table { name = weight } summing to 1.
function M:proportions()
  local out = {}
  for _, name in ipairs(self.names) do out[name] = self.weights[name] end
  return out
end

-- The domain of one row: inverse CDF of the proportions.
local function draw_domain(self)
  local u, acc = next_uniform(self), 0
  for _, name in ipairs(self.names) do
    acc = acc + self.weights[name]
    if u < acc then return name end
  end
  return self.names[#self.names]
end

-- dyn:batch(size) -> Batch, { name = rows drawn }. A domain's rows are taken in order and start
-- over when it runs out. Rows are padded to the longest (padding: id 0, no target, its own segment).
function M:batch(size)
  if type(size) ~= "number" or size < 1 or size % 1 ~= 0 then fail("batch expects a row count >= 1") end
  local rows, counts, longest = {}, {}, 0
  for _, name in ipairs(self.names) do counts[name] = 0 end
  for i = 1, size do
    local name = draw_domain(self)
    local ds, r = self.domains[name], self.next_row[name]
    rows[i] = ds:row(r)
    self.next_row[name] = r % ds:size() + 1
    counts[name] = counts[name] + 1
    if #rows[i].ids > longest then longest = #rows[i].ids end
  end
  local ids, targets, positions, segments = {}, {}, {}, {}
  for i, row in ipairs(rows) do
    local n = #row.ids
    local a, b, c, d = {}, {}, {}, {}
    local pad_segment = (row.segments[n] or -1) + 1
    for t = 1, longest do
      if t <= n then
        a[t], b[t], c[t], d[t] = row.ids[t], row.targets[t], row.positions[t], row.segments[t]
      else
        a[t], b[t], c[t], d[t] = 0, -100, t - n - 1, pad_segment
      end
    end
    ids[i], targets[i], positions[i], segments[i] = a, b, c, d
  end
  local int64 = { dtype = "int64" }
  return train.batch { ids = torch.tensor(ids, int64), targets = torch.tensor(targets, int64),
                       positions = torch.tensor(positions, int64), segments = torch.tensor(segments, int64) }, counts
end

-- dyn:update{ name = eval loss, ... } -> the new proportions. Needs a loss and a reference loss
-- for every domain:  a = softmax(log w + eta * (loss - reference)),  w = (1 - c) a + c / k.
function M:update(losses)
  if type(losses) ~= "table" then fail("update expects a table of per-domain losses") end
  local k, logits, top = #self.names, {}, -math.huge
  for _, name in ipairs(self.names) do
    local loss, ref = losses[name], self.reference[name]
    if type(loss) ~= "number" then fail("update: no loss for domain '" .. name .. "'") end
    if type(ref) ~= "number" then fail("update: no reference_loss for domain '" .. name .. "'") end
    logits[name] = math.log(math.max(self.weights[name], 1e-300)) + self.eta * (loss - ref)
    if logits[name] > top then top = logits[name] end
  end
  local sum = 0
  for _, name in ipairs(self.names) do
    logits[name] = math.exp(logits[name] - top)
    sum = sum + logits[name]
  end
  local c, total = self.smoothing, 0
  for _, name in ipairs(self.names) do
    self.weights[name] = (1 - c) * logits[name] / sum + c / k
    total = total + self.weights[name]
  end
  for _, name in ipairs(self.names) do self.weights[name] = self.weights[name] / total end
  return self:proportions()
end

return M
