// Chunked cross-entropy as a custom autograd function: forward keeps only the per-row log-sum-exp;
// backward recomputes each chunk's logits, forms softmax - onehot, and accumulates the gradients of
// hidden and weight, so peak memory holds one chunk of logits instead of N x V.
#include "host/train/loss.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "host/core/error.h"

namespace luatune {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Logits of rows [r0, r0 + n) in float32, after the optional softcap; also the pre-softcap tanh
// for the backward pass.
at::Tensor chunk_logits(const at::Tensor& h, const at::Tensor& w, double softcap, at::Tensor* tanh_out) {
  at::Tensor z = at::matmul(h, w.t()).to(at::kFloat);  // (n, V) in the model dtype, then float32
  if (softcap > 0) {
    at::Tensor t = at::tanh(z / softcap);
    if (tanh_out) *tanh_out = t;
    return t * softcap;
  }
  return z;
}

struct ChunkedCE : public torch::autograd::Function<ChunkedCE> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& targets, int64_t chunk, double softcap) {
    at::NoGradGuard no_grad;
    const int64_t N = hidden.size(0);
    at::Tensor total = at::zeros({}, hidden.options().dtype(at::kFloat));
    at::Tensor lse_all = at::empty({N}, hidden.options().dtype(at::kFloat));
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
      int64_t n = std::min(chunk, N - r0);
      at::Tensor logits = chunk_logits(hidden.narrow(0, r0, n), weight, softcap, nullptr);
      at::Tensor t = targets.narrow(0, r0, n);
      at::Tensor valid = t.ne(-100);
      at::Tensor lse = at::logsumexp(logits, -1);
      at::Tensor picked = logits.gather(1, t.clamp_min(0).unsqueeze(1)).squeeze(1);
      total += ((lse - picked) * valid).sum();
      lse_all.narrow(0, r0, n).copy_(lse);
    }
    ctx->save_for_backward({hidden, weight, targets, lse_all});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["weight_grad"] = weight.requires_grad();  // frozen LM head (LoRA): skip its grad
    return total;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    at::Tensor hidden = saved[0], weight = saved[1], targets = saved[2], lse_all = saved[3];
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const double softcap = ctx->saved_data["softcap"].toDouble();
    const bool weight_grad = ctx->saved_data["weight_grad"].toBool();
    at::Tensor g = grad_out[0].to(at::kFloat);  // scalar
    const int64_t N = hidden.size(0);
    at::Tensor grad_hidden = at::empty_like(hidden);
    at::Tensor grad_weight =
        weight_grad ? at::zeros(weight.sizes(), weight.options().dtype(at::kFloat)) : at::Tensor();
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
      int64_t n = std::min(chunk, N - r0);
      at::Tensor h = hidden.narrow(0, r0, n);
      at::Tensor th;
      at::Tensor logits = chunk_logits(h, weight, softcap, &th);
      at::Tensor t = targets.narrow(0, r0, n);
      at::Tensor valid = t.ne(-100).to(at::kFloat).unsqueeze(1);  // (n, 1)
      // In place on the logits buffer: at 128k vocabularies each (n, V) pass is the cost.
      at::Tensor d = logits.sub_(lse_all.narrow(0, r0, n).unsqueeze(1)).exp_();  // softmax (n, V)
      d.scatter_add_(1, t.clamp_min(0).unsqueeze(1), -at::ones({n, 1}, d.options()));
      d.mul_(valid * g);                                    // dLoss/dlogits
      if (softcap > 0) d.mul_(th.mul_(th).neg_().add_(1));  // through tanh(z/c)*c
      grad_hidden.narrow(0, r0, n).copy_(at::matmul(d.to(hidden.scalar_type()), weight));
      if (weight_grad) grad_weight.add_(at::matmul(d.t(), h.to(at::kFloat)));
    }
    return {grad_hidden, weight_grad ? grad_weight.to(weight.scalar_type()) : at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

// Per-row log-probabilities of the targets: forward keeps the per-row log-sum-exp, backward
// recomputes each chunk's logits and forms g_row * (onehot - softmax).
struct ChunkedLogprobs : public torch::autograd::Function<ChunkedLogprobs> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& targets, int64_t chunk, double softcap) {
    at::NoGradGuard no_grad;
    const int64_t N = hidden.size(0);
    at::Tensor out = at::zeros({N}, hidden.options().dtype(at::kFloat));
    at::Tensor lse_all = at::empty({N}, hidden.options().dtype(at::kFloat));
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
      int64_t n = std::min(chunk, N - r0);
      at::Tensor logits = chunk_logits(hidden.narrow(0, r0, n), weight, softcap, nullptr);
      at::Tensor t = targets.narrow(0, r0, n);
      at::Tensor lse = at::logsumexp(logits, -1);
      at::Tensor picked = logits.gather(1, t.clamp_min(0).unsqueeze(1)).squeeze(1);
      out.narrow(0, r0, n).copy_((picked - lse) * t.ne(-100));
      lse_all.narrow(0, r0, n).copy_(lse);
    }
    ctx->save_for_backward({hidden, weight, targets, lse_all});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["weight_grad"] = weight.requires_grad();
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    at::Tensor hidden = saved[0], weight = saved[1], targets = saved[2], lse_all = saved[3];
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const double softcap = ctx->saved_data["softcap"].toDouble();
    const bool weight_grad = ctx->saved_data["weight_grad"].toBool();
    at::Tensor g = grad_out[0].to(at::kFloat);  // (N)
    const int64_t N = hidden.size(0);
    at::Tensor grad_hidden = at::empty_like(hidden);
    at::Tensor grad_weight =
        weight_grad ? at::zeros(weight.sizes(), weight.options().dtype(at::kFloat)) : at::Tensor();
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
      int64_t n = std::min(chunk, N - r0);
      at::Tensor h = hidden.narrow(0, r0, n);
      at::Tensor th;
      at::Tensor logits = chunk_logits(h, weight, softcap, &th);
      at::Tensor t = targets.narrow(0, r0, n);
      at::Tensor scale = (t.ne(-100).to(at::kFloat) * g.narrow(0, r0, n)).unsqueeze(1);  // (n, 1)
      // d log p[t] / d logits = onehot - softmax; negate the softmax in place on the logits buffer.
      at::Tensor d = logits.sub_(lse_all.narrow(0, r0, n).unsqueeze(1)).exp_().neg_();
      d.scatter_add_(1, t.clamp_min(0).unsqueeze(1), at::ones({n, 1}, d.options()));
      d.mul_(scale);
      if (softcap > 0) d.mul_(th.mul_(th).neg_().add_(1));
      grad_hidden.narrow(0, r0, n).copy_(at::matmul(d.to(hidden.scalar_type()), weight));
      if (weight_grad) grad_weight.add_(at::matmul(d.t(), h.to(at::kFloat)));
    }
    return {grad_hidden, weight_grad ? grad_weight.to(weight.scalar_type()) : at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor chunked_token_logprobs(const at::Tensor& hidden, const at::Tensor& weight,
                                  const at::Tensor& targets, int64_t chunk, double softcap) {
  LT_CHECK(hidden.dim() == 2 && targets.dim() == 1 && targets.size(0) == hidden.size(0),
           "chunked_token_logprobs: hidden must be (N, C) and targets (N)");
  LT_CHECK(chunk > 0, "chunked_token_logprobs: chunk must be positive");
  return ChunkedLogprobs::apply(hidden, weight, targets.to(at::kLong), chunk, softcap);
}

at::Tensor chunked_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight,
                                 const at::Tensor& targets, int64_t chunk, double softcap) {
  LT_CHECK(hidden.dim() == 2 && targets.dim() == 1 && targets.size(0) == hidden.size(0),
           "chunked_cross_entropy: hidden must be (N, C) and targets (N)");
  LT_CHECK(chunk > 0, "chunked_cross_entropy: chunk must be positive");
  return ChunkedCE::apply(hidden, weight, targets.to(at::kLong), chunk, softcap);
}

}  // namespace luatune
