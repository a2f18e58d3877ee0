// 4-bit weights as tensors (quant.h): the state, quantize/dequantize on the CPU reference or the
// CUDA kernels, the 4-bit linear with a re-dequantizing backward, and bitsandbytes' serialisation.
#include "host/quant/quant.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "host/core/device.h"
#include "host/core/error.h"
#include "host/core/json.h"
#include "host/core/tensor_ops.h"

#ifdef LUATUNE_HAS_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "host/quant/kernels/nf4_cuda.h"
#endif

namespace luatune {

using json = nlohmann::json;

bool quant_skipped(const std::string& name, const std::vector<std::string>& skip) {
  for (const std::string& s : skip) {
    if (name == s) return true;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0 &&
        name[name.size() - s.size() - 1] == '.')
      return true;
  }
  return false;
}

const char* quant_type_name(nf4::QuantType t) {
  return t == nf4::QuantType::nf4 ? "nf4" : "fp4";
}

nf4::QuantType quant_type_parse(const std::string& s, const std::string& where) {
  if (s == "nf4") return nf4::QuantType::nf4;
  if (s == "fp4") return nf4::QuantType::fp4;
  fail(where + ": quant_type \"" + s + "\" is not one of nf4, fp4");
}

void quant_config_check(const QuantConfig& c, const std::string& where) {
  auto pow2 = [](int64_t b) { return b > 0 && (b & (b - 1)) == 0; };
  LT_CHECK(pow2(c.blocksize) && c.blocksize >= 32 && c.blocksize <= 4096,
           where << ": blocksize " << c.blocksize
                 << " is not a power of two from 32 to 4096 (bitsandbytes' rule)");
  LT_CHECK(pow2(c.nested_blocksize) && c.nested_blocksize >= 32 && c.nested_blocksize <= 4096,
           where << ": nested_blocksize " << c.nested_blocksize << " is not a power of two from 32 to 4096");
}

int64_t QuantState::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t QuantState::bytes() const {
  int64_t b = (numel() + 1) / 2;
  for (const at::Tensor* t : {&absmax, &code, &nested_absmax, &nested_code})
    if (t->defined()) b += t->numel() * static_cast<int64_t>(t->element_size());
  return b;
}

void QuantState::to(c10::Device device) {
  for (at::Tensor* t : {&absmax, &code, &nested_absmax, &nested_code})
    if (t->defined()) *t = t->to(device);
}

at::Tensor dynamic_map_8bit() {
  // create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8): for exponent i = 0..6 the
  // midpoints of linspace(0.1, 1, 2^i + 1) (float32 Torch ops), times 10^(i-6) (float32), both
  // signs; then 0 and 1; sorted. 127 + 127 + 2 = 256 values, no padding.
  static const at::Tensor map = [] {
    std::vector<float> data;
    for (int i = 0; i < 7; i++) {
      at::Tensor b = at::linspace(0.1, 1.0, (int64_t{1} << i) + 1, at::TensorOptions(at::kFloat));
      at::Tensor means = ((b.slice(0, 0, b.size(0) - 1) + b.slice(0, 1)) / 2.0).contiguous();
      const float scale = static_cast<float>(std::pow(10.0, i - 6));
      const float* m = means.data_ptr<float>();
      for (int64_t k = 0; k < means.numel(); k++) data.push_back(scale * m[k]);
      for (int64_t k = 0; k < means.numel(); k++) data.push_back(-scale * m[k]);
    }
    data.push_back(0.0f);
    data.push_back(1.0f);
    std::sort(data.begin(), data.end());
    return at::tensor(data, at::TensorOptions(at::kFloat)).clone();
  }();
  return map;
}

namespace {

at::Tensor code_tensor(nf4::QuantType t) {
  return at::from_blob(const_cast<float*>(nf4::code4(t)), {16}, at::TensorOptions(at::kFloat)).clone();
}

// Runs fn(first_block, last_block) over the blocks of a tensor on the CPU's threads.
template <class F>
void for_blocks(int64_t blocks, int64_t blocksize, F fn) {
  const int64_t grain = std::max<int64_t>(1, 16384 / blocksize);
  at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) { fn(b0, b1); });
}

// The 8-bit second level (double quantization) of `absmax` (float32, CPU): fills s.absmax (uint8),
// nested_absmax, nested_code, offset.
void double_quantize(const at::Tensor& absmax_cpu, int64_t nested_blocksize, QuantState& s) {
  at::Tensor a = absmax_cpu.contiguous();
  s.offset = a.mean().item<float>();
  at::Tensor shifted = (a - s.offset).contiguous();
  const int64_t n = shifted.numel();
  s.nested_code = dynamic_map_8bit();
  at::Tensor q = at::empty({n}, at::TensorOptions(at::kByte));
  s.nested_absmax = at::empty({nf4::num_blocks(n, nested_blocksize)}, at::TensorOptions(at::kFloat));
  const float* code = s.nested_code.data_ptr<float>();
  const float* in = shifted.data_ptr<float>();
  uint8_t* qp = q.data_ptr<uint8_t>();
  float* nab = s.nested_absmax.data_ptr<float>();
  for_blocks(s.nested_absmax.numel(), nested_blocksize, [&](int64_t b0, int64_t b1) {
    const int64_t begin = b0 * nested_blocksize, end = std::min(n, b1 * nested_blocksize);
    nf4::quantize_8bit(in + begin, end - begin, nested_blocksize, code, qp + begin, nab + b0);
  });
  s.absmax = q;
  s.nested = true;
  s.nested_blocksize = nested_blocksize;
}

#ifdef LUATUNE_HAS_KERNELS
void check_cuda(int rc, const char* what) {
  LT_CHECK(rc == 0, what << ": CUDA kernel failed: " << cuda::error_string(rc));
}
cuda::Dtype kernel_dtype(at::ScalarType t) {
  if (t == at::kBFloat16) return cuda::Dtype::bf16;
  if (t == at::kHalf) return cuda::Dtype::f16;
  return cuda::Dtype::f32;
}
#endif

}  // namespace

std::pair<at::Tensor, QuantState> quantize_4bit(const at::Tensor& w_in, const QuantConfig& c) {
  quant_config_check(c, "quantize");
  LT_CHECK(w_in.defined() && at::isFloatingType(w_in.scalar_type()),
           "quantize: expected a floating tensor, got "
               << (w_in.defined() ? dtype_name(w_in.scalar_type()) : "none"));
  at::NoGradGuard no_grad;
  at::Tensor w = w_in.detach().contiguous();
  QuantState s;
  s.type = c.type;
  s.blocksize = c.blocksize;
  s.shape = w.sizes().vec();
  s.dtype = w.scalar_type();
  s.code = code_tensor(c.type);
  const int64_t n = w.numel(), blocks = nf4::num_blocks(n, c.blocksize);
  at::Tensor packed, absmax;
#ifdef LUATUNE_HAS_KERNELS
  if (w.is_cuda()) {
    at::Tensor src =
        (w.scalar_type() == at::kFloat || w.scalar_type() == at::kBFloat16 || w.scalar_type() == at::kHalf)
            ? w
            : w.to(at::kFloat);
    packed = at::empty({(n + 1) / 2, 1}, w.options().dtype(at::kByte));
    absmax = at::empty({blocks}, w.options().dtype(at::kFloat));
    check_cuda(
        cuda::quantize_4bit(src.data_ptr(), kernel_dtype(src.scalar_type()), n, c.blocksize,
                            static_cast<int>(c.type), packed.data_ptr<uint8_t>(), absmax.data_ptr<float>(),
                            c10::cuda::getCurrentCUDAStream(w.device().index()).stream()),
        "quantize");
  }
#endif
  if (!packed.defined()) {
    // The CPU reference, on float32 values (bf16/fp16 convert exactly), blocks split over threads.
    at::Tensor wf = w.to(at::kCPU, at::kFloat).contiguous();
    packed = at::empty({(n + 1) / 2, 1}, at::TensorOptions(at::kByte));
    absmax = at::empty({blocks}, at::TensorOptions(at::kFloat));
    const float* in = wf.data_ptr<float>();
    uint8_t* out = packed.data_ptr<uint8_t>();
    float* am = absmax.data_ptr<float>();
    for_blocks(blocks, c.blocksize, [&](int64_t b0, int64_t b1) {
      const int64_t begin = b0 * c.blocksize, end = std::min(n, b1 * c.blocksize);
      nf4::quantize_4bit(in + begin, end - begin, c.blocksize, c.type, out + begin / 2, am + b0);
    });
    packed = packed.to(w.device());
  }
  if (c.double_quant) {
    // The second level runs on the CPU reference (absmax is 1/64 of the weight's element count).
    double_quantize(absmax.to(at::kCPU), c.nested_blocksize, s);
  } else {
    s.absmax = absmax;
  }
  s.to(w.device());
  return {packed, s};
}

at::Tensor block_scales(const QuantState& s) {
  if (!s.nested) return s.absmax.to(at::kFloat);
  at::Tensor q = s.absmax.to(at::kCPU).contiguous();
  at::Tensor nab = s.nested_absmax.to(at::kCPU).contiguous();
  at::Tensor code = s.nested_code.to(at::kCPU, at::kFloat).contiguous();
  at::Tensor out = at::empty({q.numel()}, at::TensorOptions(at::kFloat));
  nf4::dequantize_8bit(q.data_ptr<uint8_t>(), nab.data_ptr<float>(), q.numel(), s.nested_blocksize,
                       code.data_ptr<float>(), out.data_ptr<float>(), s.offset);
  return out.to(s.absmax.device());
}

at::Tensor dequantize_4bit(const at::Tensor& packed, const QuantState& s, at::ScalarType dtype) {
  if (dtype == at::ScalarType::Undefined) dtype = s.dtype;
  const int64_t n = s.numel();
  LT_CHECK(packed.scalar_type() == at::kByte && packed.numel() == (n + 1) / 2,
           "dequantize: packed codes hold " << packed.numel() << " bytes of "
                                            << dtype_name(packed.scalar_type()) << ", expected "
                                            << (n + 1) / 2 << " uint8 for shape " << shape_str(s.shape));
#ifdef LUATUNE_HAS_KERNELS
  if (packed.is_cuda()) {
    at::Tensor out = at::empty(s.shape, packed.options().dtype(dtype));
    at::Tensor kout = (dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf)
                          ? out
                          : at::empty(s.shape, packed.options().dtype(at::kFloat));
    cuda::BlockScale scale;
    if (s.nested) {
      scale.absmax_q = s.absmax.data_ptr<uint8_t>();
      scale.nested_code = s.nested_code.data_ptr<float>();
      scale.nested_absmax = s.nested_absmax.data_ptr<float>();
      scale.nested_blocksize = s.nested_blocksize;
      scale.offset = s.offset;
    } else {
      scale.absmax = s.absmax.data_ptr<float>();
    }
    check_cuda(cuda::dequantize_4bit(packed.data_ptr<uint8_t>(), n, s.blocksize, static_cast<int>(s.type),
                                     scale, kout.data_ptr(), kernel_dtype(kout.scalar_type()),
                                     c10::cuda::getCurrentCUDAStream(packed.device().index()).stream()),
               "dequantize");
    return kout.is_same(out) ? out : kout.to(dtype);
  }
#endif
  at::Tensor codes = packed.to(at::kCPU).contiguous();
  at::Tensor scales = block_scales(s).to(at::kCPU).contiguous();
  at::Tensor out = at::empty({n}, at::TensorOptions(at::kFloat));
  const uint8_t* in = codes.data_ptr<uint8_t>();
  const float* sc = scales.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t bs = s.blocksize;
  for_blocks(nf4::num_blocks(n, bs), bs, [&](int64_t b0, int64_t b1) {
    const int64_t begin = b0 * bs, end = std::min(n, b1 * bs);
    nf4::dequantize_4bit(in + begin / 2, sc + b0, end - begin, bs, s.type, o + begin);
  });
  return out.view(s.shape).to(packed.device(), dtype);
}

// ============================================================================================
// The 4-bit linear

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct WeightHolder : torch::CustomClassHolder {
  at::Tensor packed;
  QuantState state;  // a copy: shares the tensors, survives the Linear being dequantized or merged
};

struct Linear4bitFn : public torch::autograd::Function<Linear4bitFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            c10::intrusive_ptr<WeightHolder> holder) {
    at::Tensor w = dequantize_4bit(holder->packed, holder->state, x.scalar_type());
    ctx->saved_data["w"] =
        c10::IValue::make_capsule(c10::static_intrusive_pointer_cast<torch::CustomClassHolder>(holder));
    return at::linear(x, w);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto holder = c10::static_intrusive_pointer_cast<WeightHolder>(ctx->saved_data["w"].toCapsule());
    const at::Tensor& g = grad_out[0];
    at::Tensor w = dequantize_4bit(holder->packed, holder->state, g.scalar_type());
    return {at::matmul(g, w), at::Tensor()};
  }
};

}  // namespace

at::Tensor linear_4bit(const at::Tensor& x, const at::Tensor& packed, const QuantState& s,
                       const at::Tensor& bias) {
  LT_CHECK(x.size(-1) == s.shape.at(1), "linear_4bit: input has "
                                            << x.size(-1) << " features, the 4-bit weight "
                                            << shape_str(s.shape) << " expects " << s.shape[1]);
  at::Tensor y;
  if (x.requires_grad() && at::GradMode::is_enabled()) {
    auto holder = c10::make_intrusive<WeightHolder>();
    holder->packed = packed;
    holder->state = s;
    y = Linear4bitFn::apply(x, holder);
  } else {
    y = at::linear(x, dequantize_4bit(packed, s, x.scalar_type()));
  }
  return bias.defined() ? y + bias.to(y.scalar_type()) : y;
}

// ============================================================================================
// bitsandbytes' serialised layout

namespace {

const char* const kQsPrefix = ".quant_state.bitsandbytes__";

// Python's repr of a float (json.dumps writes floats with it): the shortest round-trip digits.
std::string py_float_repr(double v) {
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[40];
  for (int p = 1; p <= 17; p++) {
    std::snprintf(buf, sizeof buf, "%.*g", p, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string shape_json(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> quant_state_tensors(const std::string& weight_name,
                                                                    const at::Tensor& packed,
                                                                    const QuantState& s) {
  // The JSON exactly as json.dumps writes QuantState.as_dict(packed=True)'s non-tensor fields.
  std::string js = std::string("{\"quant_type\": \"") + quant_type_name(s.type) +
                   "\", \"blocksize\": " + std::to_string(s.blocksize) + ", \"dtype\": \"" +
                   dtype_name(s.dtype) + "\", \"shape\": " + shape_json(s.shape);
  if (s.nested)
    js += ", \"nested_blocksize\": " + std::to_string(s.nested_blocksize) +
          ", \"nested_dtype\": \"float32\", \"nested_offset\": " + py_float_repr(s.offset);
  js += "}";
  at::Tensor qs = at::empty({static_cast<int64_t>(js.size())}, at::TensorOptions(at::kByte));
  std::memcpy(qs.data_ptr<uint8_t>(), js.data(), js.size());

  auto cpu = [](const at::Tensor& t) { return t.detach().to(at::kCPU).contiguous(); };
  std::vector<std::pair<std::string, at::Tensor>> out = {{weight_name, cpu(packed)},
                                                         {weight_name + ".absmax", cpu(s.absmax)},
                                                         {weight_name + ".quant_map", cpu(s.code)}};
  if (s.nested) {
    out.emplace_back(weight_name + ".nested_absmax", cpu(s.nested_absmax));
    out.emplace_back(weight_name + ".nested_quant_map", cpu(s.nested_code));
  }
  out.emplace_back(weight_name + kQsPrefix + quant_type_name(s.type), qs);
  return out;
}

std::string quant_hf_config(const QuantState& s, at::ScalarType compute_dtype,
                            const std::vector<std::string>& dense_modules) {
  // BitsAndBytesConfig.to_dict() as transformers writes it (quant_method first, then sorted keys).
  json q = json::object();
  q["quant_method"] = "bitsandbytes";
  q["_load_in_4bit"] = true;
  q["_load_in_8bit"] = false;
  q["bnb_4bit_compute_dtype"] = dtype_name(compute_dtype);
  q["bnb_4bit_quant_storage"] = "uint8";
  q["bnb_4bit_quant_type"] = quant_type_name(s.type);
  q["bnb_4bit_use_double_quant"] = s.nested;
  q["llm_int8_enable_fp32_cpu_offload"] = false;
  q["llm_int8_has_fp16_weight"] = false;
  q["llm_int8_skip_modules"] = dense_modules.empty() ? json(nullptr) : json(dense_modules);
  q["llm_int8_threshold"] = 6.0;
  q["load_in_4bit"] = true;
  q["load_in_8bit"] = false;
  return q.dump();
}

bool quant_state_present(const std::string& weight_name, const std::function<bool(const std::string&)>& has) {
  return has(weight_name + kQsPrefix + "nf4") || has(weight_name + kQsPrefix + "fp4");
}

std::pair<at::Tensor, QuantState> quant_state_from_tensors(
    const std::string& weight_name, const std::function<at::Tensor(const std::string&)>& get,
    const std::function<bool(const std::string&)>& has, const std::vector<int64_t>& expected_shape,
    const std::string& where) {
  QuantState s;
  const std::string qs_nf4 = weight_name + kQsPrefix + "nf4", qs_fp4 = weight_name + kQsPrefix + "fp4";
  const std::string qs_name = has(qs_nf4) ? qs_nf4 : qs_fp4;
  at::Tensor qs = get(qs_name).to(at::kCPU).contiguous();
  LT_CHECK(qs.scalar_type() == at::kByte && qs.dim() == 1,
           where << ": tensor " << qs_name << " must be a 1-D uint8 tensor of JSON text");
  const std::string qs_text(reinterpret_cast<const char*>(qs.data_ptr<uint8_t>()), qs.numel());
  json_check_depth(qs_text, where + ": tensor " + qs_name);
  json j = json::parse(qs_text, nullptr, false);
  LT_CHECK(j.is_object(), where << ": tensor " << qs_name << " does not hold a JSON object");
  auto field = [&](const char* key) -> const json& {
    LT_CHECK(j.contains(key), where << ": " << qs_name << " has no \"" << key << "\"");
    return j.at(key);
  };
  LT_CHECK(field("quant_type").is_string(), where << ": " << qs_name << ": quant_type must be a string");
  s.type = quant_type_parse(field("quant_type").get<std::string>(), where + ": " + qs_name);
  LT_CHECK(qs_name == weight_name + kQsPrefix + quant_type_name(s.type),
           where << ": " << qs_name << " says quant_type " << quant_type_name(s.type));
  LT_CHECK(field("blocksize").is_number_integer(),
           where << ": " << qs_name << ": blocksize must be an integer");
  s.blocksize = field("blocksize").get<int64_t>();
  LT_CHECK(field("dtype").is_string(), where << ": " << qs_name << ": dtype must be a string");
  LT_CHECK(dtype_try_parse(field("dtype").get<std::string>(), &s.dtype) && at::isFloatingType(s.dtype),
           where << ": " << qs_name << ": dtype \"" << field("dtype").get<std::string>()
                 << "\" is not a floating dtype");
  LT_CHECK(field("shape").is_array(), where << ": " << qs_name << ": shape must be a list");
  for (const json& d : field("shape")) {
    LT_CHECK(d.is_number_integer(), where << ": " << qs_name << ": shape must be a list of integers");
    s.shape.push_back(d.get<int64_t>());
  }
  LT_CHECK(s.shape == expected_shape, where << ": " << qs_name << " gives shape " << shape_str(s.shape)
                                            << ", expected " << shape_str(expected_shape)
                                            << " from config.json");
  s.nested = j.contains("nested_blocksize");
  QuantConfig check;
  check.blocksize = s.blocksize;
  if (s.nested) {
    LT_CHECK(field("nested_blocksize").is_number_integer() && field("nested_offset").is_number(),
             where << ": " << qs_name << ": nested_blocksize (integer) and nested_offset (number) expected");
    s.nested_blocksize = field("nested_blocksize").get<int64_t>();
    s.offset = static_cast<float>(field("nested_offset").get<double>());
    check.nested_blocksize = s.nested_blocksize;
  }
  quant_config_check(check, where + ": " + qs_name);

  const int64_t n = s.numel(), blocks = nf4::num_blocks(n, s.blocksize);
  auto expect = [&](const std::string& name, at::ScalarType dtype, int64_t numel) {
    LT_CHECK(has(name), where << ": tensor " << name << " is missing (4-bit weight " << weight_name << ")");
    at::Tensor t = get(name);
    LT_CHECK(t.scalar_type() == dtype && t.numel() == numel,
             where << ": tensor " << name << " is " << dtype_name(t.scalar_type()) << " "
                   << shape_str(t.sizes()) << ", expected " << dtype_name(dtype) << " with " << numel
                   << " elements");
    return t;
  };
  at::Tensor packed = expect(weight_name, at::kByte, (n + 1) / 2).reshape({(n + 1) / 2, 1});
  s.code = expect(weight_name + ".quant_map", at::kFloat, 16).reshape({16});
  at::Tensor want = code_tensor(s.type);
  LT_CHECK(at::equal(s.code.to(at::kCPU), want), where << ": tensor " << weight_name
                                                       << ".quant_map is not bitsandbytes' "
                                                       << quant_type_name(s.type) << " table");
  if (s.nested) {
    s.absmax = expect(weight_name + ".absmax", at::kByte, blocks).reshape({blocks});
    s.nested_absmax =
        expect(weight_name + ".nested_absmax", at::kFloat, nf4::num_blocks(blocks, s.nested_blocksize))
            .reshape({-1});
    s.nested_code = expect(weight_name + ".nested_quant_map", at::kFloat, 256).reshape({256});
  } else {
    s.absmax = expect(weight_name + ".absmax", at::kFloat, blocks).reshape({blocks});
  }
  return {packed, s};
}

}  // namespace luatune
