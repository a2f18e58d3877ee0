// Optimizer updates per tensor (optim.h). AdamW follows torch.optim.AdamW (decoupled decay,
// bias-corrected moments, eps added after the square root); the 8-bit variant keeps the same
// arithmetic in float32 and stores the moments blockwise-quantized (host/train/adamw8bit.h).
#include "host/train/optim.h"

#include <ATen/ATen.h>

#include <cmath>

#include "host/core/error.h"

namespace luatune {

OptimState OptimState::create(const std::string& optimizer, double momentum, at::IntArrayRef shape,
                              c10::Device device) {
  OptimState s;
  auto f32 = at::TensorOptions(at::kFloat).device(device).requires_grad(false);
  if (optimizer == "adamw") {
    s.exp_avg = at::zeros(shape, f32);
    s.exp_avg_sq = at::zeros(shape, f32);
  } else if (optimizer == "adamw8bit") {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    s.q8 = adam8bit_init(n, device);
    s.is_8bit = true;
  } else if (momentum > 0) {
    s.momentum = at::zeros(shape, f32);
  }
  return s;
}

int64_t OptimState::bytes() const {
  int64_t b = 0;
  for (const at::Tensor* t : {&exp_avg, &exp_avg_sq, &momentum})
    if (t->defined()) b += t->numel() * static_cast<int64_t>(t->element_size());
  if (is_8bit) b += q8.bytes();
  return b;
}

std::vector<std::pair<std::string, at::Tensor>> OptimState::tensors(const std::string& name) const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (exp_avg.defined()) out.emplace_back("exp_avg." + name, exp_avg);
  if (exp_avg_sq.defined()) out.emplace_back("exp_avg_sq." + name, exp_avg_sq);
  if (momentum.defined()) out.emplace_back("momentum." + name, momentum);
  if (is_8bit)
    for (auto& [part, t] : q8.tensors("adamw8bit"))
      out.emplace_back(part + "." + name, t);  // adamw8bit.<part>.NAME
  return out;
}

void OptimState::load(const std::string& name, const std::function<at::Tensor(const std::string&)>& get,
                      const std::string& where) {
  if (is_8bit) {
    std::vector<std::pair<std::string, at::Tensor>> parts;
    for (auto& [part, t] : q8.tensors("adamw8bit")) {
      at::Tensor got = get(part + "." + name);
      LT_CHECK(got.defined(), where << ": tensor " << part << "." << name
                                    << " is missing (was the checkpoint written with another optimizer?)");
      parts.emplace_back(part, got);
    }
    q8.load(parts, "adamw8bit");
    return;
  }
  for (auto& [key, into] : tensors(name)) {
    at::Tensor t = get(key);
    LT_CHECK(t.defined(), where << ": tensor " << key
                                << " is missing (was the checkpoint written with another optimizer or other "
                                   "trainable parameters?)");
    LT_CHECK(t.sizes() == into.sizes(),
             where << ": tensor " << key << " has shape " << t.sizes() << ", expected " << into.sizes());
    at::Tensor dst = into;  // shares storage with the state's tensor
    dst.copy_(t);
  }
}

void optim_update(at::Tensor& w, const at::Tensor& g_in, OptimState& s, const OptimHyper& h) {
  const double lr = h.lr;
  if (h.optimizer == "adamw8bit") {
    at::Tensor wf = w.view({-1});
    adam8bit_update(wf, g_in.reshape({-1}), s.q8, lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.step);
    return;
  }
  at::Tensor g = g_in.to(w.scalar_type());
  if (h.optimizer == "adamw") {
    if (h.weight_decay > 0) w.mul_(1.0 - lr * h.weight_decay);
    const at::Tensor gf = g.to(at::kFloat);  // the moments are float32 whatever the weights are
    s.exp_avg.mul_(h.beta1).add_(gf, 1.0 - h.beta1);
    s.exp_avg_sq.mul_(h.beta2).addcmul_(gf, gf, 1.0 - h.beta2);
    const double t = static_cast<double>(h.step);
    const double bc1 = 1.0 - std::pow(h.beta1, t), bc2 = 1.0 - std::pow(h.beta2, t);
    at::Tensor denom = s.exp_avg_sq.sqrt();  // the update's one float32 temporary
    denom.div_(std::sqrt(bc2)).add_(h.eps);
    w.addcdiv_(s.exp_avg.to(w.scalar_type()), denom.to(w.scalar_type()), -lr / bc1);
    return;
  }
  if (h.weight_decay > 0) g = g.add(w, h.weight_decay);
  if (s.momentum.defined()) {
    s.momentum.mul_(h.momentum).add_(g.to(at::kFloat));
    g = s.momentum.to(w.scalar_type());
  }
  w.add_(g, -lr);
}

}  // namespace luatune
