-- recipes/quickstart.lua: fit a tiny linear model with autograd on synthetic data (a demo of the torch module until training lands)
-- Reads top to bottom: config, data, one visible loop with "every N steps" blocks, a final check.
local cfg = config {
  seed = 0,
  samples = 256,     -- synthetic (x, y) pairs
  features = 8,
  steps = 200,
  lr = 0.1,
  log_every = 50,
  noise = 0.01,
}

torch.manual_seed(cfg.seed)
local true_w = torch.randn(cfg.features, 1)
local x = torch.randn(cfg.samples, cfg.features)
local y = x:matmul(true_w) + torch.randn(cfg.samples, 1) * cfg.noise

local w = torch.zeros(cfg.features, 1, { requires_grad = true })
local loss
for step = 1, cfg.steps do
  loss = torch.mse_loss(x:matmul(w), y)
  w:zero_grad()
  loss:backward()
  torch.no_grad(function() w:index_set(":", w - w:grad() * cfg.lr) end)
  if step % cfg.log_every == 0 or step == 1 then
    print(string.format("step %4d  loss %.6f", step, loss:item()))
  end
end

local err = (w:detach() - true_w):abs():max():item()
print(string.format("max |w - w_true| = %.4f after %d steps", err, cfg.steps))
assert(err < 0.05, "quickstart did not converge: raise steps or lr")
