-- tests/dist/compare.lua a=DIR b=DIR [rtol=1e-5]: the losses and weights two ddp_train runs wrote
-- agree (exit 1 naming the first that does not).
-- Why atol 3e-6: 2 ranks sum a gradient in another order than 1 process (float32, last bits), and AdamW
-- turns a last-bit change of a gradient whose terms nearly cancel into up to ~1e-3 of that element's
-- update; after 3 steps at lr 1e-3 (updates up to 3e-3) that is ~1e-6 (seen: 1.06e-6 where an update
-- was 7.6e-4). A real error in the data-parallel step (a rank's rows missing, a sum not divided)
-- moves weights by the size of an update, 1e-4 and more.
local cfg = config { a = "", b = "", rtol = 1e-5, atol = 3e-6 }
local function lines(p)
  local t = {}
  for l in io.lines(p) do t[#t + 1] = tonumber(l:match("([-%d.e]+)$")) end
  return t
end
local la, lb = lines(cfg.a .. "/losses.txt"), lines(cfg.b .. "/losses.txt")
assert(#la == #lb and #la > 0, "different numbers of losses: " .. #la .. " vs " .. #lb)
for i = 1, #la do
  local d = math.abs(la[i] - lb[i])
  if d > cfg.atol + cfg.rtol * math.abs(la[i]) then
    error(string.format("loss %d differs: %.9f vs %.9f", i, la[i], lb[i]))
  end
end
local wa, wb = torch.load(cfg.a .. "/weights.pt"), torch.load(cfg.b .. "/weights.pt")
local n, worst = 0, 0
for name, t in pairs(wa) do
  local u = assert(wb[name], "weight " .. name .. " missing from " .. cfg.b)
  local diff = (t - u):abs():max():item()
  worst = math.max(worst, diff)
  if not torch.allclose(t, u, { rtol = cfg.rtol, atol = cfg.atol }) then
    error(string.format("weight %s differs (max |diff| %.3g)", name, diff))
  end
  n = n + 1
end
print(string.format("compare: %d losses and %d weights agree (max |weight diff| %.3g)", #la, n, worst))
