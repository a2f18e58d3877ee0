// LoRA / DoRA: the adapter's forward (LoRA in the compute dtype with a hand-written backward, alone
// or grouped over Linears that share their input), applying adapters to a model, PEFT's adapter
// directory in and out, and merging. What PEFT does and where we read it: docs/lora.md.
#include "host/adapt/lora.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <tuple>

#include "host/adapt/peft.h"
#include "host/core/error.h"
#include "host/quant/quant.h"
#include "host/text/tokenizer_parts.h"

namespace luatune {

using json = nlohmann::json;

const char* const kLoraTargetNames[7] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                         "gate_proj", "up_proj", "down_proj"};

double LoraConfig::scale() const {
  return rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);
}

// ============================================================================================
// LoRA in the compute dtype
//
// y = x W^T (+ b) + s * (dropout(x) A^T) B^T with the products in x's dtype (bf16 on a GPU) and A,
// B kept float32 as masters: they are cast down for the products and their gradients come back up
// to float32 for the optimizer. The adapter's product is added into the base output in place
// (addmm), so a step makes no float32 copy of x and no float32 (..., out) sum. PEFT under autocast
// computes the same products in bf16; without autocast it upcasts x, as DoRA here still does. The
// backward is written by hand:
//   dx = dy W + s * mask((dy B) A),  dA = s * (dy B)^T dropout(x),  dB = s * dy^T (dropout(x) A^T)
// It keeps x (which the caller keeps anyway), the (N, r) down-projection and the dropout mask; W
// gets no gradient (it is frozen; a 4-bit W is dequantized again, as linear_4bit's backward does).

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The base Linear as the backward needs it. Copies share the tensors, so the backward still works
// if the Linear is merged or released after the forward.
struct LoraBase : torch::CustomClassHolder {
  at::Tensor weight;  // (out, in) dense, or the 4-bit codes
  at::Tensor bias;    // (out) or undefined
  std::shared_ptr<QuantState> quant;
  double scale = 1, dropout = 0;  // dropout 0 when not training

  at::Tensor dense(at::ScalarType dtype) const {  // W (out, in) in the compute dtype
    return quant ? dequantize_4bit(weight, *quant, dtype) : weight.to(dtype);
  }
};

struct LoraOut {
  at::Tensor y;     // (N, out)
  at::Tensor xa;    // (N, r): dropout(x) A^T
  at::Tensor mask;  // (N, in) bool, or undefined without dropout
};

// The forward on x2 (N, in), shared by the autograd function and the no-grad path so that a
// recomputed forward is the same computation as the first.
LoraOut lora_forward_2d(const at::Tensor& x2, const at::Tensor& lora_A, const at::Tensor& lora_B,
                        const LoraBase& base) {
  const at::ScalarType dt = x2.scalar_type();
  at::Tensor w = base.dense(dt);
  LoraOut o;
  o.y = base.bias.defined() ? at::addmm(base.bias.to(dt), x2, w.t()) : at::mm(x2, w.t());
  w = at::Tensor();  // a dequantized 4-bit weight is freed before the adapter's products
  at::Tensor xd = x2;
  if (base.dropout > 0) std::tie(xd, o.mask) = at::native_dropout(x2, base.dropout, true);
  o.xa = at::mm(xd, lora_A.to(dt).t());
  o.y.addmm_(o.xa, lora_B.to(dt).t(), 1, base.scale);
  return o;
}

struct LoraLinearFn : public torch::autograd::Function<LoraLinearFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& lora_A,
                            const at::Tensor& lora_B, c10::intrusive_ptr<LoraBase> base) {
    LoraOut o = lora_forward_2d(x.reshape({-1, x.size(-1)}), lora_A, lora_B, *base);
    ctx->save_for_backward({x, lora_A, lora_B, o.xa, o.mask});
    ctx->saved_data["base"] =
        c10::IValue::make_capsule(c10::static_intrusive_pointer_cast<torch::CustomClassHolder>(base));
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = o.y.size(1);
    return at::_unsafe_view(o.y, shape);  // not a view: the caller may modify it in place
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto base = c10::static_intrusive_pointer_cast<LoraBase>(ctx->saved_data["base"].toCapsule());
    variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &lora_A = saved[1], &lora_B = saved[2], &xa = saved[3], &mask = saved[4];
    const at::ScalarType dt = x.scalar_type();
    const double keep_scale = base->dropout > 0 ? 1.0 / (1.0 - base->dropout) : 1.0;
    const at::Tensor dy = grad_out[0].reshape({-1, grad_out[0].size(-1)}).to(dt);  // (N, out)
    const at::Tensor dyb = at::mm(dy, lora_B.to(dt));                              // (N, r)
    at::Tensor dx, da, db;
    if (ctx->needs_input_grad(0)) {
      const at::Tensor a_c = lora_A.to(dt);
      dx = at::mm(dy, base->dense(dt));  // (N, in)
      if (mask.defined())
        dx.add_(at::native_dropout_backward(at::mm(dyb, a_c), mask, keep_scale), base->scale);
      else
        dx.addmm_(dyb, a_c, 1, base->scale);
      dx = dx.view(x.sizes());
    }
    if (ctx->needs_input_grad(1)) {
      at::Tensor x2 = x.reshape({-1, x.size(-1)});
      if (mask.defined()) x2 = at::native_dropout_backward(x2, mask, keep_scale);  // dropout(x) again
      da = at::mm(dyb.t(), x2).to(lora_A.scalar_type()).mul_(base->scale);         // (r, in)
    }
    if (ctx->needs_input_grad(2))
      db = at::mm(dy.t(), xa).to(lora_B.scalar_type()).mul_(base->scale);  // (out, r)
    return {dx, da, db, at::Tensor()};
  }
};

}  // namespace

at::Tensor lora_linear(const Linear& linear, const at::Tensor& x, const at::Tensor& lora_A,
                       const at::Tensor& lora_B, double scale, double dropout) {
  auto base = c10::make_intrusive<LoraBase>();
  base->weight = linear.weight;
  base->bias = linear.bias;
  base->quant = linear.quant;
  base->scale = scale;
  base->dropout = dropout;
  const bool grad = at::GradMode::is_enabled();
  if (grad && (linear.weight.requires_grad() || (linear.bias.defined() && linear.bias.requires_grad()))) {
    // A trainable base (not what lora.apply leaves) needs dW: the same sum composed from autograd ops.
    const at::ScalarType dt = x.scalar_type();
    at::Tensor xd = dropout > 0 ? at::dropout(x, dropout, true) : x;
    at::Tensor update = at::linear(at::linear(xd, lora_A.to(dt)), lora_B.to(dt));
    return at::add(linear.base_forward(x), update, scale);
  }
  if (grad && (x.requires_grad() || lora_A.requires_grad() || lora_B.requires_grad()))
    return LoraLinearFn::apply(x, lora_A, lora_B, base);
  LoraOut o = lora_forward_2d(x.reshape({-1, x.size(-1)}), lora_A, lora_B, *base);
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = o.y.size(1);
  return at::_unsafe_view(o.y, shape);
}

// ============================================================================================
// LoRA on Linears that share their input (q/k/v, gate/up)
//
// Each adapter's down-projection reads all of x (N, in) to make (N, r); for n Linears on the same x
// the n A's are stacked into one (n*r, in) product, so x is read once instead of n times, in the
// forward (x A^T) and in the backward (dA = (dy B)^T x, and the (dy B) A term of dx). The bases
// and the up-projections stay per Linear. Dropout draws a mask per adapter (PEFT's separate
// nn.Dropout modules), which the stacked product cannot share, so only adapters with no dropout
// active are grouped.

namespace {

struct LoraGroup : torch::CustomClassHolder {
  std::vector<LoraBase> bases;  // per Linear; dropout 0
  std::vector<int64_t> ranks;   // r of each adapter: its rows of the stacked A
};

// The forward, shared by the autograd function and the no-grad path; *xa_out = x [A_1; ...; A_n]^T.
variable_list lora_group_forward(const at::Tensor& x, at::TensorList lora_As, at::TensorList lora_Bs,
                                 const LoraGroup& group, at::Tensor* xa_out) {
  const at::ScalarType dt = x.scalar_type();
  const at::Tensor x2 = x.reshape({-1, x.size(-1)});
  const at::Tensor xa = at::mm(x2, at::cat(lora_As).to(dt).t());  // (N, sum r): x read once
  variable_list ys;
  int64_t row = 0;
  for (size_t i = 0; i < lora_Bs.size(); i++) {
    const LoraBase& base = group.bases[i];
    at::Tensor w = base.dense(dt);
    at::Tensor y = base.bias.defined() ? at::addmm(base.bias.to(dt), x2, w.t()) : at::mm(x2, w.t());
    y.addmm_(xa.narrow(1, row, group.ranks[i]), lora_Bs[i].to(dt).t(), 1, base.scale);
    row += group.ranks[i];
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = y.size(1);
    ys.push_back(at::_unsafe_view(y, shape));
  }
  *xa_out = xa;
  return ys;
}

struct LoraGroupFn : public torch::autograd::Function<LoraGroupFn> {
  // x (..., in); lora_As[i] (r_i, in), lora_Bs[i] (out_i, r_i) -> y_i (..., out_i).
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList lora_As,
                               at::TensorList lora_Bs, c10::intrusive_ptr<LoraGroup> group) {
    at::Tensor xa;
    variable_list ys = lora_group_forward(x, lora_As, lora_Bs, *group, &xa);
    variable_list saved = {x, xa};
    saved.insert(saved.end(), lora_As.begin(), lora_As.end());
    saved.insert(saved.end(), lora_Bs.begin(), lora_Bs.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["group"] =
        c10::IValue::make_capsule(c10::static_intrusive_pointer_cast<torch::CustomClassHolder>(group));
    return ys;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto group = c10::static_intrusive_pointer_cast<LoraGroup>(ctx->saved_data["group"].toCapsule());
    variable_list saved = ctx->get_saved_variables();
    const size_t n = group->ranks.size();
    const at::Tensor &x = saved[0], &xa = saved[1];
    const at::ScalarType dt = x.scalar_type();
    const at::Tensor x2 = x.reshape({-1, x.size(-1)});
    std::vector<at::Tensor> dys, dybs;  // (N, out_i), s_i * dy_i B_i (N, r_i)
    for (size_t i = 0; i < n; i++) {
      dys.push_back(grad_out[i].reshape({-1, grad_out[i].size(-1)}).to(dt));
      dybs.push_back(at::mm(dys[i], saved[2 + n + i].to(dt)).mul_(group->bases[i].scale));
    }
    const at::Tensor dyb = at::cat(dybs, 1);  // (N, sum r)
    variable_list grads(2 + 2 * n);
    if (ctx->needs_input_grad(0)) {
      at::Tensor dx = at::mm(dyb, at::cat(at::TensorList(saved).slice(2, n)).to(dt));  // (N, in)
      for (size_t i = 0; i < n; i++) dx.addmm_(dys[i], group->bases[i].dense(dt));
      grads[0] = dx.view(x.sizes());
    }
    bool any_a = false;
    for (size_t i = 0; i < n; i++) any_a = any_a || ctx->needs_input_grad(1 + i);
    const at::Tensor da = any_a ? at::mm(dyb.t(), x2) : at::Tensor();  // (sum r, in): x read once
    int64_t row = 0;
    for (size_t i = 0; i < n; i++) {
      const at::Tensor &lora_A = saved[2 + i], &lora_B = saved[2 + n + i];
      if (ctx->needs_input_grad(1 + i))
        grads[1 + i] = da.narrow(0, row, group->ranks[i]).to(lora_A.scalar_type());
      if (ctx->needs_input_grad(1 + n + i))
        grads[1 + n + i] = at::mm(dys[i].t(), xa.narrow(1, row, group->ranks[i]))
                               .to(lora_B.scalar_type())
                               .mul_(group->bases[i].scale);
      row += group->ranks[i];
    }
    return grads;
  }
};

}  // namespace

std::vector<at::Tensor> lora_linear_group(const std::vector<const Linear*>& linears, const at::Tensor& x) {
  // The adapters that can share the stacked product: plain LoRA, on, no dropout drawn, frozen base.
  std::vector<size_t> grouped;
  for (size_t i = 0; i < linears.size(); i++) {
    const Linear& lin = *linears[i];
    const auto* a = dynamic_cast<const LoraAdapter*>(lin.adapter.get());
    const bool frozen = !lin.weight.requires_grad() && !(lin.bias.defined() && lin.bias.requires_grad());
    if (a && a->enabled && !a->dora && !(a->training && a->dropout > 0) && frozen) grouped.push_back(i);
  }
  std::vector<at::Tensor> out(linears.size());
  if (grouped.size() < 2) {
    for (size_t i = 0; i < linears.size(); i++) out[i] = linears[i]->forward(x);
    return out;
  }
  auto group = c10::make_intrusive<LoraGroup>();
  std::vector<at::Tensor> as, bs;
  for (size_t i : grouped) {
    const Linear& lin = *linears[i];
    const auto& a = dynamic_cast<const LoraAdapter&>(*lin.adapter);
    LoraBase base;
    base.weight = lin.weight;
    base.bias = lin.bias;
    base.quant = lin.quant;
    base.scale = a.scale;
    group->bases.push_back(base);
    group->ranks.push_back(a.r);
    as.push_back(a.lora_A);
    bs.push_back(a.lora_B);
  }
  // Without autograd the same forward runs directly (no graph, nothing saved).
  variable_list ys;
  if (at::GradMode::is_enabled()) {
    ys = LoraGroupFn::apply(x, at::TensorList(as), at::TensorList(bs), group);
  } else {
    at::Tensor xa;
    ys = lora_group_forward(x, as, bs, *group, &xa);
  }
  for (size_t j = 0; j < grouped.size(); j++) out[grouped[j]] = ys[j];
  for (size_t i = 0; i < linears.size(); i++)
    if (!out[i].defined()) out[i] = linears[i]->forward(x);
  return out;
}

// ============================================================================================
// The adapter

LoraAdapter::LoraAdapter(int64_t r_, double alpha_, double dropout_, bool rslora_, bool dora_)
    : r(r_), alpha(alpha_), dropout(dropout_), rslora(rslora_), dora(dora_) {
  LoraConfig c;
  c.r = r;
  c.alpha = alpha;
  c.rslora = rslora;
  scale = c.scale();
}

at::Tensor LoraAdapter::dora_weight_norm(const at::Tensor& weight) const {
  at::NoGradGuard no_grad;  // PEFT detaches both B@A and the norm (DoRA paper, section 4.3)
  at::Tensor w = weight.to(at::kFloat) + at::matmul(lora_B, lora_A) * scale;  // (out, in)
  return at::linalg_vector_norm(w, 2, at::IntArrayRef{1}, false, c10::nullopt);
}

std::vector<at::Tensor> LoraAdapter::forward_group(const std::vector<const Linear*>& group,
                                                   const at::Tensor& x) const {
  return lora_linear_group(group, x);
}

at::Tensor LoraAdapter::forward(const Linear& base, const at::Tensor& x) const {
  const bool drop = training && dropout > 0;
  if (!dora) return lora_linear(base, x, lora_A, lora_B, scale, drop ? dropout : 0.0);

  // DoRA stays on the float32 path (PEFT's without autocast): the input is cast to the adapter's
  // dtype, the sum is formed there and cast back.
  at::Tensor result = base.base_forward(x);  // (..., out) in the base dtype (4-bit W dequantized)
  const at::ScalarType out_dtype = result.scalar_type();
  at::Tensor xa = x.to(lora_A.scalar_type());
  if (drop) xa = at::dropout(xa, dropout, true);
  at::Tensor update = at::linear(at::linear(xa, lora_A), lora_B);  // (..., out)
  // base(x) + (m/||W+sBA|| - 1) * x W^T + (m/||W+sBA||) * s * B A x. Without dropout x W^T is the
  // base result less its bias (PEFT reuses it); with dropout it is recomputed on the dropped x.
  at::Tensor w = base.dense_weight().to(lora_A.scalar_type());
  at::Tensor mag_scale = magnitude / dora_weight_norm(w);  // (out), broadcast over the last dim
  at::Tensor xw;
  if (drop)
    xw = at::linear(xa, w);
  else
    xw = base.bias.defined() ? result - base.bias : result;
  return (result + ((mag_scale - 1) * xw + mag_scale * update * scale)).to(out_dtype);
}

std::vector<std::pair<std::string, at::Tensor*>> LoraAdapter::parameters() {
  std::vector<std::pair<std::string, at::Tensor*>> out = {{"lora_A.weight", &lora_A},
                                                          {"lora_B.weight", &lora_B}};
  if (dora) out.emplace_back("lora_magnitude_vector", &magnitude);
  return out;
}

at::Tensor LoraAdapter::merged_weight(const Linear& base) const {
  at::NoGradGuard no_grad;
  at::Tensor w = base.dense_weight().to(at::kFloat) + at::matmul(lora_B, lora_A).to(at::kFloat) * scale;
  if (dora) {
    at::Tensor norm = at::linalg_vector_norm(w, 2, at::IntArrayRef{1}, false, c10::nullopt);
    w = (magnitude.to(at::kFloat) / norm).unsqueeze(1) * w;
  }
  return w;
}

// ============================================================================================
// The model's Linears, by HF module name

namespace {

struct LinearRef {
  std::string name;    // "model.layers.3.mlp.up_proj"
  std::string kind;    // "up_proj"
  int64_t layer = -1;  // 3
  Linear* linear = nullptr;
};

std::vector<LinearRef> model_linears(Model& m) {
  std::vector<LinearRef> out;
  const std::string suffix = ".weight", prefix = "model.layers.";
  for (const ParamSlot& s : model_slots(m)) {
    if (!s.linear || s.name.size() < suffix.size() ||
        s.name.compare(s.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    LinearRef ref;
    ref.name = s.name.substr(0, s.name.size() - suffix.size());
    ref.kind = ref.name.substr(ref.name.rfind('.') + 1);
    if (ref.name.compare(0, prefix.size(), prefix) == 0)
      ref.layer = std::stoll(ref.name.substr(prefix.size()));
    ref.linear = s.linear;
    out.push_back(std::move(ref));
  }
  return out;
}

std::string join(const std::vector<std::string>& v, const std::string& sep = ", ") {
  std::string s;
  for (size_t i = 0; i < v.size(); i++) s += (i ? sep : "") + v[i];
  return s;
}

std::vector<std::string> all_linear() {
  return {std::begin(kLoraTargetNames), std::end(kLoraTargetNames)};
}

bool is_all_linear(const std::string& s) {
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char ch) { return std::tolower(ch); });
  return lower == "all-linear";
}

// PEFT's list matching: the module name equals the entry or ends in "." + entry.
bool name_matches(const std::string& name, const std::string& entry) {
  if (name == entry) return true;
  return name.size() > entry.size() && name.compare(name.size() - entry.size(), entry.size(), entry) == 0 &&
         name[name.size() - entry.size() - 1] == '.';
}

// The Linears `c` selects. `where` prefixes errors ("lora.apply", or the adapter_config.json path).
std::vector<LinearRef> select_linears(Model& m, const LoraConfig& c, const std::string& where) {
  std::vector<LinearRef> linears = model_linears(m);
  for (int64_t l : c.layers)
    LT_CHECK(l >= 0 && l < m.config.num_layers, where << ": layer " << l
                                                      << " does not exist (the model has layers 0.."
                                                      << m.config.num_layers - 1 << ")");
  std::set<int64_t> layers(c.layers.begin(), c.layers.end());
  auto in_layers = [&](const LinearRef& ref) { return layers.empty() || layers.count(ref.layer) > 0; };

  std::vector<LinearRef> out;
  if (!c.target_regex.empty()) {
    Regex re("^(?:" + c.target_regex + ")\\z", where + ": target_modules");
    for (const LinearRef& ref : linears)
      if (!re.find_all(ref.name).empty() && in_layers(ref)) out.push_back(ref);
    LT_CHECK(!out.empty(), where << ": target_modules regex \"" << c.target_regex
                                 << "\" matches no Linear (names look like model.layers.0.self_attn.q_proj)");
    return out;
  }
  std::vector<std::string> targets = c.targets;
  LT_CHECK(!targets.empty(), where << ": targets is empty (expected names such as q_proj, or all-linear)");
  if (std::any_of(targets.begin(), targets.end(), is_all_linear)) {
    LT_CHECK(targets.size() == 1, where << ": all-linear cannot be combined with other targets");
    targets = all_linear();
  }
  // Exact names are taken as they are; suffixes follow the layer filter (PEFT does the same).
  for (const std::string& t : targets) {
    bool any = false;
    for (const LinearRef& ref : linears) any = any || name_matches(ref.name, t);
    LT_CHECK(any, where << ": unknown target \"" << t << "\" (expected " << join(all_linear())
                        << ", all-linear, or a module name such as model.layers.0.self_attn.q_proj)");
  }
  for (const LinearRef& ref : linears) {
    bool exact = std::find(targets.begin(), targets.end(), ref.name) != targets.end();
    bool suffix = std::any_of(targets.begin(), targets.end(),
                              [&](const std::string& t) { return name_matches(ref.name, t); });
    if (exact || (suffix && in_layers(ref))) out.push_back(ref);
  }
  LT_CHECK(!out.empty(), where << ": the targets match no Linear in layers " << join([&] {
                           std::vector<std::string> s;
                           for (int64_t l : c.layers) s.push_back(std::to_string(l));
                           return s;
                         }()));
  return out;
}

int64_t apply_config(Model& m, const LoraConfig& c, uint64_t seed, const std::string& where) {
  LT_CHECK(c.r >= 1, where << ": r must be a positive integer, got " << c.r);
  LT_CHECK(std::isfinite(c.alpha) && c.alpha > 0,
           where << ": alpha must be a positive number, got " << c.alpha);
  LT_CHECK(c.dropout >= 0 && c.dropout < 1, where << ": dropout must be in [0, 1), got " << c.dropout);
  std::vector<LinearRef> selected = select_linears(m, c, where);
  for (const LayerWeights& layer : m.layers)
    LT_CHECK(!layer.attn_branch,
             where << ": the model already has an adaption prompt (LLaMA-Adapter); LoRA and "
                      "adaption prompts are not combined (start from a fresh model)");
  for (const LinearRef& ref : model_linears(m))
    LT_CHECK(!ref.linear->adapter, where << ": the model already has an adapter on " << ref.name
                                         << " (merge it with lora.merge, or start from a fresh model)");
  peft_freeze_base(m);

  // Drawn in float32 on CPU in checkpoint order, then moved: the same seed gives the same
  // adapter on every device.
  at::Generator gen = at::detail::createCPUGenerator(seed);
  for (const LinearRef& ref : selected) {
    Linear& lin = *ref.linear;
    const int64_t n_out = lin.out_features(), n_in = lin.in_features();
    auto a = std::make_shared<LoraAdapter>(c.r, c.alpha, c.dropout, c.rslora, c.dora);
    // kaiming_uniform_(a=sqrt(5)) on (r, in): gain sqrt(2/(1+5)), bound gain*sqrt(3/in) = 1/sqrt(in).
    const double bound = 1.0 / std::sqrt(static_cast<double>(n_in));
    a->lora_A = at::empty({c.r, n_in}, at::kFloat).uniform_(-bound, bound, gen).to(lin.weight.device());
    a->lora_B = at::zeros({n_out, c.r}, at::TensorOptions(at::kFloat).device(lin.weight.device()));
    if (c.dora) a->magnitude = a->dora_weight_norm(lin.dense_weight());
    for (auto& [name, t] : a->parameters()) t->set_requires_grad(true);
    lin.adapter = a;
  }
  return static_cast<int64_t>(selected.size());
}

// Every Linear with an adapter, which must be LoRA.
std::vector<std::pair<LinearRef, LoraAdapter*>> lora_adapters(Model& m, const std::string& where) {
  std::vector<std::pair<LinearRef, LoraAdapter*>> out;
  for (const LinearRef& ref : model_linears(m)) {
    if (!ref.linear->adapter) continue;
    auto* a = dynamic_cast<LoraAdapter*>(ref.linear->adapter.get());
    LT_CHECK(a, where << ": the adapter on " << ref.name << " is not a LoRA adapter");
    out.emplace_back(ref, a);
  }
  LT_CHECK(!out.empty(), where << ": the model has no LoRA adapters (call lora.apply or lora.load first)");
  return out;
}

LoraConfig config_of(Model& model, const std::string& where) {
  auto adapters = lora_adapters(model, where);
  const LoraAdapter& first = *adapters[0].second;
  LoraConfig c;
  c.r = first.r;
  c.alpha = first.alpha;
  c.dropout = first.dropout;
  c.rslora = first.rslora;
  c.dora = first.dora;
  // Describe the adapted set as PEFT would: kinds (+ layers_to_transform) when that reproduces it
  // exactly, else the full module names.
  std::set<std::string> kinds, names;
  std::set<int64_t> layers;
  for (const auto& [ref, a] : adapters) {
    kinds.insert(ref.kind);
    names.insert(ref.name);
    layers.insert(ref.layer);
  }
  c.targets.clear();
  for (const char* k : kLoraTargetNames)
    if (kinds.count(k)) c.targets.push_back(k);
  if (static_cast<int64_t>(layers.size()) != model.config.num_layers)
    c.layers.assign(layers.begin(), layers.end());
  std::set<std::string> implied;
  for (const LinearRef& ref : model_linears(model))
    if (kinds.count(ref.kind) && layers.count(ref.layer)) implied.insert(ref.name);
  if (implied != names) {
    c.targets.clear();
    for (const auto& [ref, a] : adapters) c.targets.push_back(ref.name);
    c.layers.clear();
  }
  return c;
}

}  // namespace

int64_t lora_apply(Model& model, const LoraConfig& config, uint64_t seed) {
  return apply_config(model, config, seed, "lora.apply");
}

LoraConfig lora_config_of(Model& model) {
  return config_of(model, "lora");
}

void lora_save(Model& model, const std::string& dir, const std::string& base_model_name_or_path) {
  LoraConfig c = config_of(model, "lora.save");
  // The fields of PEFT's LoraConfig that have existed since use_dora did (peft >= 0.9), so older
  // and newer peft both load it; newer fields take their defaults. Keys sorted, as PEFT writes them.
  json j = {
      {"alpha_pattern", json::object()},
      {"auto_mapping", nullptr},
      {"base_model_name_or_path",
       base_model_name_or_path.empty() ? json(nullptr) : json(base_model_name_or_path)},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"inference_mode", true},
      {"init_lora_weights", true},
      {"layers_pattern", nullptr},
      {"layers_to_transform", c.layers.empty() ? json(nullptr) : json(c.layers)},
      {"loftq_config", json::object()},
      {"lora_alpha", peft_number(c.alpha)},
      {"lora_dropout", c.dropout},
      {"megatron_config", nullptr},
      {"megatron_core", "megatron.core"},
      {"modules_to_save", nullptr},
      {"peft_type", "LORA"},
      {"r", c.r},
      {"rank_pattern", json::object()},
      {"revision", nullptr},
      {"target_modules", c.targets},
      {"task_type", "CAUSAL_LM"},
      {"use_dora", c.dora},
      {"use_rslora", c.rslora},
  };
  peft_dir_save(model, dir, j, "lora.save");
}

namespace {

// adapter_config.json (`j`, read from `path`) -> LoraConfig, rejecting what luatune cannot reproduce.
LoraConfig parse_adapter_config(const json& j, const std::string& path) {
  auto get = [&](const char* key) -> const json& {
    static const json null_json;
    auto it = j.find(key);
    return it == j.end() ? null_json : *it;
  };
  auto unsupported = [&](const char* key, const std::string& why) {
    fail(path + ": " + key + " " + get(key).dump() + " is not supported by luatune (" + why + ")");
  };
  const json& type = get("peft_type");
  if (type == "ADAPTION_PROMPT")
    fail(path + ": peft_type \"ADAPTION_PROMPT\" is an adaption prompt (LLaMA-Adapter), not LoRA",
         "load it with adaption_prompt_load (in Lua, lora.load reads both kinds)");
  LT_CHECK(type == "LORA", path << ": peft_type " << type.dump() << " is not supported (expected \"LORA\")");

  LoraConfig c;
  const json& r = get("r");
  LT_CHECK(r.is_number_integer() && r.get<int64_t>() >= 1,
           path << ": r must be a positive integer, got " << r.dump());
  c.r = r.get<int64_t>();
  c.alpha = get("lora_alpha").is_number() ? get("lora_alpha").get<double>() : 8.0;  // PEFT's default
  c.dropout = get("lora_dropout").is_number() ? get("lora_dropout").get<double>() : 0.0;
  c.rslora = get("use_rslora").is_boolean() && get("use_rslora").get<bool>();
  c.dora = get("use_dora").is_boolean() && get("use_dora").get<bool>();

  const json& targets = get("target_modules");
  if (targets.is_null()) {
    c.targets = {"q_proj", "v_proj"};  // PEFT's default for llama, mistral, qwen2, gemma2
  } else if (targets.is_string()) {
    std::string s = targets.get<std::string>();
    if (is_all_linear(s))
      c.targets = {s};
    else
      c.target_regex = s;
  } else {
    LT_CHECK(targets.is_array(), path << ": target_modules must be a list of names or a regex string");
    c.targets.clear();
    for (const json& t : targets) {
      LT_CHECK(t.is_string(), path << ": target_modules must be a list of names, got " << t.dump());
      c.targets.push_back(t.get<std::string>());
    }
  }
  const json& layers = get("layers_to_transform");
  if (layers.is_number_integer()) {
    c.layers = {layers.get<int64_t>()};
  } else if (layers.is_array()) {
    for (const json& l : layers) {
      LT_CHECK(l.is_number_integer(), path << ": layers_to_transform must be integers, got " << l.dump());
      c.layers.push_back(l.get<int64_t>());
    }
  } else if (!layers.is_null()) {
    unsupported("layers_to_transform", "expected a layer number or a list of them");
  }
  const json& pattern = get("layers_pattern");
  bool pattern_ok = pattern.is_null() || pattern == "layers" || pattern == json::array() ||
                    pattern == json::array({"layers"}) || pattern == "";
  if (!pattern_ok) unsupported("layers_pattern", "the model's layers are model.layers.{i}");

  if (get("bias").is_string() && get("bias") != "none") unsupported("bias", "only \"none\"");
  if (get("fan_in_fan_out") == true) unsupported("fan_in_fan_out", "HF Llama-style models store (out, in)");
  if (get("lora_bias") == true) unsupported("lora_bias", "lora_B has no bias here");
  if (get("use_qalora") == true) unsupported("use_qalora", "plain LoRA and DoRA only");
  for (const char* key : {"modules_to_save", "exclude_modules", "layer_replication", "target_parameters",
                          "trainable_token_indices"})
    if (!get(key).is_null() && !get(key).empty()) unsupported(key, "luatune adapts Linear projections only");
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (!get(key).is_null() && !get(key).empty()) unsupported(key, "one r and alpha for every module");
  return c;
}

}  // namespace

LoraConfig lora_load(Model& model, const std::string& dir) {
  std::string config_path;
  LoraConfig c = parse_adapter_config(peft_config_read(dir, &config_path), config_path);
  peft_weights_load(
      model, dir, [&] { apply_config(model, c, 0, config_path); },
      [&] {
        for (LinearRef& ref : model_linears(model)) ref.linear->adapter.reset();
      },
      "r=" + std::to_string(c.r) + " from adapter_config.json");
  return c;
}

void lora_merge(Model& model) {
  for (const LayerWeights& layer : model.layers)
    LT_CHECK(!layer.attn_branch,
             "lora.merge: the model has an adaption prompt (LLaMA-Adapter), which cannot be "
             "merged into the weights (its attention over the prompt depends on each input); "
             "save it with lora.save instead");
  for (auto& [ref, a] : lora_adapters(model, "lora.merge")) {
    Linear& lin = *ref.linear;
    at::Tensor merged = a->merged_weight(lin);
    if (lin.quant) {
      // QLoRA: the merge is made on the dequantized weight and stays dense (model dtype), ready
      // for a bf16 HF save; re-quantizing would add a second rounding to the adapter's update.
      lin.weight = merged.to(model.dtype()).detach().set_requires_grad(false);
      lin.quant.reset();
    } else {
      at::NoGradGuard no_grad;
      lin.weight.copy_(merged);  // cast back to the base dtype, in the weight's own storage
    }
    lin.adapter.reset();
  }
}

}  // namespace luatune
