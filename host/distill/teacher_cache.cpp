// Cached teacher outputs: the writer (one teacher pass over a dataset, top-k logits per target
// token to disk, published by rename), the forward-KL loss over the cached top-k (a custom autograd
// function recomputing the student's logits chunk by chunk in backward, like distill.cpp's
// ChunkedKD) and the CachedDistiller hook that reads each micro-batch's rows back by row id.
#include "host/distill/teacher_cache.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <fcntl.h>
#include <torch/csrc/autograd/custom_function.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "host/core/device.h"
#include "host/core/error.h"
#include "host/core/files.h"
#include "host/core/json.h"
#include "host/data/dataset.h"
#include "host/distill/distill.h"
#include "host/train/run_dir.h"

namespace luatune {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kFormatVersion = 1;
constexpr const char* kFormatName = "luatune.teacher_cache";
constexpr const char* kWriteWhere = "distill.write_cache";
constexpr const char* kReadWhere = "distill.cached";

// ============================================================================================
// Files

// The value dtype's canonical name, or "" when it is not one the cache stores.
std::string value_dtype_name(const std::string& name) {
  c10::ScalarType t;
  if (!dtype_try_parse(name, &t)) return "";
  if (t != at::kFloat && t != at::kBFloat16 && t != at::kHalf) return "";
  return dtype_name(t);
}

int64_t value_bytes(const std::string& dtype) {
  return dtype == "float32" ? 4 : 2;
}

// Appends a CPU tensor's bytes to a file opened by the writer.
void write_tensor(std::ofstream& f, const at::Tensor& t, const std::string& path) {
  at::Tensor c = t.contiguous();
  f.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  LT_CHECK(f.good(), kWriteWhere << ": cannot write " << path << " (disk full?)");
}

// One read of `bytes` at `offset` of an open file; fails naming the file (a cache cut short).
void read_exact(int fd, void* out, int64_t bytes, int64_t offset, const std::string& path) {
  auto* p = static_cast<char*>(out);
  while (bytes > 0) {
    ssize_t got = ::pread(fd, p, static_cast<size_t>(bytes), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    LT_CHECK(got > 0, kReadWhere << ": cannot read " << path << " at byte " << offset << " ("
                                 << (got < 0 ? std::strerror(errno) : "the file ends early") << ")");
    p += got;
    bytes -= got;
    offset += got;
  }
}

struct FileSpec {
  const char* name;
  int64_t bytes;  // expected size
};

// The files besides meta.json and their sizes for `info`.
std::vector<FileSpec> cache_files(const TeacherCacheInfo& m) {
  const int64_t e = m.entries, k = m.k;
  return {{"offsets.i64", (m.rows + 1) * 8},
          {"hashes.u64", m.rows * 8},
          {"lse.f32", e * 4},
          {"values.bin", e * k * value_bytes(m.dtype)},
          {"indices.i32", e * k * 4}};
}

// splitmix64's finaliser: every input bit reaches every output bit.
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The kept (target) positions of row i of a CPU batch.
int64_t row_targets(const at::Tensor& targets, int64_t i) {
  return targets[i].ne(kIgnoreTarget).sum().item<int64_t>();
}

// The teacher's scaled logits on `h` (n, C): softcap(h W^T) / T in float32, as distill_chunk_log_probs in
// distill.cpp forms them (matmul in the teacher's dtype, then float32).
at::Tensor scaled_logits(const at::Tensor& h, const at::Tensor& w, double softcap, double temperature) {
  at::Tensor z = at::matmul(h, w.t()).to(at::kFloat);
  if (softcap > 0) z = at::tanh(z / softcap) * softcap;
  if (temperature != 1) z = z / temperature;
  return z;
}

}  // namespace

uint64_t teacher_cache_row_hash(const Batch& b, int64_t i) {
  at::Tensor ids = b.ids[i].to(at::kCPU, at::kLong).contiguous();
  at::Tensor tg = b.targets[i].to(at::kCPU, at::kLong).contiguous();
  at::Tensor pos = b.positions.defined() ? b.positions[i].to(at::kCPU, at::kLong).contiguous() : at::Tensor();
  const int64_t T = ids.size(0);
  const int64_t len = b.lengths.defined() ? std::min(T, b.lengths[i].item<int64_t>()) : T;
  const int64_t *id = ids.data_ptr<int64_t>(), *t = tg.data_ptr<int64_t>();
  const int64_t* p = pos.defined() ? pos.data_ptr<int64_t>() : nullptr;
  uint64_t h = mix64(static_cast<uint64_t>(len));
  for (int64_t j = 0; j < len; j++) {
    h = mix64(h ^ ((static_cast<uint64_t>(id[j]) << 1) | (t[j] != kIgnoreTarget ? 1u : 0u)));
    if (p) h = mix64(h ^ static_cast<uint64_t>(p[j]));
  }
  return h;
}

// ============================================================================================
// meta.json

TeacherCacheInfo teacher_cache_info(const std::string& path) {
  const std::string meta_path = path + "/meta.json";
  LT_CHECK(dir_exists(path),
           kReadWhere << ": no teacher cache at " << path << " (write one with distill.write_cache first)");
  LT_CHECK(file_exists(meta_path),
           kReadWhere << ": " << meta_path << " is missing (not a teacher cache, or one not finished)");
  json j = json_parse_or_discard(file_read(meta_path));
  LT_CHECK(j.is_object() && j.value("format", "") == kFormatName,
           kReadWhere << ": " << meta_path << " is damaged (expected a JSON object with format \""
                      << kFormatName << "\")");
  TeacherCacheInfo m;
  try {
    m.version = j.at("version").get<int64_t>();
    LT_CHECK(m.version == kFormatVersion, kReadWhere << ": " << meta_path << " has format version "
                                                     << m.version << ", this luatune reads " << kFormatVersion
                                                     << " (write the cache again)");
    m.rows = j.at("rows").get<int64_t>();
    m.entries = j.at("entries").get<int64_t>();
    m.max_length = j.at("max_length").get<int64_t>();
    m.k = j.at("k").get<int64_t>();
    m.vocab = j.at("vocab_size").get<int64_t>();
    m.dtype = j.at("dtype").get<std::string>();
    m.temperature = j.at("temperature").get<double>();
    const json& t = j.at("teacher");
    m.teacher_type = t.at("model_type").get<std::string>();
    m.teacher_hidden = t.at("hidden_size").get<int64_t>();
    m.teacher_layers = t.at("num_hidden_layers").get<int64_t>();
  } catch (const json::exception& e) {
    fail(std::string(kReadWhere) + ": " + meta_path + " is damaged (" + e.what() + ")");
  }
  LT_CHECK(m.rows >= 0 && m.entries >= 0 && m.vocab >= 1 && m.k >= 1 && m.k <= m.vocab &&
               !value_dtype_name(m.dtype).empty() && m.temperature > 0,
           kReadWhere << ": " << meta_path
                      << " is damaged (rows, entries, k, vocab_size, dtype or temperature out of range)");
  for (const FileSpec& f : cache_files(m)) {
    const std::string p = path + "/" + f.name;
    std::error_code ec;
    const auto size = fs::file_size(p, ec);
    LT_CHECK(!ec, kReadWhere << ": " << p << " is missing (the teacher cache is incomplete)");
    LT_CHECK(static_cast<int64_t>(size) == f.bytes, kReadWhere << ": " << p << " has " << size << " bytes, "
                                                               << meta_path << " implies " << f.bytes
                                                               << " (a damaged cache: write it again)");
  }
  return m;
}

// ============================================================================================
// The writer

TeacherCacheInfo teacher_cache_write(Model& teacher, const Dataset& data, const TeacherCacheOptions& o) {
  const int64_t V = teacher.output_weight().size(0);
  LT_CHECK(!o.path.empty(), kWriteWhere << ": option 'path' (the cache directory) is needed");
  LT_CHECK(o.k >= 1 && o.k <= V,
           kWriteWhere << ": option 'k' must be in 1.." << V << " (the teacher's vocabulary), got " << o.k);
  const std::string dtype = value_dtype_name(o.dtype);
  LT_CHECK(!dtype.empty(), kWriteWhere
                               << ": option 'dtype' must be \"float32\", \"bfloat16\" or \"float16\", got \""
                               << o.dtype << "\"");
  LT_CHECK(o.temperature > 0 && std::isfinite(o.temperature),
           kWriteWhere << ": option 'temperature' must be positive, got " << o.temperature);
  LT_CHECK(o.batch_size >= 1,
           kWriteWhere << ": option 'batch_size' must be at least 1, got " << o.batch_size);
  LT_CHECK(o.chunk >= 1, kWriteWhere << ": option 'chunk' must be at least 1, got " << o.chunk);
  LT_CHECK(data.size() >= 1, kWriteWhere << ": the dataset has no rows");

  TeacherCacheInfo m;
  m.rows = data.size();
  m.max_length = data.options().max_length;
  m.k = o.k;
  m.vocab = V;
  m.dtype = dtype;
  m.temperature = o.temperature;
  m.teacher_type = teacher.config.model_type();
  m.teacher_hidden = teacher.config.hidden_size;
  m.teacher_layers = static_cast<int64_t>(teacher.layers.size());

  const std::string tmp = o.path + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  LT_CHECK(!ec, kWriteWhere << ": cannot create " << tmp << " (" << ec.message() << ")");
  try {
    const c10::ScalarType vt = dtype_parse(dtype);
    std::vector<std::ofstream> files;
    std::vector<std::string> names;
    for (const FileSpec& f : cache_files(m)) {
      names.push_back(tmp + "/" + f.name);
      files.emplace_back(names.back(), std::ios::binary | std::ios::trunc);
      LT_CHECK(files.back().good(), kWriteWhere << ": cannot create " << names.back());
    }
    std::vector<int64_t> offsets{0};
    std::vector<uint64_t> hashes;
    at::NoGradGuard no_grad;
    teacher.set_training(false);
    const c10::Device dev = teacher.device();
    const at::Tensor& w = teacher.output_weight();
    const double cap = teacher.config.final_logit_softcap;
    for (int64_t r0 = 0; r0 < m.rows; r0 += o.batch_size) {
      std::vector<int64_t> rows;
      for (int64_t r = r0; r < std::min(m.rows, r0 + o.batch_size); r++) rows.push_back(r);
      Batch b = data.batch(rows);
      for (int64_t i = 0; i < b.ids.size(0); i++) {
        hashes.push_back(teacher_cache_row_hash(b, i));
        offsets.push_back(offsets.back() + row_targets(b.targets, i));
      }
      // Flat kept positions in row-major order: the order the trainer's `keep` has.
      at::Tensor keep = b.targets.reshape({-1}).ne(kIgnoreTarget).nonzero().reshape({-1}).to(dev);
      if (keep.numel() == 0) continue;
      ForwardOptions fo;
      fo.positions = b.positions.to(dev);
      fo.segments = b.segments.to(dev);
      at::Tensor h = teacher.hidden(b.ids.to(dev), fo);
      h = h.reshape({-1, h.size(-1)}).index_select(0, keep);
      for (int64_t c0 = 0; c0 < h.size(0); c0 += o.chunk) {
        at::Tensor z =
            scaled_logits(h.narrow(0, c0, std::min(o.chunk, h.size(0) - c0)), w, cap, o.temperature);
        at::Tensor lse = at::logsumexp(z, -1);
        auto [values, indices] = at::topk(z, o.k, -1);
        write_tensor(files[2], lse.cpu(), names[2]);
        write_tensor(files[3], values.to(at::kCPU, vt), names[3]);
        write_tensor(files[4], indices.to(at::kCPU, at::kInt), names[4]);
      }
    }
    m.entries = offsets.back();
    write_tensor(files[0], at::tensor(offsets, at::kLong), names[0]);
    write_tensor(files[1], at::from_blob(hashes.data(), {m.rows}, at::kLong), names[1]);
    for (size_t i = 0; i < files.size(); i++) {
      files[i].close();
      LT_CHECK(!files[i].fail(), kWriteWhere << ": cannot write " << names[i] << " (disk full?)");
    }
    json meta = {{"format", kFormatName},
                 {"version", kFormatVersion},
                 {"rows", m.rows},
                 {"entries", m.entries},
                 {"max_length", m.max_length},
                 {"k", m.k},
                 {"dtype", m.dtype},
                 {"temperature", m.temperature},
                 {"vocab_size", m.vocab},
                 {"teacher",
                  {{"model_type", m.teacher_type},
                   {"hidden_size", m.teacher_hidden},
                   {"num_hidden_layers", m.teacher_layers},
                   {"final_logit_softcap", cap}}}};
    file_write_atomic(tmp + "/meta.json", meta.dump(2) + "\n");  // last: a cache without it is unfinished
    checkpoint_publish(tmp, o.path);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  for (const auto& f : fs::directory_iterator(o.path))
    if (f.is_regular_file()) m.bytes += static_cast<int64_t>(f.file_size());
  return m;
}

// ============================================================================================
// The loss over the cached top-k. With a = z_s / T, ls = log_softmax(a), p_t,j = exp(v_j - lse):
//   D   = sum_j p_t,j (v_j - lse - ls[idx_j])
//   dD/da = P p_s - scatter(p_t at idx),  P = sum_j p_t,j   (d ls[i] / da = e_i - p_s)
// and with L = T^2 sum D(z_s / T): dL/dz_s = T dD/da; through a softcap z = c tanh(x / c) it is
// multiplied by 1 - tanh^2. At k = V, P = 1 and this is distill.cpp's forward_kl p_s - p_t.

namespace {

struct CachedKD : public torch::autograd::Function<CachedKD> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& h, const at::Tensor& w,
                            const at::Tensor& lse, const at::Tensor& values, const at::Tensor& indices,
                            double softcap, double T, int64_t chunk) {
    at::NoGradGuard no_grad;
    const int64_t N = h.size(0);
    at::Tensor total = at::zeros({}, h.options().dtype(at::kFloat));
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
      const int64_t n = std::min(chunk, N - r0);
      at::Tensor ls = distill_chunk_log_probs(h.narrow(0, r0, n), w, softcap, T, h.device(), nullptr);
      at::Tensor lt = values.narrow(0, r0, n) - lse.narrow(0, r0, n).unsqueeze(1);  // (n, k) log p_t
      total += (lt.exp() * (lt - ls.gather(1, indices.narrow(0, r0, n)))).sum();
    }
    ctx->save_for_backward({h, w, lse, values, indices});
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["temperature"] = T;
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["hidden_grad"] = h.requires_grad();
    ctx->saved_data["weight_grad"] = w.requires_grad();  // frozen LM head (LoRA): skip its grad
    return total * (T * T);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    at::Tensor h = saved[0], w = saved[1], lse = saved[2], values = saved[3], indices = saved[4];
    const double softcap = ctx->saved_data["softcap"].toDouble(),
                 T = ctx->saved_data["temperature"].toDouble();
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    auto [grad_h, grad_w] = distill_chunked_backward(
        h, w, softcap, T, chunk, ctx->saved_data["hidden_grad"].toBool(),
        ctx->saved_data["weight_grad"].toBool(), grad_out[0], [&](int64_t r0, int64_t n, at::Tensor& ls) {
          at::Tensor pt = (values.narrow(0, r0, n) - lse.narrow(0, r0, n).unsqueeze(1)).exp_();  // (n, k)
          at::Tensor g = ls.exp_().mul_(pt.sum(1, /*keepdim=*/true));                            // P p_s
          return g.scatter_add_(1, indices.narrow(0, r0, n), pt.neg());  // - p_t at the top-k ids
        });
    return {grad_h,       grad_w,       at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor cached_distill_loss(const at::Tensor& hidden, const at::Tensor& weight, double softcap,
                               const at::Tensor& lse, const at::Tensor& values, const at::Tensor& indices,
                               double temperature, int64_t chunk) {
  LT_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
           "distill.cached: hidden (N, C) and LM head (V, C) expected, got " << hidden.sizes() << " and "
                                                                             << weight.sizes());
  LT_CHECK(lse.dim() == 1 && values.dim() == 2 && indices.sizes() == values.sizes() &&
               lse.size(0) == hidden.size(0) && values.size(0) == hidden.size(0),
           "distill.cached: cached rows do not match the hidden states: lse "
               << lse.sizes() << ", values " << values.sizes() << ", indices " << indices.sizes()
               << ", hidden " << hidden.sizes());
  LT_CHECK(chunk >= 1, "distill.cached: chunk must be positive, got " << chunk);
  return CachedKD::apply(hidden, weight, lse.to(at::kFloat), values.to(at::kFloat), indices.to(at::kLong),
                         softcap, temperature, chunk);
}

// ============================================================================================
// CachedDistiller

struct CachedDistiller::State {
  TeacherCacheInfo info;
  std::vector<int64_t> offsets;  // (rows + 1)
  std::vector<uint64_t> hashes;  // (rows)
  int lse_fd = -1, values_fd = -1, indices_fd = -1;
  std::string lse_path, values_path, indices_path;
  c10::ScalarType value_type = at::kFloat;
  at::Tensor lm_sum, kd_sum;  // float64 scalars on the student's device
  int64_t tokens = 0;

  ~State() {
    for (int fd : {lse_fd, values_fd, indices_fd})
      if (fd >= 0) ::close(fd);
  }
};

namespace {

int open_read(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LT_CHECK(fd >= 0, kReadWhere << ": cannot open " << path << " (" << std::strerror(errno) << ")");
  return fd;
}

}  // namespace

CachedDistiller::CachedDistiller(std::shared_ptr<Model> student, CachedDistillOptions options)
    : student_(std::move(student)), options_(std::move(options)), state_(std::make_unique<State>()) {
  const CachedDistillOptions& o = options_;
  LT_CHECK(student_, kReadWhere << ": a student model is needed");
  LT_CHECK(!o.path.empty(), kReadWhere << ": option 'path' (the teacher cache's directory) is needed");
  LT_CHECK(o.loss == "forward_kl",
           kReadWhere << ": loss must be \"forward_kl\" with a cached teacher, got \"" << o.loss
                      << "\" (reverse KL and JSD need the teacher's whole distribution; "
                         "use distill.new with the teacher loaded)");
  LT_CHECK(o.temperature > 0 && std::isfinite(o.temperature),
           kReadWhere << ": temperature must be positive, got " << o.temperature);
  LT_CHECK(o.alpha >= 0 && o.alpha <= 1, kReadWhere << ": alpha must be in [0, 1], got " << o.alpha);
  LT_CHECK(o.chunk > 0, kReadWhere << ": chunk must be positive, got " << o.chunk);
  State& st = *state_;
  st.info = teacher_cache_info(o.path);
  const TeacherCacheInfo& m = st.info;
  LT_CHECK(m.temperature == o.temperature,
           kReadWhere << ": temperature " << o.temperature << " differs from the teacher cache's "
                      << m.temperature << " (" << o.path << "); use the cache's or write the cache again");
  const int64_t V = student_->output_weight().size(0);
  LT_CHECK(m.vocab == V, kReadWhere << ": the teacher cache " << o.path << " has vocabulary " << m.vocab
                                    << " (teacher " << m.teacher_type << ", hidden " << m.teacher_hidden
                                    << ", " << m.teacher_layers << " layers), the student " << V);
  const std::string dir = o.path + "/";
  st.offsets.resize(static_cast<size_t>(m.rows + 1));
  st.hashes.resize(static_cast<size_t>(m.rows));
  {
    int fd = open_read(dir + "offsets.i64");
    try {
      read_exact(fd, st.offsets.data(), (m.rows + 1) * 8, 0, dir + "offsets.i64");
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    fd = open_read(dir + "hashes.u64");
    try {
      read_exact(fd, st.hashes.data(), m.rows * 8, 0, dir + "hashes.u64");
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  }
  bool ordered = st.offsets.front() == 0 && st.offsets.back() == m.entries;
  for (int64_t r = 0; ordered && r < m.rows; r++) ordered = st.offsets[r] <= st.offsets[r + 1];
  LT_CHECK(ordered, kReadWhere << ": " << dir << "offsets.i64 is damaged (offsets must rise from 0 to "
                               << m.entries << ")");
  st.lse_path = dir + "lse.f32";
  st.values_path = dir + "values.bin";
  st.indices_path = dir + "indices.i32";
  st.lse_fd = open_read(st.lse_path);
  st.values_fd = open_read(st.values_path);
  st.indices_fd = open_read(st.indices_path);
  st.value_type = dtype_parse(m.dtype);
}

CachedDistiller::~CachedDistiller() = default;

const TeacherCacheInfo& CachedDistiller::info() const {
  return state_->info;
}

void CachedDistiller::begin(bool training) {
  auto zero = at::zeros({}, at::TensorOptions(at::kDouble).device(student_->device()));
  state_->lm_sum = zero.clone();
  state_->kd_sum = zero.clone();
  state_->tokens = 0;
}

at::Tensor CachedDistiller::micro_loss(const MicroBatch& mb, const at::Tensor& ce_sum) {
  State& st = *state_;
  const CachedDistillOptions& o = options_;
  const TeacherCacheInfo& m = st.info;
  const Batch& b = *mb.batch;
  const int64_t n = mb.ids.size(0), N = mb.keep.numel();
  at::Tensor targets = b.targets.narrow(0, mb.row_begin, n).to(at::kCPU);

  // Why these rows cannot be read from the cache ("" when they can). Training fails on it; an
  // evaluation (often of a validation set the cache was not written for) leaves the micro-batch to
  // the LM loss and out of lm_loss / kd_loss.
  std::string why;
  const std::string other =
      std::string(kReadWhere) + ": the teacher cache " + o.path + " was written for other data";
  if (!b.row_ids.defined())
    why = std::string(kReadWhere) +
          ": the cached teacher needs batches from data.jsonl's dataset (row ids); "
          "this batch has none";
  for (int64_t i = 0; i < n && why.empty(); i++) {
    const int64_t row = mb.row_begin + i, r = b.row_ids[row].item<int64_t>();
    if (r < 0 || r >= m.rows) {
      why = other + " (row " + std::to_string(r) + " is past its " + std::to_string(m.rows) + " rows)";
    } else if (teacher_cache_row_hash(b, row) != st.hashes[r]) {
      why = other + " (row " + std::to_string(r) + " differs)";
    } else if (const int64_t count = st.offsets[r + 1] - st.offsets[r]; count != row_targets(targets, i)) {
      why = other + " (row " + std::to_string(r) + " has " + std::to_string(count) +
            " cached targets, the batch " + std::to_string(row_targets(targets, i)) + ")";
    }
  }
  if (!why.empty()) {
    if (mb.training) fail(why);
    return {};
  }

  // Each row's entries, one read per file: lse (N), values (N, k), indices (N, k) on the host.
  at::Tensor lse = at::empty({N}, at::kFloat), values = at::empty({N, m.k}, st.value_type);
  at::Tensor indices = at::empty({N, m.k}, at::kInt);
  const int64_t vb = value_bytes(m.dtype);
  int64_t at_entry = 0;
  for (int64_t i = 0; i < n; i++) {
    const int64_t r = b.row_ids[mb.row_begin + i].item<int64_t>();
    const int64_t e0 = st.offsets[r], count = st.offsets[r + 1] - e0;
    LT_ASSERT(at_entry + count <= N, "distill.cached: more cached entries than kept positions");
    if (count == 0) continue;
    read_exact(st.lse_fd, lse.data_ptr<float>() + at_entry, count * 4, e0 * 4, st.lse_path);
    read_exact(st.values_fd, static_cast<char*>(values.data_ptr()) + at_entry * m.k * vb, count * m.k * vb,
               e0 * m.k * vb, st.values_path);
    read_exact(st.indices_fd, indices.data_ptr<int32_t>() + at_entry * m.k, count * m.k * 4, e0 * m.k * 4,
               st.indices_path);
    at_entry += count;
  }
  LT_ASSERT(at_entry == N,
            "distill.cached: " << at_entry << " cached entries for " << N << " kept positions");

  const c10::Device dev = mb.hidden.device();
  const bool kd_grad = mb.training && o.alpha > 0 && at::GradMode::is_enabled();
  at::Tensor kd;
  {
    std::optional<at::NoGradGuard> no_grad;
    if (!kd_grad) no_grad.emplace();
    kd = cached_distill_loss(mb.hidden, student_->output_weight(), student_->config.final_logit_softcap,
                             lse.to(dev), values.to(dev, at::kFloat), indices.to(dev, at::kLong),
                             o.temperature, o.chunk);
  }

  if (!st.lm_sum.defined()) begin(mb.training);  // used outside Trainer::step (batch_loss)
  st.lm_sum += ce_sum.detach().to(at::kDouble);
  st.kd_sum += kd.detach().to(at::kDouble);
  st.tokens += N;

  if (!mb.training || !kd_grad) return {};  // evaluation, alpha 0: the plain LM loss, untouched
  if (o.alpha < 1) return ce_sum * (1 - o.alpha) + kd * o.alpha;
  return kd * o.alpha;
}

std::vector<std::pair<std::string, double>> CachedDistiller::stats(bool training) {
  const State& st = *state_;
  const double n = static_cast<double>(std::max<int64_t>(st.tokens, 1));
  std::vector<std::pair<std::string, double>> out = {{"lm_loss", 0.0}, {"kd_loss", 0.0}};
  if (!training && st.tokens == 0) return {};  // an evaluation of rows the cache does not hold
  if (!st.lm_sum.defined()) return out;
  at::Tensor sums = at::stack({st.lm_sum, st.kd_sum}).to(at::kCPU).contiguous();  // one sync per report
  for (size_t i = 0; i < out.size(); i++) out[i].second = sums.data_ptr<double>()[i] / n;
  return out;
}

}  // namespace luatune
