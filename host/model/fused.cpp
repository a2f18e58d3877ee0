// RMSNorm, RoPE and the gated activation as autograd Functions (fused.h). Each op has a `run`
// (forward, no autograd), a `grads` (the hand-written backward) and a Function joining them; both
// halves take the CUDA kernel for f32/bf16/f16 CUDA tensors in builds with kernels, else ATen
// compositions, which are also the reference the kernels are tested against
// (tests/cuda/test_fused_kernels.cpp). The forward compositions are the ones the transformer used
// before, op for op, so CPU outputs did not change by a bit.
#include "host/model/fused.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include <utility>

#include "host/core/device.h"
#include "host/core/error.h"

#ifdef LUATUNE_HAS_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "host/model/kernels/fused_cuda.h"
#endif

namespace luatune {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// float32 for every dtype but float64, which stays exact (the tests' reference inputs).
at::ScalarType compute_type(at::ScalarType t) {
  return t == at::kDouble ? at::kDouble : at::kFloat;
}

// True when grads will be asked of this call: otherwise the forward runs without a graph node.
bool wants_graph(std::initializer_list<const at::Tensor*> inputs) {
  if (!at::GradMode::is_enabled()) return false;
  for (const at::Tensor* t : inputs)
    if (t->requires_grad()) return true;
  return false;
}

// ---------------------------------------------------------------------------------------------
// The CUDA kernels: which tensors they take, and the call plumbing.

#ifdef LUATUNE_HAS_KERNELS
bool use_kernel(const at::Tensor& t) {
  const at::ScalarType s = t.scalar_type();
  return t.is_cuda() && (s == at::kFloat || s == at::kBFloat16 || s == at::kHalf) && step_kernels_enabled();
}

cuda::Dtype kernel_dtype(const at::Tensor& t) {
  if (t.scalar_type() == at::kBFloat16) return cuda::Dtype::bf16;
  if (t.scalar_type() == at::kHalf) return cuda::Dtype::f16;
  return cuda::Dtype::f32;
}

void* stream_of(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

void kernel_ok(int rc, const char* what) {
  LT_CHECK(rc == 0, what << ": CUDA kernel failed: " << cuda::error_string(rc));
}

cuda::GluAct kernel_act(Activation a) {
  if (a == Activation::act_gelu_tanh) return cuda::GluAct::gelu_tanh;
  if (a == Activation::act_gelu) return cuda::GluAct::gelu;
  return cuda::GluAct::silu;
}

// (rows, cols) of a tensor reduced over its last dim.
std::pair<int64_t, int64_t> rows_cols(const at::Tensor& x) {
  const int64_t cols = x.dim() > 0 ? x.size(-1) : 1;
  return {cols > 0 ? x.numel() / cols : 0, cols};
}
#endif

// ---------------------------------------------------------------------------------------------
// RMSNorm. n = x * rstd, rstd = rsqrt(mean(x^2) + eps) per row, in float32.

// HF's module maths in ATen ops (differentiable, so also the path for mixed dtypes): y and rstd
// (..., 1) in the compute type.
std::pair<at::Tensor, at::Tensor> rms_norm_compose(const at::Tensor& x, const at::Tensor& w, double eps,
                                                   bool gemma) {
  at::Tensor xf = x.to(compute_type(x.scalar_type()));
  at::Tensor rstd = at::rsqrt(xf.pow(2).mean(-1, true) + eps);
  at::Tensor normed = xf * rstd;
  if (gemma) return {(normed * (1.0 + w.to(xf.scalar_type()))).to(x.scalar_type()), rstd};
  return {w * normed.to(x.scalar_type()), rstd};
}

std::pair<at::Tensor, at::Tensor> rms_norm_run(const at::Tensor& x, const at::Tensor& w, double eps,
                                               bool gemma) {
#ifdef LUATUNE_HAS_KERNELS
  if (use_kernel(x)) {
    c10::cuda::CUDAGuard guard(x.device());
    at::Tensor xc = x.contiguous(), wc = w.contiguous();
    auto [rows, cols] = rows_cols(xc);
    std::vector<int64_t> stat_shape = xc.sizes().vec();
    stat_shape.back() = 1;
    at::Tensor y = at::empty(xc.sizes(), xc.options());
    at::Tensor rstd = at::empty(stat_shape, xc.options().dtype(at::kFloat));
    kernel_ok(cuda::rms_norm_forward(xc.data_ptr(), wc.data_ptr(), y.data_ptr(), rstd.data_ptr<float>(), rows,
                                     cols, static_cast<float>(eps), gemma, kernel_dtype(xc), stream_of(xc)),
              "rms_norm");
    return {y, rstd};
  }
#endif
  // The ATen path in one named range: what the CUDA path launches as one kernel shows as one op in
  // a trace (scripts/gpu/trace_summary.py counts a luatune:: range as one op, not its insides).
  RECORD_FUNCTION("luatune::rms_norm", std::vector<c10::IValue>());
  return rms_norm_compose(x, w, eps, gemma);
}

// With gn = dy * w' (w' = w, or 1 + w for gemma): dx = rstd * (gn - n * mean(gn * n)) and
// dw = sum over rows of dy * n (n before the cast HF makes: one rounding, at the end).
std::pair<at::Tensor, at::Tensor> rms_norm_grads(const at::Tensor& dy, const at::Tensor& x,
                                                 const at::Tensor& w, const at::Tensor& rstd, bool gemma,
                                                 bool want_dx, bool want_dw) {
  at::Tensor dx, dw;
  if (!want_dx && !want_dw) return {dx, dw};
#ifdef LUATUNE_HAS_KERNELS
  if (use_kernel(x)) {
    c10::cuda::CUDAGuard guard(x.device());
    at::Tensor xc = x.contiguous(), gc = dy.contiguous(), wc = w.contiguous(), rc = rstd.contiguous();
    auto [rows, cols] = rows_cols(xc);
    const int parts = cuda::rms_norm_backward_parts(rows);
    if (want_dx) dx = at::empty(xc.sizes(), xc.options());
    at::Tensor workspace;
    if (want_dw) {
      dw = at::empty(wc.sizes(), wc.options());
      workspace = at::empty({parts, cols}, xc.options().dtype(at::kFloat));
    }
    kernel_ok(cuda::rms_norm_backward(gc.data_ptr(), xc.data_ptr(), wc.data_ptr(), rc.data_ptr<float>(),
                                      want_dx ? dx.data_ptr() : nullptr, want_dw ? dw.data_ptr() : nullptr,
                                      want_dw ? workspace.data_ptr<float>() : nullptr, parts, rows, cols,
                                      gemma, kernel_dtype(xc), stream_of(xc)),
              "rms_norm backward");
    return {dx, dw};
  }
#endif
  RECORD_FUNCTION("luatune::rms_norm_backward", std::vector<c10::IValue>());
  const at::ScalarType ct = rstd.scalar_type();
  at::Tensor n = x.to(ct) * rstd, g = dy.to(ct);
  if (want_dx) {
    at::Tensor gn = g * (gemma ? w.to(ct) + 1.0 : w.to(ct));
    dx = (rstd * (gn - n * (gn * n).mean(-1, true))).to(x.scalar_type());
  }
  if (want_dw) dw = (g * n).reshape({-1, n.size(-1)}).sum(0).to(w.scalar_type());
  return {dx, dw};
}

struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, double eps,
                            bool gemma) {
    auto [y, rstd] = rms_norm_run(x, w, eps, gemma);
    ctx->save_for_backward({x, w, rstd});
    ctx->saved_data["gemma"] = gemma;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list s = ctx->get_saved_variables();
    auto [dx, dw] = rms_norm_grads(grads[0], s[0], s[1], s[2], ctx->saved_data["gemma"].toBool(),
                                   ctx->needs_input_grad(0), ctx->needs_input_grad(1));
    return {dx, dw, at::Tensor(), at::Tensor()};
  }
};

// ---------------------------------------------------------------------------------------------
// RoPE on (B, T, heads, D) with cos, sin (B, T, D).

at::Tensor rope_run(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool backward) {
#ifdef LUATUNE_HAS_KERNELS
  if (use_kernel(x) && cos.scalar_type() == x.scalar_type() && sin.scalar_type() == x.scalar_type()) {
    c10::cuda::CUDAGuard guard(x.device());
    at::Tensor xc = x.contiguous(), cc = cos.contiguous(), sc = sin.contiguous();
    at::Tensor y = at::empty(xc.sizes(), xc.options());
    const int64_t rows = xc.size(0) * xc.size(1), heads = xc.size(2), dim = xc.size(3);
    void* st = stream_of(xc);
    const cuda::Dtype dt = kernel_dtype(xc);
    kernel_ok(backward ? cuda::rope_backward(xc.data_ptr(), cc.data_ptr(), sc.data_ptr(), y.data_ptr(), rows,
                                             heads, dim, dt, st)
                       : cuda::rope_forward(xc.data_ptr(), cc.data_ptr(), sc.data_ptr(), y.data_ptr(), rows,
                                            heads, dim, dt, st),
              backward ? "rope backward" : "rope");
    return y;
  }
#endif
  RECORD_FUNCTION("luatune::rope", std::vector<c10::IValue>());
  const int64_t half = x.size(-1) / 2;
  at::Tensor c = cos.unsqueeze(2), s = sin.unsqueeze(2);  // (B, T, 1, D): shared by the heads
  if (!backward) {  // HF's expression in x's dtype: each product rounded, then the sum
    at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
    return x * c + rotated * s;
  }
  // y1 = x1 c1 - x2 s1, y2 = x2 c2 + x1 s2, so dx1 = g1 c1 + g2 s2 and dx2 = g2 c2 - g1 s1.
  const at::ScalarType ct = compute_type(x.scalar_type());
  at::Tensor g = x.to(ct), gs = g * s.to(ct);
  at::Tensor back = at::cat({gs.narrow(-1, half, half), -gs.narrow(-1, 0, half)}, -1);
  return (g * c.to(ct) + back).to(x.scalar_type());
}

struct RopeFunction : public torch::autograd::Function<RopeFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return rope_run(x, cos, sin, false);
  }
  // cos and sin come from integer positions: no gradient for them.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list s = ctx->get_saved_variables();
    at::Tensor dx = ctx->needs_input_grad(0) ? rope_run(grads[0], s[0], s[1], true) : at::Tensor();
    return {dx, at::Tensor(), at::Tensor()};
  }
};

// ---------------------------------------------------------------------------------------------
// Gated activation: y = act(gate) * up.

at::Tensor activation(const at::Tensor& x, Activation a) {
  switch (a) {
    case Activation::act_silu:
      return at::silu(x);
    case Activation::act_gelu_tanh:
      return at::gelu(x, "tanh");
    case Activation::act_gelu:
      return at::gelu(x);
  }
  return x;
}

// g * act'(x), by ATen's own backward kernels.
at::Tensor activation_backward(const at::Tensor& g, const at::Tensor& x, Activation a) {
  switch (a) {
    case Activation::act_silu:
      return at::silu_backward(g, x);
    case Activation::act_gelu_tanh:
      return at::gelu_backward(g, x, "tanh");
    case Activation::act_gelu:
      return at::gelu_backward(g, x, "none");
  }
  return g;
}

bool glu_kernel_ok(const at::Tensor& gate, const at::Tensor& up) {
#ifdef LUATUNE_HAS_KERNELS
  return use_kernel(gate) && up.scalar_type() == gate.scalar_type() && up.sizes() == gate.sizes() &&
         up.device() == gate.device();
#else
  (void)gate, (void)up;
  return false;
#endif
}

// y, and on the ATen path also act(gate), kept for the backward: recomputing it there costs the CPU
// another pass over (B, T, I), while the kernel recomputes it in registers for free.
std::pair<at::Tensor, at::Tensor> glu_run(const at::Tensor& gate, const at::Tensor& up, Activation act) {
#ifdef LUATUNE_HAS_KERNELS
  if (glu_kernel_ok(gate, up)) {
    c10::cuda::CUDAGuard guard(gate.device());
    at::Tensor gc = gate.contiguous(), uc = up.contiguous();
    at::Tensor y = at::empty(gc.sizes(), gc.options());
    kernel_ok(cuda::glu_forward(gc.data_ptr(), uc.data_ptr(), y.data_ptr(), gc.numel(), kernel_act(act),
                                kernel_dtype(gc), stream_of(gc)),
              "glu");
    return {y, at::Tensor()};
  }
#endif
  RECORD_FUNCTION("luatune::glu", std::vector<c10::IValue>());
  at::Tensor a = activation(gate, act);
  return {a * up, a};  // HF's: act rounded to the dtype, then the product
}

// dgate = dy * up * act'(gate), dup = dy * act(gate), in float32, rounded once. `a`: act(gate) when
// the forward kept it (the ATen path), else undefined.
std::pair<at::Tensor, at::Tensor> glu_grads(const at::Tensor& dy, const at::Tensor& gate,
                                            const at::Tensor& up, const at::Tensor& a, Activation act,
                                            bool want_dgate, bool want_dup) {
  at::Tensor dgate, dup;
  if (!want_dgate && !want_dup) return {dgate, dup};
#ifdef LUATUNE_HAS_KERNELS
  if (glu_kernel_ok(gate, up)) {
    c10::cuda::CUDAGuard guard(gate.device());
    at::Tensor gc = gate.contiguous(), uc = up.contiguous(), dc = dy.contiguous();
    if (want_dgate) dgate = at::empty(gc.sizes(), gc.options());
    if (want_dup) dup = at::empty(uc.sizes(), uc.options());
    kernel_ok(cuda::glu_backward(dc.data_ptr(), gc.data_ptr(), uc.data_ptr(),
                                 want_dgate ? dgate.data_ptr() : nullptr, want_dup ? dup.data_ptr() : nullptr,
                                 gc.numel(), kernel_act(act), kernel_dtype(gc), stream_of(gc)),
              "glu backward");
    return {dgate, dup};
  }
#endif
  RECORD_FUNCTION("luatune::glu_backward", std::vector<c10::IValue>());
  const at::ScalarType ct = compute_type(gate.scalar_type());
  at::Tensor g = dy.to(ct), gf = gate.to(ct);
  if (want_dgate) dgate = activation_backward(g * up.to(ct), gf, act).to(gate.scalar_type());
  // up may have broadcast against gate (not in the transformer, but allowed): reduce back to its shape.
  if (want_dup)
    dup = (g * (a.defined() ? a.to(ct) : activation(gf, act))).sum_to_size(up.sizes()).to(up.scalar_type());
  return {dgate, dup};
}

struct GluFunction : public torch::autograd::Function<GluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up, int64_t act) {
    auto [y, a] = glu_run(gate, up, static_cast<Activation>(act));
    ctx->save_for_backward({gate, up, a});
    ctx->saved_data["act"] = act;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list s = ctx->get_saved_variables();
    const auto act = static_cast<Activation>(ctx->saved_data["act"].toInt());
    auto [dgate, dup] =
        glu_grads(grads[0], s[0], s[1], s[2], act, ctx->needs_input_grad(0), ctx->needs_input_grad(1));
    return {dgate, dup, at::Tensor()};
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Entry points.

at::Tensor rms_norm_fused(const at::Tensor& x, const at::Tensor& w, double eps, bool gemma) {
  LT_CHECK(x.dim() >= 1 && w.dim() == 1 && w.size(0) == x.size(-1),
           "rms_norm: weight " << w.sizes() << " does not match the last dim of " << x.sizes());
  // A weight in another dtype: HF's expression promotes (Llama) or casts (Gemma) by itself, so it
  // stays the plain composition, differentiated by autograd.
  if (w.scalar_type() != x.scalar_type()) return rms_norm_compose(x, w, eps, gemma).first;
  if (!wants_graph({&x, &w})) return rms_norm_run(x, w, eps, gemma).first;
  return RmsNormFunction::apply(x, w, eps, gemma);
}

at::Tensor rope_fused(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  LT_CHECK(x.dim() == 4 && x.size(-1) % 2 == 0,
           "rope: expected x (batch, length, heads, even head_dim), got " << x.sizes());
  LT_CHECK(cos.dim() == 3 && cos.size(0) == x.size(0) && cos.size(1) == x.size(1) &&
               cos.size(2) == x.size(3) && sin.sizes() == cos.sizes(),
           "rope: cos and sin must be (batch, length, head_dim) for x "
               << x.sizes() << ", got " << cos.sizes() << " and " << sin.sizes());
  if (!wants_graph({&x})) return rope_run(x, cos, sin, false);
  return RopeFunction::apply(x, cos, sin);
}

at::Tensor glu_fused(const at::Tensor& gate, const at::Tensor& up, Activation act) {
  if (!wants_graph({&gate, &up})) return glu_run(gate, up, act).first;
  return GluFunction::apply(gate, up, static_cast<int64_t>(act));
}

}  // namespace luatune
