// Cross-entropy through the LM head, never with full-vocabulary logits of the whole batch.
//   chunked_cross_entropy: fused. Per chunk of rows, the logits, their log-sum-exp, the loss and the
//     gradient with respect to the logits are formed once, in the forward pass, and turned at once
//     into the chunk's share of the gradients of hidden and weight; backward only scales those by
//     its incoming gradient. One LM-head matmul forward and two for the gradients, none recomputed.
//     On CUDA the chunk's softmax and gradient are one kernel (cross_entropy_rows_), three touches
//     of each logit instead of the nine of the float32 blocks the CPU path runs.
//   chunked_token_logprobs: per-row log-probabilities whose gradient differs per row, so the logits
//     are recomputed chunk by chunk in backward.
// Why and how, with the sources of the idea: docs/hardware.md, "The fused cross-entropy".
#include "host/train/loss.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>

#include "host/core/device.h"
#include "host/core/error.h"
#include "host/data/batch.h"

#ifdef LUATUNE_HAS_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "host/train/kernels/cross_entropy_cuda.h"
#endif

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

// ============================================================================================
// The fused cross-entropy

// Columns of a chunk's logits whose float32 arithmetic happens at once: a sixteenth of the
// vocabulary, at least 4096 columns. The logits themselves stay in the model dtype (the matmul's
// output); only these blocks are float32, so a bf16 chunk costs 2.25-2.5 bytes per logit instead of
// the 6 of a float32 copy beside the bf16 one (float32 logits without a softcap need no blocks:
// the arithmetic runs in place on them). docs/hardware.md counts the same.
int64_t vocab_block(int64_t V) {
  return std::min(V, std::max<int64_t>(4096, (V + 15) / 16));
}

// ============================================================================================
// The one-pass rows (cross_entropy_rows_): the CUDA kernel, and its CPU reference

// Per row of z (n, V), over the vocabulary `block` columns at a time, each block copied to `work`
// (and softcapped): the running maximum m and the sum s of exp(x - m), rescaled as m grows; the
// log-sum-exp is log(s) + m. Both cross-entropy paths on the CPU share it.
std::pair<at::Tensor, at::Tensor> running_max_sum(const at::Tensor& z, int64_t block, double softcap,
                                                  at::ScalarType work) {
  const int64_t V = z.size(1);
  at::Tensor m, s;
  for (int64_t j0 = 0; j0 < V; j0 += block) {
    at::Tensor a = z.narrow(1, j0, std::min(block, V - j0)).to(work, false, /*copy=*/true);
    if (softcap > 0) a.div_(softcap).tanh_().mul_(softcap);
    at::Tensor bm = at::amax(a, {1});
    if (!m.defined()) {
      m = bm;
      s = a.sub_(m.unsqueeze(1)).exp_().sum(1);
    } else {
      at::Tensor m2 = at::maximum(m, bm);
      s = s.mul_((m - m2).exp_()).add_(a.sub_(m2.unsqueeze(1)).exp_().sum(1));
      m = m2;
    }
  }
  return {m, s};
}

// True where cross_entropy_rows_ runs the CUDA kernel on z.
bool rows_kernel_takes(const at::Tensor& z) {
#ifdef LUATUNE_HAS_KERNELS
  const at::ScalarType t = z.scalar_type();
  return z.is_cuda() && (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf) && step_kernels_enabled();
#else
  (void)z;
  return false;
#endif
}

// The kernel's arithmetic on whole tensors, a float32 (float64 for a float64 z) vocabulary block at
// a time: pass 1 the running maximum and rescaled sum over the blocks (the kernel's online softmax
// with blocks for its per-thread runs), pass 2 the gradient written over each block.
at::Tensor rows_reference(const at::Tensor& z, const at::Tensor& t, double softcap, bool write_grad) {
  const int64_t n = z.size(0), V = z.size(1), block = vocab_block(V);
  const at::ScalarType work = z.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor ignored = t.eq(kIgnoreTarget);
  const at::Tensor bad = t.lt(0).logical_or_(t.ge(V)).logical_and_(ignored.logical_not());
  const at::Tensor hit = ignored.logical_or(bad).logical_not_();  // rows with a onehot term
  const at::Tensor tc = t.clamp(0, std::max<int64_t>(V - 1, 0));
  // The target's logit, read before pass 2 overwrites it.
  at::Tensor picked = z.gather(1, tc.unsqueeze(1)).squeeze(1).to(work);  // (n)
  if (softcap > 0) picked = at::tanh(picked / softcap) * softcap;

  auto [m, s] = running_max_sum(z, block, softcap, work);  // (n) each
  const at::Tensor lse = s.log_().add_(m);                 // (n)
  at::Tensor loss = (lse - picked).masked_fill_(ignored, 0.0).masked_fill_(bad, NAN);
  if (!write_grad || n == 0) return loss;

  const at::Tensor lse_col = lse.unsqueeze(1), ignored_col = ignored.unsqueeze(1);
  const at::Tensor hit_f = hit.to(work);
  for (int64_t j0 = 0; j0 < V; j0 += block) {
    const int64_t w = std::min(block, V - j0);
    at::Tensor zb = z.narrow(1, j0, w);
    at::Tensor a = zb.scalar_type() == work ? zb : zb.to(work);  // in place on z when it is the work dtype
    at::Tensor p = softcap > 0 ? a.div_(softcap).tanh_().mul(softcap) : a;  // a holds the tanh
    p.sub_(lse_col).exp_();
    at::Tensor in_block = tc.ge(j0).logical_and_(tc.lt(j0 + w)).to(work).mul_(hit_f);
    p.scatter_add_(1, (tc - j0).clamp_(0, w - 1).unsqueeze(1), in_block.neg_().unsqueeze(1));
    if (softcap > 0) p.mul_(a.mul_(a).neg_().add_(1));
    p.masked_fill_(ignored_col, 0.0);
    if (!p.is_same(zb)) zb.copy_(p);
  }
  return loss;
}

// What the fused forward hands to backward: the gradients of the summed loss (grad_output 1).
struct FusedGrads {
  at::Tensor hidden;  // (N, C) hidden's dtype; undefined when hidden needs none
  at::Tensor weight;  // (V, C) weight's dtype (float32 for an fp16 head); undefined when frozen
};

// Sum over rows with a target of lse(row) - logit(row, target), in float32; fills `grads` when
// given (their fields that are wanted are defined on entry).
at::Tensor fused_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                               int64_t chunk, double softcap, CrossEntropyPath path, FusedGrads* grads) {
  at::NoGradGuard no_grad;
  const int64_t N = hidden.size(0), V = weight.size(0);
  const int64_t block = vocab_block(V);
  const bool low_precision = weight.scalar_type() != at::kFloat;
  const auto f32 = hidden.options().dtype(at::kFloat);
  at::Tensor total = at::zeros({}, f32);
  const bool want_h = grads && grads->hidden.defined(), want_w = grads && grads->weight.defined();
  // An fp16 head's gradient is summed in float32 (its chunk sums could pass fp16's 65504); bf16 and
  // float32 heads accumulate in their own dtype, as PyTorch's autograd does.
  const bool w_float_acc = want_w && grads->weight.scalar_type() != weight.scalar_type();
  const bool one_pass = path == CrossEntropyPath::ce_path_one_pass ||
                        (path == CrossEntropyPath::ce_path_auto && rows_kernel_takes(weight));
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t n = std::min(chunk, N - r0);
    const bool first = r0 == 0;
    at::Tensor h = hidden.narrow(0, r0, n);
    at::Tensor t = targets.narrow(0, r0, n);
    at::Tensor z = at::mm(h, weight.t());  // (n, V) in the model dtype: the chunk's logits

    if (one_pass) {
      // z becomes (softmax - onehot) * dtanh, zero on ignored rows, so the matmuls need no masking.
      total.add_(cross_entropy_rows_(z, t, softcap, grads != nullptr).sum());
      if (!grads) continue;
      if (want_h) {
        at::Tensor gh = grads->hidden.narrow(0, r0, n);  // rows of a contiguous (N, C): contiguous
        at::mm_out(gh, z, weight);
      }
      if (want_w && w_float_acc) {
        // An fp16 head: its gradient is summed in float32, a vocabulary block of float32 at a time.
        at::Tensor hf = h.to(at::kFloat);
        for (int64_t j0 = 0; j0 < V; j0 += block) {
          const int64_t w = std::min(block, V - j0);
          at::Tensor gw = grads->weight.narrow(0, j0, w);
          at::Tensor zt = z.narrow(1, j0, w).t().to(at::kFloat);
          if (first)
            at::mm_out(gw, zt, hf);
          else
            gw.addmm_(zt, hf);
        }
      } else if (want_w) {
        if (first)
          at::mm_out(grads->weight, z.t(), h);
        else
          grads->weight.addmm_(z.t(), h);
      }
      continue;
    }

    at::Tensor tc = t.clamp_min(0);
    at::Tensor valid = t.ne(kIgnoreTarget).to(at::kFloat);                       // (n)
    at::Tensor picked = z.gather(1, tc.unsqueeze(1)).squeeze(1).to(at::kFloat);  // (n) target logits
    if (softcap > 0) picked = at::tanh(picked / softcap) * softcap;
    if (!low_precision && softcap <= 0) {
      // float32 logits without a softcap: z becomes E = exp(z - max) in place and is never
      // normalised. The gradient (softmax - onehot) * valid is E scaled per row by valid / sum(E),
      // less the valid target rows, so the scaling moves onto the (n, C) operands and results of the
      // matmuls and the onehot part becomes a gather/index_add of C-wide rows: two passes over the
      // (n, V) logits fewer than dividing and masking them.
      at::Tensor m = at::amax(z, {1});
      at::Tensor s = z.sub_(m.unsqueeze(1)).exp_().sum(1);  // z holds E
      total.add_(((s.log().add_(m) - picked) * valid).sum());
      if (!grads) continue;
      at::Tensor row_scale = (valid / s).unsqueeze(1);  // (n, 1)
      at::Tensor valid_col = valid.unsqueeze(1);
      if (want_h) {
        at::Tensor gh = grads->hidden.narrow(0, r0, n);  // rows of a contiguous (N, C): contiguous
        at::mm_out(gh, z, weight);
        gh.mul_(row_scale).sub_(weight.index_select(0, tc).mul_(valid_col));
      }
      if (want_w) {
        if (first)
          at::mm_out(grads->weight, z.t(), h * row_scale);
        else
          grads->weight.addmm_(z.t(), h * row_scale);
        grads->weight.index_add_(0, tc, h * valid_col.neg());
      }
      continue;
    }

    // The log-sum-exp over the vocabulary block by block, each block in float32.
    auto [m, s] = running_max_sum(z, block, softcap, at::kFloat);  // (n) each
    at::Tensor lse = s.log_().add_(m);                             // (n)
    total.add_(((lse - picked) * valid).sum());
    if (!grads) continue;

    // d loss / d logits = softmax - onehot(target), times 1 - tanh^2 under the softcap, formed in
    // float32 per block and written over the logits (the model dtype) for the matmuls. Rows without
    // a target (the trainer passes none; other callers may) are zeroed on the (n, C) side: in the
    // hidden rows the weight gradient multiplies and in the hidden gradient's rows.
    at::Tensor lse_col = lse.unsqueeze(1);
    at::Tensor valid_col = valid.unsqueeze(1);
    at::Tensor h_acc = w_float_acc ? h.to(at::kFloat) : h;
    h_acc = h_acc * valid_col.to(h_acc.scalar_type());
    for (int64_t j0 = 0; j0 < V; j0 += block) {
      const int64_t w = std::min(block, V - j0);
      at::Tensor zb = z.narrow(1, j0, w);
      at::Tensor a = low_precision ? zb.to(at::kFloat) : zb;  // float32: in place on the logits
      at::Tensor p = softcap > 0 ? a.div_(softcap).tanh_().mul(softcap) : a;  // a holds the tanh
      p.sub_(lse_col).exp_();
      at::Tensor in_block = tc.ge(j0).logical_and_(tc.lt(j0 + w)).to(at::kFloat).mul_(valid);
      p.scatter_add_(1, (tc - j0).clamp_(0, w - 1).unsqueeze(1), in_block.neg_().unsqueeze(1));
      if (softcap > 0) p.mul_(a.mul_(a).neg_().add_(1));
      if (!p.is_same(zb)) zb.copy_(p);
      if (w_float_acc) {
        at::Tensor gw = grads->weight.narrow(0, j0, w);
        if (first)
          at::mm_out(gw, p.t(), h_acc);
        else
          gw.addmm_(p.t(), h_acc);
      }
    }
    if (want_h) {
      at::Tensor gh = grads->hidden.narrow(0, r0, n);  // rows of a contiguous (N, C): contiguous
      at::mm_out(gh, z, weight);
      gh.mul_(valid_col.to(gh.scalar_type()));
    }
    if (want_w && !w_float_acc) {
      if (first)
        at::mm_out(grads->weight, z.t(), h_acc);
      else
        grads->weight.addmm_(z.t(), h_acc);
    }
  }
  if (want_w && N == 0) grads->weight.zero_();
  return total;
}

struct FusedCE : public torch::autograd::Function<FusedCE> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& targets, int64_t chunk, double softcap, int64_t path) {
    FusedGrads g;
    if (hidden.requires_grad()) g.hidden = at::empty(hidden.sizes(), hidden.options());
    if (weight.requires_grad())  // frozen LM head (LoRA): no weight-gradient matmul at all
      g.weight = at::empty(
          weight.sizes(),
          weight.options().dtype(weight.scalar_type() == at::kHalf ? at::kFloat : weight.scalar_type()));
    at::Tensor loss =
        fused_cross_entropy(hidden, weight, targets, chunk, softcap, static_cast<CrossEntropyPath>(path), &g);
    if (g.hidden.defined()) ctx->saved_data["grad_hidden"] = g.hidden;
    if (g.weight.defined()) ctx->saved_data["grad_weight"] = g.weight;
    ctx->saved_data["half_head"] = weight.scalar_type() == at::kHalf;
    return loss;
  }

  // The saved gradients of the sum, scaled by grad_output (1 / target tokens in the trainer). They
  // leave the context here, so the head's gradient can become weight.grad without a copy.
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const at::Tensor g = grad_out[0];
    auto take = [&](const char* key) {
      auto it = ctx->saved_data.find(key);
      if (it == ctx->saved_data.end()) return at::Tensor();
      at::Tensor t = it->second.toTensor();
      ctx->saved_data.erase(it);
      return t;
    };
    LT_CHECK(!ctx->saved_data.count("used"),
             "chunked_cross_entropy: backward ran twice through the same loss; its gradients were formed "
             "in the forward pass and are handed out once (compute the loss again instead of retain_graph)");
    ctx->saved_data["used"] = true;
    at::Tensor gh = take("grad_hidden"), gw = take("grad_weight");
    if (gh.defined()) gh.mul_(g);
    if (gw.defined()) {
      gw.mul_(g);
      if (ctx->saved_data["half_head"].toBool()) gw = gw.to(at::kHalf);  // summed in float32
    }
    return {gh, gw, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// ============================================================================================
// Per-row log-probabilities

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
      out.narrow(0, r0, n).copy_((picked - lse) * t.ne(kIgnoreTarget));
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
      at::Tensor scale = (t.ne(kIgnoreTarget).to(at::kFloat) * g.narrow(0, r0, n)).unsqueeze(1);  // (n, 1)
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
                                 const at::Tensor& targets, int64_t chunk, double softcap,
                                 CrossEntropyPath path) {
  LT_CHECK(hidden.dim() == 2 && targets.dim() == 1 && targets.size(0) == hidden.size(0),
           "chunked_cross_entropy: hidden must be (N, C) and targets (N)");
  LT_CHECK(chunk > 0, "chunked_cross_entropy: chunk must be positive");
  LT_CHECK(
      hidden.scalar_type() == weight.scalar_type() && weight.dim() == 2 && weight.size(1) == hidden.size(1),
      "chunked_cross_entropy: hidden (N, C) and weight (V, C) must share C and dtype, got "
          << hidden.sizes() << " " << hidden.scalar_type() << " and " << weight.sizes() << " "
          << weight.scalar_type());
  at::Tensor t = targets.to(at::kLong);
  // Without a gradient to form (evaluation, frozen everything) only the loss is computed.
  if (!at::GradMode::is_enabled() || !(hidden.requires_grad() || weight.requires_grad()))
    return fused_cross_entropy(hidden, weight, t, chunk, softcap, path, nullptr);
  return FusedCE::apply(hidden, weight, t, chunk, softcap, static_cast<int64_t>(path));
}

at::Tensor cross_entropy_rows_(const at::Tensor& z, const at::Tensor& targets, double softcap,
                               bool write_grad) {
  LT_CHECK(z.dim() == 2 && targets.dim() == 1 && targets.size(0) == z.size(0),
           "cross_entropy_rows_: z must be (n, V) and targets (n), got " << z.sizes() << " and "
                                                                         << targets.sizes());
  at::NoGradGuard no_grad;
  const at::Tensor t = targets.to(z.device(), at::kLong).contiguous();
#ifdef LUATUNE_HAS_KERNELS
  if (rows_kernel_takes(z) && z.is_contiguous()) {
    c10::cuda::CUDAGuard guard(z.device());
    at::Tensor loss = at::empty({z.size(0)}, z.options().dtype(at::kFloat));
    const cuda::Dtype dt = z.scalar_type() == at::kBFloat16 ? cuda::Dtype::bf16
                           : z.scalar_type() == at::kHalf   ? cuda::Dtype::f16
                                                            : cuda::Dtype::f32;
    const int rc =
        cuda::cross_entropy_rows(z.data_ptr(), dt, z.size(0), z.size(1), t.data_ptr<int64_t>(), kIgnoreTarget,
                                 static_cast<float>(softcap), write_grad, loss.data_ptr<float>(),
                                 c10::cuda::getCurrentCUDAStream(z.device().index()).stream());
    LT_CHECK(rc == 0, "cross_entropy_rows_: CUDA kernel failed: " << cuda::error_string(rc));
    return loss;
  }
#endif
  return rows_reference(z, t, softcap, write_grad);
}

}  // namespace luatune
