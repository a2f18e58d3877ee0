// Blockwise 8-bit AdamW state (bitsandbytes' AdamW8bit): the dynamic maps built from their
// construction rule, blockwise quantize/dequantize as whole-tensor ATen ops over (blocks, block)
// views, and the AdamW step in torch.optim.AdamW's order over chunks of the parameter.
#include "host/train/adamw8bit.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <vector>

#include "host/core/device.h"
#include "host/core/error.h"
#include "host/core/tensor_ops.h"

namespace luatune {

namespace {

// ---------------------------------------------------------------------------------------------
// The dynamic maps

// bitsandbytes' create_dynamic_map(signed, max_exponent_bits=7, total_bits=8): for exponent
// i = 0..6, the midpoints of linspace(0.1, 1, k + 1) with k = 2^i (signed) or 2^(i+1) (unsigned)
// fractions, times 10^(i-6), and for the signed map their negatives too; then 0 and 1, sorted.
// Signed: 2 * 127 + 2 = 256 values; unsigned: 254 + 2. The "additional items" of the rule are
// 2^(7 - 7) - 1 = 0 at 8 bits, so there are none. The float32 ops are Torch's, as in Python.
at::Tensor dynamic_map(bool is_signed) {
  std::vector<float> data;
  for (int i = 0; i < 7; i++) {
    const int64_t fractions = is_signed ? (int64_t{1} << i) : (int64_t{1} << (i + 1));
    at::Tensor b = at::linspace(0.1, 1.0, fractions + 1, at::TensorOptions(at::kFloat));
    at::Tensor means = (b.narrow(0, 0, fractions) + b.narrow(0, 1, fractions)) / 2.0;
    const double scale = std::pow(10.0, i - 6);
    at::Tensor pos = (means * scale).contiguous();
    data.insert(data.end(), pos.data_ptr<float>(), pos.data_ptr<float>() + fractions);
    if (is_signed) {
      at::Tensor neg = (means * -scale).contiguous();
      data.insert(data.end(), neg.data_ptr<float>(), neg.data_ptr<float>() + fractions);
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  LT_ASSERT(data.size() == 256, "dynamic map has " << data.size() << " values");
  std::sort(data.begin(), data.end());
  return at::tensor(data, at::TensorOptions(at::kFloat)).clone();
}

// The index of the value 0 in a map (127 signed, 0 unsigned): fresh states hold this code, so
// they dequantize to +0 exactly (bitsandbytes starts from code 0 with absmax 0, also 0).
uint8_t zero_code(const at::Tensor& map) {
  const float* v = map.data_ptr<float>();
  const int i = static_cast<int>(std::find(v, v + 256, 0.0f) - v);
  LT_ASSERT(i < 256, "dynamic map without 0");
  return static_cast<uint8_t>(i);
}

// Both maps and their midpoints on one device, so a CUDA step copies no table.
struct DeviceMaps {
  c10::Device device;
  at::Tensor signed_map, signed_mid, unsigned_map, unsigned_mid;
};

// (map[i] + map[i + 1]) / 2 in float32, (255): the rounding boundaries for nearest-code search.
at::Tensor midpoints(const at::Tensor& map) {
  return (map.narrow(0, 0, 255) + map.narrow(0, 1, 255)) * 0.5;
}

const DeviceMaps& maps_on(c10::Device device) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<DeviceMaps>> cache;  // pointers stay valid as it grows
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& m : cache)
    if (m->device == device) return *m;
  auto m = std::make_unique<DeviceMaps>(
      DeviceMaps{device, adam8bit_signed_map().to(device), {}, adam8bit_unsigned_map().to(device), {}});
  m->signed_mid = midpoints(m->signed_map);
  m->unsigned_mid = midpoints(m->unsigned_map);
  cache.push_back(std::move(m));
  return *cache.back();
}

// ---------------------------------------------------------------------------------------------
// Blockwise views

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Calls fn(rows, first_block, count) on t (contiguous, n elements) seen as rows of `block`:
// the full blocks as one (n / block, block) view, then the partial last block as (1, n % block).
// No padding copies; in-place ops on `rows` write into t.
template <class F>
void each_block_rows(const at::Tensor& t, int64_t block, F fn) {
  const int64_t n = t.numel(), full = n / block, tail = n % block;
  if (full > 0) fn(t.narrow(0, 0, full * block).view({full, block}), int64_t{0}, full);
  if (tail > 0) fn(t.narrow(0, full * block, tail).view({1, tail}), full, int64_t{1});
}

// Quantizes x (float32 (n), contiguous) into the views codes (uint8 (n)) and absmax (float32
// (ceil(n / block))) on x's device; mid = midpoints(map) there; is_signed: map is the signed one.
void quantize_into(const at::Tensor& x, const at::Tensor& map, const at::Tensor& mid, bool is_signed,
                   int64_t block, const at::Tensor& codes, const at::Tensor& absmax) {
  at::Tensor scaled = x.clone();  // x / absmax of its block, in [-1, 1]
  each_block_rows(scaled, block, [&](const at::Tensor& rows, int64_t b0, int64_t nb) {
    at::Tensor am = rows.abs().amax(1);  // (nb)
    absmax.narrow(0, b0, nb).copy_(am);
    // An all-zero block keeps absmax 0 and codes 0 exactly (divided by 1 instead of 0).
    rows.div_(at::where(am > 0, am, at::ones_like(am)).unsqueeze(1));
  });
  // Nearest code: the number of midpoints below the value (a value exactly on a midpoint takes the
  // lower code; bitsandbytes' binary search breaks such ties either way).
  at::Tensor idx = at::bucketize(scaled, mid, /*out_int32=*/true, /*right=*/false);  // int32 (n)
  if (is_signed) {
    // bitsandbytes keeps the first moment's sign: when the chosen code's sign bit differs from the
    // value's (a small negative value rounding to 0), the code moves one step towards the value's
    // sign. Only the signed map has codes below 0 to move to.
    at::Tensor flip = at::signbit(map.index_select(0, idx)).ne(at::signbit(x));
    at::Tensor step = x.gt(0).to(at::kInt) * 2 - 1;  // +1 or -1 per element
    idx = idx + flip.to(at::kInt) * step;
  }
  codes.copy_(idx);
}

at::Tensor dequantize_rows(const at::Tensor& codes, const at::Tensor& absmax, const at::Tensor& map,
                           int64_t block) {
  at::Tensor vals = map.index_select(0, codes.to(at::kInt));  // float32 (n), fresh and contiguous
  each_block_rows(vals, block, [&](const at::Tensor& rows, int64_t b0, int64_t nb) {
    rows.mul_(absmax.narrow(0, b0, nb).unsqueeze(1));
  });
  return vals;
}

void check_map(const at::Tensor& map, const char* what) {
  LT_CHECK(map.defined() && map.scalar_type() == at::kFloat && map.dim() == 1 && map.numel() == 256,
           "adamw8bit: " << what << ": the map must be a float32 tensor of 256 values");
}

void check_block(int64_t block) {
  LT_CHECK(block > 0, "adamw8bit: block size must be positive, got " << block);
}

// The elements one step processes at once: whole blocks, about 2^20 elements, so the float32
// moments, the int32 codes and the other temporaries of a chunk stay near 40 MB.
int64_t chunk_elements(int64_t block) {
  return std::max<int64_t>(1, (int64_t{1} << 20) / block) * block;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API

const at::Tensor& adam8bit_signed_map() {
  static const at::Tensor map = dynamic_map(true);
  return map;
}

const at::Tensor& adam8bit_unsigned_map() {
  static const at::Tensor map = dynamic_map(false);
  return map;
}

void adam8bit_quantize(const at::Tensor& x, const at::Tensor& map, at::Tensor& codes, at::Tensor& absmax,
                       int64_t block) {
  check_block(block);
  check_map(map, "quantize");
  LT_CHECK(x.defined() && x.dim() == 1 && at::isFloatingType(x.scalar_type()),
           "adamw8bit: quantize expects a 1-D floating tensor, got " << tensor_describe(x));
  const int64_t n = x.numel(), nb = ceil_div(n, block);
  at::Tensor xf = x.to(at::kFloat).contiguous();
  at::Tensor m = map.to(x.device());
  if (!(codes.defined() && codes.scalar_type() == at::kByte && codes.sizes() == at::IntArrayRef{n} &&
        codes.device() == x.device()))
    codes = at::empty({n}, x.options().dtype(at::kByte));
  if (!(absmax.defined() && absmax.scalar_type() == at::kFloat && absmax.sizes() == at::IntArrayRef{nb} &&
        absmax.device() == x.device()))
    absmax = at::empty({nb}, x.options().dtype(at::kFloat));
  const bool is_signed = map.min().item<float>() < 0;
  quantize_into(xf, m, midpoints(m), is_signed, block, codes, absmax);
}

at::Tensor adam8bit_dequantize(const at::Tensor& codes, const at::Tensor& absmax, const at::Tensor& map,
                               int64_t n, int64_t block) {
  check_block(block);
  check_map(map, "dequantize");
  LT_CHECK(
      codes.defined() && codes.scalar_type() == at::kByte && codes.dim() == 1 && codes.numel() == n,
      "adamw8bit: dequantize expects uint8 codes of " << n << " elements, got " << tensor_describe(codes));
  LT_CHECK(absmax.defined() && absmax.scalar_type() == at::kFloat && absmax.numel() == ceil_div(n, block),
           "adamw8bit: dequantize expects float32 absmax of " << ceil_div(n, block) << " blocks, got "
                                                              << tensor_describe(absmax));
  return dequantize_rows(codes, absmax.to(codes.device()).reshape({-1}), map.to(codes.device()), block);
}

int64_t Adam8bitState::blocks() const {
  return quantized ? ceil_div(numel, block) : 0;
}

int64_t Adam8bitState::bytes() const {
  int64_t total = 0;
  for (const at::Tensor* t : {&exp_avg, &exp_avg_sq, &absmax1, &absmax2})
    if (t->defined()) total += t->numel() * static_cast<int64_t>(t->element_size());
  return total;
}

Adam8bitState adam8bit_init(int64_t numel, c10::Device device, int64_t block) {
  LT_CHECK(numel >= 0, "adamw8bit: a state needs numel >= 0, got " << numel);
  check_block(block);
  Adam8bitState s;
  s.numel = numel;
  s.block = block;
  s.quantized = numel >= kAdam8bitMinSize;
  at::TensorOptions opts = at::TensorOptions(device);
  if (!s.quantized) {
    s.exp_avg = at::zeros({numel}, opts.dtype(at::kFloat));
    s.exp_avg_sq = at::zeros({numel}, opts.dtype(at::kFloat));
    return s;
  }
  s.exp_avg = at::full({numel}, zero_code(adam8bit_signed_map()), opts.dtype(at::kByte));
  s.exp_avg_sq = at::full({numel}, zero_code(adam8bit_unsigned_map()), opts.dtype(at::kByte));
  s.absmax1 = at::zeros({s.blocks()}, opts.dtype(at::kFloat));
  s.absmax2 = at::zeros({s.blocks()}, opts.dtype(at::kFloat));
  return s;
}

std::vector<std::pair<std::string, at::Tensor>> Adam8bitState::tensors(const std::string& prefix) const {
  auto cpu = [](const at::Tensor& t) {  // always a copy, never a view of the live state
    at::Tensor c = t.detach().cpu();
    return t.is_cpu() ? c.clone() : c;
  };
  std::vector<std::pair<std::string, at::Tensor>> out = {{prefix + ".exp_avg", cpu(exp_avg)},
                                                         {prefix + ".exp_avg_sq", cpu(exp_avg_sq)}};
  if (quantized) {
    out.emplace_back(prefix + ".absmax1", cpu(absmax1));
    out.emplace_back(prefix + ".absmax2", cpu(absmax2));
  }
  return out;
}

void Adam8bitState::load(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                         const std::string& prefix) {
  LT_CHECK(exp_avg.defined(), "adamw8bit: load needs a state from adam8bit_init (this one holds no tensors)");
  auto take = [&](const std::string& field, at::Tensor& into) {
    const std::string name = prefix + "." + field;
    auto it = std::find_if(tensors.begin(), tensors.end(), [&](const auto& p) { return p.first == name; });
    LT_CHECK(it != tensors.end(), "adamw8bit: tensor " << name << " is missing from the checkpoint");
    const at::Tensor& t = it->second;
    LT_CHECK(
        t.defined() && t.scalar_type() == into.scalar_type() && t.sizes() == into.sizes(),
        "adamw8bit: tensor " << name << " is " << tensor_describe(t) << ", expected "
                             << dtype_name(into.scalar_type()) << " " << shape_str(into.sizes())
                             << (quantized ? " (8-bit state, " + std::to_string(block) + "-element blocks)"
                                           : std::string(" (float32 state)")));
    into.copy_(t);
  };
  take("exp_avg", exp_avg);
  take("exp_avg_sq", exp_avg_sq);
  if (quantized) {
    take("absmax1", absmax1);
    take("absmax2", absmax2);
  }
}

void adam8bit_update(at::Tensor& w, const at::Tensor& g, Adam8bitState& s, double lr, double beta1,
                     double beta2, double eps, double weight_decay, int64_t step) {
  const int64_t n = s.numel;
  LT_CHECK(w.defined() && w.dim() == 1 && w.numel() == n && at::isFloatingType(w.scalar_type()),
           "adamw8bit: the parameter must be a flat floating tensor of " << n << " elements, got "
                                                                         << tensor_describe(w));
  LT_CHECK(g.defined() && g.numel() == n && at::isFloatingType(g.scalar_type()) && g.device() == w.device(),
           "adamw8bit: the gradient must be a floating tensor of "
               << n << " elements on " << device_name(w.device()) << ", got " << tensor_describe(g));
  LT_CHECK(s.exp_avg.defined() && s.exp_avg.device() == w.device(),
           "adamw8bit: the state is on "
               << (s.exp_avg.defined() ? device_name(s.exp_avg.device()) : "no device")
               << " but the parameter on " << device_name(w.device()));
  LT_CHECK(step >= 1, "adamw8bit: step counts from 1, got " << step);
  at::NoGradGuard no_grad;

  // torch.optim.AdamW's scalars, in double as Python computes them.
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(step)));
  const double step_size = lr / bias_correction1;

  const DeviceMaps* maps = s.quantized ? &maps_on(w.device()) : nullptr;
  const at::Tensor g_flat = g.reshape({-1});
  const bool w_float = w.scalar_type() == at::kFloat;
  const int64_t chunk = s.quantized ? chunk_elements(s.block) : std::max<int64_t>(n, 1);
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int64_t len = std::min(chunk, n - c0);
    at::Tensor w_part = w.narrow(0, c0, len);
    at::Tensor wf = w_float ? w_part : w_part.to(at::kFloat);  // a float32 parameter updates in place
    at::Tensor gf = g_flat.narrow(0, c0, len).to(at::kFloat);
    // float32 moments of this chunk: views of the state, or dequantized copies.
    at::Tensor m, v, codes1, codes2, absmax1, absmax2;
    if (s.quantized) {
      const int64_t b0 = c0 / s.block, nb = ceil_div(len, s.block);
      codes1 = s.exp_avg.narrow(0, c0, len);
      codes2 = s.exp_avg_sq.narrow(0, c0, len);
      absmax1 = s.absmax1.narrow(0, b0, nb);
      absmax2 = s.absmax2.narrow(0, b0, nb);
      m = dequantize_rows(codes1, absmax1, maps->signed_map, s.block);
      v = dequantize_rows(codes2, absmax2, maps->unsigned_map, s.block);
    } else {
      m = s.exp_avg.narrow(0, c0, len);
      v = s.exp_avg_sq.narrow(0, c0, len);
    }

    // torch.optim.AdamW (single-tensor path), op for op.
    wf.mul_(1.0 - lr * weight_decay);
    m.mul_(beta1).add_(gf, 1.0 - beta1);
    v.mul_(beta2).addcmul_(gf, gf, 1.0 - beta2);
    at::Tensor denom = (v.sqrt() / bias_correction2_sqrt).add_(eps);
    wf.addcdiv_(m, denom, -step_size);
    if (!w_float) w_part.copy_(wf);

    if (s.quantized) {
      // Fresh absmax per block from the new moments, then the codes (bitsandbytes does the same).
      quantize_into(m, maps->signed_map, maps->signed_mid, true, s.block, codes1, absmax1);
      quantize_into(v, maps->unsigned_map, maps->unsigned_mid, false, s.block, codes2, absmax2);
    }
  }
}

}  // namespace luatune
