// Knowledge distillation: the divergences, the chunked logit loss (a custom autograd function that,
// like chunked_cross_entropy, never holds more than `chunk` rows of logits per side) and the
// Distiller trainer hook that runs the frozen teacher beside the student. Formulas and conventions
// are in docs/distill.md.
#include "host/distill/distill.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "host/core/error.h"
#include "host/dist/dist.h"
#include "host/dist/zero.h"

namespace luatune {

// log_softmax(softcap(h @ w^T) / T) in float32 on `dev`; *tanh_out gets tanh(z / cap) for the
// softcap's derivative.
at::Tensor distill_chunk_log_probs(const at::Tensor& h, const at::Tensor& w, double softcap,
                                   double temperature, c10::Device dev, at::Tensor* tanh_out) {
  at::Tensor z = at::matmul(h, w.t()).to(dev, at::kFloat);  // (n, V)
  if (softcap > 0) {
    at::Tensor t = at::tanh(z / softcap);
    z = t * softcap;
    if (tanh_out) *tanh_out = t;
  }
  if (temperature != 1) z = z / temperature;
  return at::log_softmax(z, -1);
}

std::pair<at::Tensor, at::Tensor> distill_chunked_backward(
    const at::Tensor& h, const at::Tensor& w, double softcap, double temperature, int64_t chunk,
    bool hidden_grad, bool weight_grad, const at::Tensor& grad_out,
    const std::function<at::Tensor(int64_t r0, int64_t n, at::Tensor& ls)>& chunk_grad) {
  at::Tensor scale = grad_out.to(at::kFloat) * temperature;  // L = T^2 sum D(z / T)  =>  dL/dz = T dD/da
  const int64_t N = h.size(0);
  at::Tensor grad_h = hidden_grad ? at::empty_like(h) : at::Tensor();
  at::Tensor grad_w = weight_grad ? at::zeros(w.sizes(), w.options().dtype(at::kFloat)) : at::Tensor();
  for (int64_t r0 = 0; r0 < N && (hidden_grad || weight_grad); r0 += chunk) {
    const int64_t n = std::min(chunk, N - r0);
    at::Tensor hc = h.narrow(0, r0, n), tanh_s;
    at::Tensor ls = distill_chunk_log_probs(hc, w, softcap, temperature, h.device(), &tanh_s);
    at::Tensor g = chunk_grad(r0, n, ls).mul_(scale);             // dL/dlogits (n, V)
    if (softcap > 0) g.mul_(tanh_s.mul_(tanh_s).neg_().add_(1));  // through tanh(z / c) * c
    if (hidden_grad) grad_h.narrow(0, r0, n).copy_(at::matmul(g.to(h.scalar_type()), w));
    if (weight_grad) grad_w.add_(at::matmul(g.t(), hc.to(at::kFloat)));
  }
  return {grad_h, weight_grad ? grad_w.to(w.scalar_type()) : at::Tensor()};
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// ============================================================================================
// Options and the three divergences on log-probabilities

enum class Divergence : int64_t { forward_kl = 0, reverse_kl = 1, jsd = 2 };

void check_options(const DistillOptions& o, const char* where) {
  LT_CHECK(o.loss == "forward_kl" || o.loss == "reverse_kl" || o.loss == "jsd",
           where << ": loss must be \"forward_kl\", \"reverse_kl\" or \"jsd\", got \"" << o.loss << "\"");
  LT_CHECK(o.temperature > 0 && std::isfinite(o.temperature),
           where << ": temperature must be positive, got " << o.temperature);
  LT_CHECK(o.alpha >= 0 && o.alpha <= 1, where << ": alpha must be in [0, 1], got " << o.alpha);
  LT_CHECK(o.beta >= 0 && o.beta <= 1, where << ": beta must be in [0, 1], got " << o.beta);
  LT_CHECK(o.chunk > 0, where << ": chunk must be positive, got " << o.chunk);
  LT_CHECK(o.hidden_loss == "cosine" || o.hidden_loss == "mse",
           where << ": hidden_loss must be \"cosine\" or \"mse\", got \"" << o.hidden_loss << "\"");
  LT_CHECK(o.hidden_weight >= 0 && std::isfinite(o.hidden_weight),
           where << ": hidden_weight must be >= 0, got " << o.hidden_weight);
}

// jsd at beta 0 and 1 is, as in TRL, exactly forward and reverse KL (the mixture formula itself
// would give 0 at both ends).
Divergence divergence_of(const DistillOptions& o) {
  if (o.loss == "forward_kl" || (o.loss == "jsd" && o.beta == 0)) return Divergence::forward_kl;
  if (o.loss == "reverse_kl" || (o.loss == "jsd" && o.beta == 1)) return Divergence::reverse_kl;
  return Divergence::jsd;
}

// Per-row divergence from log-probabilities ls (student) and lt (teacher), (n, V) -> (n).
at::Tensor divergence_rows(const at::Tensor& ls, const at::Tensor& lt, Divergence d, double beta) {
  switch (d) {
    case Divergence::forward_kl:
      return (lt.exp() * (lt - ls)).sum(-1);  // KL(p_t || p_s)
    case Divergence::reverse_kl:
      return (ls.exp() * (ls - lt)).sum(-1);  // KL(p_s || p_t)
    case Divergence::jsd: {
      at::Tensor lm = at::logaddexp(ls + std::log1p(-beta), lt + std::log(beta));  // log M
      return beta * (lt.exp() * (lt - lm)).sum(-1) + (1 - beta) * (ls.exp() * (ls - lm)).sum(-1);
    }
  }
  return {};
}

// d divergence_rows / d a, where ls = log_softmax(a): (n, V). Closed forms (docs/distill.md):
//   forward_kl: p_s - p_t
//   reverse_kl: p_s * (f - sum p_s f),  f = ls - lt
//   jsd:        (1 - beta) p_s * (f - sum p_s f),  f = ls - log M
at::Tensor divergence_grad(const at::Tensor& ls, const at::Tensor& lt, Divergence d, double beta) {
  if (d == Divergence::forward_kl) return ls.exp().sub_(lt.exp());
  at::Tensor f =
      d == Divergence::reverse_kl ? ls - lt : ls - at::logaddexp(ls + std::log1p(-beta), lt + std::log(beta));
  at::Tensor ps = ls.exp();
  at::Tensor mean_f = (ps * f).sum(-1, /*keepdim=*/true);
  at::Tensor g = ps.mul_(f.sub_(mean_f));
  return d == Divergence::jsd ? g.mul_(1 - beta) : g;
}

// ============================================================================================
// The chunked logit loss. Forward keeps only the inputs; backward recomputes each chunk of both
// sides' logits and applies the closed-form gradient, so neither pass holds N x V of anything.

struct ChunkedKD : public torch::autograd::Function<ChunkedKD> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& sh, const at::Tensor& sw,
                            const at::Tensor& th, const at::Tensor& tw, double scap, double tcap,
                            const DistillOptions& o) {
    at::NoGradGuard no_grad;
    const Divergence d = divergence_of(o);
    const int64_t N = sh.size(0);
    const double T = o.temperature;
    at::Tensor total = at::zeros({}, sh.options().dtype(at::kFloat));
    for (int64_t r0 = 0; r0 < N; r0 += o.chunk) {
      const int64_t n = std::min(o.chunk, N - r0);
      at::Tensor ls = distill_chunk_log_probs(sh.narrow(0, r0, n), sw, scap, T, sh.device(), nullptr);
      at::Tensor lt = distill_chunk_log_probs(th.narrow(0, r0, n), tw, tcap, T, sh.device(), nullptr);
      total += divergence_rows(ls, lt, d, o.beta).sum();
    }
    ctx->save_for_backward({sh, sw, th, tw});
    ctx->saved_data["scap"] = scap;
    ctx->saved_data["tcap"] = tcap;
    ctx->saved_data["divergence"] = static_cast<int64_t>(d);
    ctx->saved_data["beta"] = o.beta;
    ctx->saved_data["temperature"] = T;
    ctx->saved_data["chunk"] = o.chunk;
    ctx->saved_data["hidden_grad"] = sh.requires_grad();
    ctx->saved_data["weight_grad"] = sw.requires_grad();  // frozen LM head (LoRA): skip its grad
    return total * (T * T);                               // Hinton's T^2: gradients keep their scale
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    at::Tensor sh = saved[0], sw = saved[1], th = saved[2], tw = saved[3];
    const double scap = ctx->saved_data["scap"].toDouble(), tcap = ctx->saved_data["tcap"].toDouble();
    const auto d = static_cast<Divergence>(ctx->saved_data["divergence"].toInt());
    const double beta = ctx->saved_data["beta"].toDouble(), T = ctx->saved_data["temperature"].toDouble();
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    auto [grad_h, grad_w] = distill_chunked_backward(
        sh, sw, scap, T, chunk, ctx->saved_data["hidden_grad"].toBool(),
        ctx->saved_data["weight_grad"].toBool(), grad_out[0], [&](int64_t r0, int64_t n, at::Tensor& ls) {
          at::Tensor lt = distill_chunk_log_probs(th.narrow(0, r0, n), tw, tcap, T, sh.device(), nullptr);
          return divergence_grad(ls, lt, d, beta);
        });
    return {grad_h, grad_w, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor distill_divergence(const at::Tensor& student_logits, const at::Tensor& teacher_logits,
                              const DistillOptions& o) {
  check_options(o, "distill.divergence");
  LT_CHECK(student_logits.dim() >= 1 && student_logits.sizes() == teacher_logits.sizes(),
           "distill.divergence: student and teacher logits must have one shape (..., V), got "
               << student_logits.sizes() << " and " << teacher_logits.sizes());
  at::Tensor ls = at::log_softmax(student_logits.to(at::kFloat) / o.temperature, -1);
  at::Tensor lt = at::log_softmax(teacher_logits.to(student_logits.device(), at::kFloat) / o.temperature, -1);
  return divergence_rows(ls, lt, divergence_of(o), o.beta);
}

at::Tensor distill_logit_loss(const at::Tensor& student_hidden, const at::Tensor& student_weight,
                              double student_softcap, const at::Tensor& teacher_hidden,
                              const at::Tensor& teacher_weight, double teacher_softcap,
                              const DistillOptions& o) {
  check_options(o, "distill");
  LT_CHECK(student_hidden.dim() == 2 && teacher_hidden.dim() == 2 && student_weight.dim() == 2 &&
               teacher_weight.dim() == 2,
           "distill: hidden states must be (N, C) and LM heads (V, C)");
  LT_CHECK(student_hidden.size(0) == teacher_hidden.size(0),
           "distill: " << student_hidden.size(0) << " student rows != " << teacher_hidden.size(0)
                       << " teacher rows");
  LT_CHECK(student_weight.size(0) == teacher_weight.size(0), "distill: teacher vocabulary "
                                                                 << teacher_weight.size(0) << " != student "
                                                                 << student_weight.size(0));
  LT_CHECK(
      student_hidden.size(1) == student_weight.size(1) && teacher_hidden.size(1) == teacher_weight.size(1),
      "distill: hidden width does not match the LM head's");
  return ChunkedKD::apply(student_hidden, student_weight, teacher_hidden, teacher_weight, student_softcap,
                          teacher_softcap, o);
}

// ============================================================================================
// Distiller

struct Distiller::State {
  std::vector<at::Tensor> proj;  // per pair: (C_t, C_s) float32, trainable
  std::set<int64_t> student_layers, teacher_layers;
  std::map<int64_t, at::Tensor> student_out;  // layer -> (n, T, C_s) of the current micro-batch
  at::Tensor lm_sum, kd_sum, hidden_sum;      // float64 scalars on the student's device
  int64_t tokens = 0;
};

namespace {

// The student's layer_out observer, in front of any observer another hook set for this micro-batch.
struct StudentObserver {
  std::shared_ptr<void> keep_alive;  // the State (type-erased: State is private to Distiller)
  std::map<int64_t, at::Tensor>* out;
  const std::set<int64_t>* layers;
  std::function<void(int64_t, Site, const at::Tensor&)> next;  // an observer set before ours
  void operator()(int64_t layer, Site site, const at::Tensor& x) const {
    if (site == Site::layer_out && layers->count(layer)) (*out)[layer] = x;
    if (next) next(layer, site, x);
  }
};

}  // namespace

Distiller::Distiller(std::shared_ptr<Model> teacher, std::shared_ptr<Model> student, DistillOptions options)
    : teacher_(std::move(teacher)),
      student_(std::move(student)),
      options_(std::move(options)),
      state_(std::make_shared<State>()) {
  LT_CHECK(teacher_ && student_, "distill.new: a teacher and a student model are needed");
  LT_CHECK(teacher_ != student_,
           "distill.new: the teacher and the student are the same model object "
           "(load or copy the teacher separately)");
  check_options(options_, "distill.new");
  const int64_t vt = teacher_->output_weight().size(0), vs = student_->output_weight().size(0);
  LT_CHECK(vt == vs, "distill.new: teacher vocabulary " << vt << " != student " << vs);
  const auto ns = static_cast<int64_t>(student_->layers.size()),
             nt = static_cast<int64_t>(teacher_->layers.size());
  for (size_t i = 0; i < options_.hidden_layers.size(); i++) {
    auto [s, t] = options_.hidden_layers[i];
    LT_CHECK(s >= 0 && s < ns, "distill.new: hidden_layers[" << i + 1 << "]: student layer " << s
                                                             << " is out of range (the student has " << ns
                                                             << " layers, 0.." << ns - 1 << ")");
    LT_CHECK(t >= 0 && t < nt, "distill.new: hidden_layers[" << i + 1 << "]: teacher layer " << t
                                                             << " is out of range (the teacher has " << nt
                                                             << " layers, 0.." << nt - 1 << ")");
  }

  at::NoGradGuard no_grad;
  for (auto& [name, p] : teacher_->named_parameters()) p->requires_grad_(false);
  for (auto& [name, p] : teacher_->adapter_parameters()) p->requires_grad_(false);
  teacher_->set_training(false);
  if (options_.shard_teacher && dist_world_size() > 1) {
    LT_CHECK(!teacher_->residency,
             "distill.new: shard_teacher: the teacher's weights are already sharded (by a trainer or "
             "another distiller); give it its own model");
    shards_ = std::make_shared<FrozenShards>(teacher_->named_parameters(),
                                             static_cast<int64_t>(teacher_->layers.size()));
    // Whoever reads the teacher's weights later (saving, counting) gets them gathered, as with ZeRO-3.
    teacher_->residency = shards_;
  }

  const int64_t cs = student_->config.hidden_size, ct = teacher_->config.hidden_size;
  at::Generator gen = at::detail::createCPUGenerator(options_.seed);
  for (auto [s, t] : options_.hidden_layers) {
    state_->student_layers.insert(s);
    state_->teacher_layers.insert(t);
    at::Tensor w =
        cs == ct ? at::eye(cs, at::kFloat)
                 : at::rand({ct, cs}, gen, at::TensorOptions(at::kFloat)).mul_(2).sub_(1).div_(std::sqrt(cs));
    state_->proj.push_back(w.to(student_->device()).requires_grad_(true));
  }
}

std::vector<ParamGroup> Distiller::parameter_groups() {
  if (state_->proj.empty()) return {};
  ParamGroup g;
  for (size_t i = 0; i < state_->proj.size(); i++)
    g.params.emplace_back("distill.proj." + std::to_string(i) + ".weight", &state_->proj[i]);
  g.clip = true;
  return {g};
}

void Distiller::begin(bool training) {
  auto zero = at::zeros({}, at::TensorOptions(at::kDouble).device(student_->device()));
  state_->lm_sum = zero.clone();
  state_->kd_sum = zero.clone();
  state_->hidden_sum = zero.clone();
  state_->tokens = 0;
}

void Distiller::forward_options(ForwardOptions& fo, bool training) {
  state_->student_out.clear();
  if (state_->student_layers.empty()) return;
  fo.observe = StudentObserver{state_, &state_->student_out, &state_->student_layers, fo.observe};
}

at::Tensor Distiller::micro_loss(const MicroBatch& mb, const at::Tensor& ce_sum) {
  State& st = *state_;
  const DistillOptions& o = options_;
  const c10::Device tdev = teacher_->device(), sdev = mb.hidden.device();
  LT_CHECK(mb.hidden.size(1) == student_->config.hidden_size,
           "distill: the trainer's model is not the distiller's student (hidden width "
               << mb.hidden.size(1) << ", student " << student_->config.hidden_size << ")");

  // The teacher's forward: same rows, positions and documents, no autograd, its own dtype/device.
  std::map<int64_t, at::Tensor> teacher_out;
  at::Tensor th;
  at::Tensor keep_t = mb.keep.to(tdev);
  {
    at::NoGradGuard no_grad;
    ForwardOptions tfo;
    if (mb.positions.defined()) tfo.positions = mb.positions.to(tdev);
    if (mb.segments.defined()) tfo.segments = mb.segments.to(tdev);
    if (shards_) {  // each layer gathered just before it runs and freed after
      FrozenShards* z = shards_.get();
      tfo.run_layer = [z](int64_t l, const std::function<at::Tensor(const at::Tensor&)>& fn,
                          const at::Tensor& x) { return z->run_layer(l, fn, x); };
      tfo.run_layer_gathers = true;
    }
    if (!st.teacher_layers.empty())
      tfo.observe = [&](int64_t layer, Site site, const at::Tensor& x) {
        if (site == Site::layer_out && st.teacher_layers.count(layer))
          teacher_out[layer] = x.reshape({-1, x.size(-1)}).index_select(0, keep_t);
      };
    th = teacher_->hidden(mb.ids.to(tdev), tfo);
    th = th.reshape({-1, th.size(-1)}).index_select(0, keep_t);
  }

  // The logit term; without autograd when it cannot reach a gradient (evaluation, alpha 0).
  const bool kd_grad = mb.training && o.alpha > 0 && at::GradMode::is_enabled();
  at::Tensor kd;
  {
    std::optional<at::NoGradGuard> no_grad;
    if (!kd_grad) no_grad.emplace();
    kd = distill_logit_loss(mb.hidden, student_->output_weight(), student_->config.final_logit_softcap, th,
                            teacher_->output_weight(), teacher_->config.final_logit_softcap, o);
  }

  // The hidden-state term: per kept token, 1 - cos or the channel-mean squared error, in float32.
  at::Tensor hidden_sum;
  for (size_t i = 0; i < o.hidden_layers.size(); i++) {
    auto [s, t] = o.hidden_layers[i];
    auto it = st.student_out.find(s);
    LT_ASSERT(it != st.student_out.end(), "distill: student layer " << s << " was not observed");
    at::Tensor xs = it->second;
    xs = xs.reshape({-1, xs.size(-1)}).index_select(0, mb.keep).to(at::kFloat);
    at::Tensor xt = teacher_out.at(t).to(sdev, at::kFloat);
    at::Tensor ps = at::matmul(xs, st.proj[i].t());  // (N, C_t)
    at::Tensor rows =
        o.hidden_loss == "cosine" ? 1 - at::cosine_similarity(ps, xt, 1, 1e-8) : (ps - xt).pow(2).mean(-1);
    hidden_sum = hidden_sum.defined() ? hidden_sum + rows.sum() : rows.sum();
  }
  st.student_out.clear();

  if (!st.lm_sum.defined()) begin(mb.training);  // used outside Trainer::step (batch_loss)
  st.lm_sum += ce_sum.detach().to(at::kDouble);
  st.kd_sum += kd.detach().to(at::kDouble);
  if (hidden_sum.defined()) st.hidden_sum += hidden_sum.detach().to(at::kDouble);
  st.tokens += mb.keep.numel();

  if (!mb.training) return {};
  if (!kd_grad && !hidden_sum.defined()) return {};  // alpha 0: the plain LM loss, untouched
  at::Tensor total;
  if (o.alpha < 1) total = ce_sum * (1 - o.alpha);
  if (kd_grad) total = total.defined() ? total + kd * o.alpha : kd * o.alpha;
  if (hidden_sum.defined())
    total = total.defined() ? total + hidden_sum * o.hidden_weight : hidden_sum * o.hidden_weight;
  return total;
}

void Distiller::empty_micro_batch(bool training) {
  if (shards_) shards_->empty_forward();  // the gathers of the teacher forward other ranks run now
}

FrozenShardsMemory Distiller::teacher_memory() const {
  if (shards_) return shards_->memory();
  FrozenShardsMemory m;
  for (auto& [name, p] : teacher_->named_parameters()) {
    if (zero_layer_of(name) < 0) continue;
    m.full_layer_elements += p->numel();
    m.full_layer_bytes += p->numel() * static_cast<int64_t>(p->element_size());
  }
  m.layer_elements = m.full_layer_elements;
  m.layer_bytes = m.full_layer_bytes;
  return m;
}

std::vector<std::pair<std::string, double>> Distiller::stats(bool training) {
  const State& st = *state_;
  std::vector<std::pair<std::string, double>> out = {{"lm_loss", 0.0}, {"kd_loss", 0.0}};
  if (!options_.hidden_layers.empty()) out.emplace_back("hidden_loss", 0.0);
  // The sums live on the device: one copy to the host for all of them (one sync per report). Data
  // parallel: summed over the ranks with the token count last (one all-reduce; every rank reports,
  // as the trainer's loss is), so the means are the whole batch's, as one process computes them.
  std::vector<double> v(4, 0.0);
  if (st.lm_sum.defined()) {
    at::Tensor sums = at::stack({st.lm_sum, st.kd_sum, st.hidden_sum}).to(at::kCPU).contiguous();
    std::copy(sums.data_ptr<double>(), sums.data_ptr<double>() + 3, v.begin());
  }
  v[3] = static_cast<double>(st.tokens);
  if (dist_active()) v = dist_sum(std::move(v));
  const double n = std::max(v[3], 1.0);
  for (size_t i = 0; i < out.size(); i++) out[i].second = v[i] / n;
  return out;
}

}  // namespace luatune
