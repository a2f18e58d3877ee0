// Recompute-in-backward as a custom autograd function. The forward runs under no-grad and saves only
// its input and the random generator state; the backward restores that state, reruns the function
// with grad enabled, and back-propagates through it (a re-entrant backward, as PyTorch's own
// reentrant checkpoint does), which accumulates the weights' gradients and yields the input's.
#include "host/train/recompute.h"

#include <ATen/ATen.h>
#include <ATen/core/Generator.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

namespace luatune {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FnHolder : torch::CustomClassHolder {
  LayerFn fn;
  RecomputeHooks hooks;
  at::Tensor cpu_rng, cuda_rng;
};

at::Generator cuda_generator(const at::Tensor& x) {
  return x.is_cuda() ? at::globalContext().defaultGenerator(x.device()) : at::Generator();
}

struct Recompute : public torch::autograd::Function<Recompute> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::intrusive_ptr<FnHolder> holder) {
    holder->cpu_rng = at::detail::getDefaultCPUGenerator().get_state();
    if (at::Generator g = cuda_generator(x); g.defined()) holder->cuda_rng = g.get_state();
    ctx->saved_data["fn"] =
        c10::IValue::make_capsule(c10::static_intrusive_pointer_cast<torch::CustomClassHolder>(holder));
    ctx->save_for_backward({x});
    at::NoGradGuard no_grad;
    if (holder->hooks.before_forward) holder->hooks.before_forward();
    at::Tensor y = holder->fn(x);
    if (holder->hooks.after_forward) holder->hooks.after_forward();
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto holder = c10::static_intrusive_pointer_cast<FnHolder>(ctx->saved_data["fn"].toCapsule());
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    // Replay the forward's random draws, then put the generators back where backward found them.
    at::Generator cpu = at::detail::getDefaultCPUGenerator();
    at::Tensor cpu_now = cpu.get_state();
    cpu.set_state(holder->cpu_rng);
    at::Generator cuda = cuda_generator(x);
    at::Tensor cuda_now;
    if (cuda.defined() && holder->cuda_rng.defined()) {
      cuda_now = cuda.get_state();
      cuda.set_state(holder->cuda_rng);
    }
    at::Tensor y;
    if (holder->hooks.before_backward) holder->hooks.before_backward();
    {
      at::AutoGradMode grad(true);
      y = holder->fn(x);
    }
    cpu.set_state(cpu_now);
    if (cuda_now.defined()) cuda.set_state(cuda_now);
    torch::autograd::backward({y}, {grad_out[0]});
    y = at::Tensor();
    if (holder->hooks.after_backward) holder->hooks.after_backward();
    return {x.grad(), at::Tensor()};
  }
};

}  // namespace

at::Tensor recompute_forward(const LayerFn& fn, const at::Tensor& x) {
  return recompute_forward(fn, x, {});
}

at::Tensor recompute_forward(const LayerFn& fn, const at::Tensor& x, const RecomputeHooks& hooks) {
  auto holder = c10::make_intrusive<FnHolder>();
  holder->fn = fn;
  holder->hooks = hooks;
  // With frozen embeddings (LoRA) the first layer's input needs no gradient, and an autograd
  // function whose inputs need none is cut from the graph, losing the adapters' gradients
  // (HF works around the same thing with enable_input_require_grads). A detached copy that
  // requires grad keeps the layer in the graph; its own gradient goes nowhere.
  if (!x.requires_grad()) return Recompute::apply(x.detach().requires_grad_(true), holder);
  return Recompute::apply(x, holder);
}

}  // namespace luatune
