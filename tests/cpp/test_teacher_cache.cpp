// Cached teacher outputs: with k = V the CachedDistiller gives the live Distiller's forward-KL loss,
// gradients and training steps; with k < V it equals a direct computation from the teacher's whole
// logits restricted to their top-k; bf16/f16 values stay close to float32; the loss's closed-form
// gradient matches autograd; the one-line errors; and the writer publishes by rename only.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "host/core/files.h"
#include "host/data/dataset.h"
#include "host/distill/distill.h"
#include "host/distill/teacher_cache.h"
#include "host/model/checkpoint.h"
#include "host/model/config.h"
#include "host/text/tokenizer.h"
#include "host/train/trainer.h"
#include "tests/cpp/test_tiny.h"
#include "tests/cpp/test_util.h"

using namespace luatune;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Fixture vocabulary (tests/fixtures/tokenizers/bytelevel): ids below 23.
std::shared_ptr<Tokenizer> bytelevel() {
  static auto tok = Tokenizer::load("tests/fixtures/tokenizers/bytelevel");
  return tok;
}

// Prompt/response records, so every row has ignored targets (the prompt) besides trained ones.
// Unpacked rows of different lengths: batches pad to their longest row.
std::shared_ptr<Dataset> prompt_data(int variant = 0, bool pack = false) {
  const char* prompts[] = {"hello", "hello world", "lll", "world!", "hello hello", "!"};
  const char* responses[] = {" world!", "!", " hello world", " lll lll", " world", " hello hello world"};
  std::vector<nlohmann::ordered_json> records;
  for (int i = 0; i < 6; i++)
    records.push_back({{"prompt", prompts[(i + variant) % 6]}, {"response", responses[i]}});
  DataOptions o;
  o.pack = pack;
  o.max_length = pack ? 24 : 64;
  o.chat = false;
  return Dataset::from_records(records, *bytelevel(), o);
}

TeacherCacheOptions cache_options(const std::string& path, int64_t k, const std::string& dtype = "float32",
                                  double temperature = 2) {
  TeacherCacheOptions o;
  o.path = path;
  o.k = k;
  o.dtype = dtype;
  o.temperature = temperature;
  o.batch_size = 4;  // not the trainer's micro-batches: rows are found by id, not by batch
  o.chunk = 5;
  return o;
}

CachedDistillOptions cached(const std::string& path, double alpha = 0.4, double temperature = 2) {
  CachedDistillOptions o;
  o.path = path;
  o.alpha = alpha;
  o.temperature = temperature;
  o.chunk = 7;
  return o;
}

bool near(double a, double b, double rel) {
  return std::abs(a - b) <= rel * (std::abs(a) + std::abs(b)) / 2 + 1e-12;
}

// Gradients agree to `rel` of the largest entry (elementwise relative tests fail on the near-zero ones).
::testing::AssertionResult grads_close(const at::Tensor& a, const at::Tensor& b, double rel) {
  const double scale = std::max(a.abs().max().item<double>(), 1e-12);
  const double diff = (a - b).abs().max().item<double>();
  if (diff <= rel * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max difference " << diff << " for a largest entry of " << scale;
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

// ============================================================================================
// The loss over the cached top-k against plain autograd

TEST(TeacherCacheLoss, ClosedFormGradientMatchesAutograd) {
  at::Generator gen = at::detail::createCPUGenerator(21);
  const int64_t N = 9, C = 6, V = 13;
  at::Tensor h0 = at::randn({N, C}, gen, at::TensorOptions(at::kFloat));
  at::Tensor w0 = at::randn({V, C}, gen, at::TensorOptions(at::kFloat));
  at::Tensor zt = at::randn({N, V}, gen, at::TensorOptions(at::kFloat)) * 3;
  for (double T : {1.0, 2.0}) {
    for (double softcap : {0.0, 4.0}) {
      for (int64_t k : {int64_t{1}, int64_t{4}, V}) {
        at::Tensor a = zt / T, lse = at::logsumexp(a, -1);
        auto [values, indices] = at::topk(a, k, -1);
        // The reference: the definition, through autograd.
        at::Tensor h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
        at::Tensor zs = at::matmul(h, w.t());
        if (softcap > 0) zs = at::tanh(zs / softcap) * softcap;
        at::Tensor ls = at::log_softmax(zs / T, -1);
        at::Tensor lt = values - lse.unsqueeze(1);
        at::Tensor ref = (lt.exp() * (lt - ls.gather(1, indices))).sum() * (T * T);
        (ref * 0.37).backward();
        for (int64_t chunk : {int64_t{1}, int64_t{4}, N}) {
          at::Tensor h2 = h0.clone().requires_grad_(true), w2 = w0.clone().requires_grad_(true);
          at::Tensor mine = cached_distill_loss(h2, w2, softcap, lse, values, indices, T, chunk);
          (mine * 0.37).backward();
          std::string what = "T " + std::to_string(T) + " softcap " + std::to_string(softcap) + " k " +
                             std::to_string(k) + " chunk " + std::to_string(chunk);
          EXPECT_TRUE(near(mine.item<double>(), ref.item<double>(), 1e-5)) << what;
          EXPECT_TRUE(grads_close(h2.grad(), h.grad(), 1e-5)) << what;
          EXPECT_TRUE(grads_close(w2.grad(), w.grad(), 1e-5)) << what;
        }
        // k = V is the live forward KL (distill_divergence), whatever the chunking.
        if (k == V && softcap == 0) {
          DistillOptions o;
          o.temperature = T;
          at::Tensor live = distill_divergence(at::matmul(h0, w0.t()), zt, o).sum() * (T * T);
          EXPECT_TRUE(near(cached_distill_loss(h0, w0, 0, lse, values, indices, T, 4).item<double>(),
                           live.item<double>(), 1e-5));
        }
      }
    }
  }
}

// ============================================================================================
// The CachedDistiller against the live Distiller

TEST(TeacherCache, DatasetBatchesCarryTheirRowIds) {
  auto ds = prompt_data();
  Batch b = ds->batch({4, 1, 4});
  ASSERT_TRUE(b.row_ids.defined());
  EXPECT_TRUE(at::equal(b.row_ids, at::tensor({4, 1, 4}, at::kLong)));
  // The row hash ignores padding: row 1 alone and padded beside a longer row hash the same.
  EXPECT_EQ(teacher_cache_row_hash(b, 1), teacher_cache_row_hash(ds->batch({1}), 0));
  EXPECT_NE(teacher_cache_row_hash(b, 0), teacher_cache_row_hash(b, 1));
}

TEST(TeacherCache, FullVocabularyEqualsTheLiveTeacher) {
  TempDir dir;
  const std::string path = dir.path + "/cache";
  auto data = prompt_data();
  auto teacher = tiny_model_sized(2, 48, 3, 61, /*softcap=*/30);
  TeacherCacheInfo info = teacher_cache_write(*teacher, *data, cache_options(path, 61));
  EXPECT_EQ(info.rows, data->size());
  EXPECT_EQ(info.entries, data->stats().target_tokens);

  DistillOptions live_o;
  live_o.alpha = 0.4;
  live_o.temperature = 2;
  live_o.chunk = 3;
  // Micro-batches of 2 rows over batches of 3: the cache was written 4 rows at a time.
  auto s_live = tiny_model_sized(1), s_cached = tiny_model_sized(1);
  auto live = std::make_shared<Distiller>(teacher, s_live, live_o);
  auto from_cache = std::make_shared<CachedDistiller>(s_cached, cached(path));
  Trainer a(s_live, constant_lr(1e-2, 2), {live}), b(s_cached, constant_lr(1e-2, 2), {from_cache});

  Batch batch = data->batch({5, 0, 3});
  ASSERT_LT(batch.target_tokens, batch.ids.numel());  // ignored targets are part of the test
  auto [la, na] = a.batch_loss(batch, true, batch.target_tokens);
  auto [lb, nb] = b.batch_loss(batch, true, batch.target_tokens);
  EXPECT_EQ(na, nb);
  EXPECT_TRUE(near(la, lb, 1e-5)) << la << " vs " << lb;
  for (size_t i = 0; i < a.parameters().size(); i++) {
    const auto& [name, p] = a.parameters()[i];
    EXPECT_TRUE(grads_close(b.parameters()[i].second->grad(), p->grad(), 1e-5)) << name;
  }

  // Training steps: the same losses and statistics.
  for (int64_t step = 1; step <= 3; step++) {
    Batch sb = data->batch(data->step_rows(step, 3, true, true));
    StepStats sa = a.step(sb), sc = b.step(sb);
    EXPECT_TRUE(near(sa.loss, sc.loss, 1e-5)) << step << ": " << sa.loss << " vs " << sc.loss;
    EXPECT_TRUE(near(step_stat(sa.extra, "kd_loss"), step_stat(sc.extra, "kd_loss"), 1e-5)) << step;
    EXPECT_TRUE(near(step_stat(sa.extra, "lm_loss"), step_stat(sc.extra, "lm_loss"), 1e-5)) << step;
  }
  // Evaluation keeps the LM loss and reports the KD term beside it.
  EvalStats ea = a.evaluate({batch}), ec = b.evaluate({batch});
  EXPECT_TRUE(near(ea.loss, ec.loss, 1e-5));
  EXPECT_TRUE(near(step_stat(ea.extra, "kd_loss"), step_stat(ec.extra, "kd_loss"), 1e-5));
}

TEST(TeacherCache, AlphaOneAndPackedRows) {
  TempDir dir;
  const std::string path = dir.path + "/cache";
  auto data = prompt_data(0, /*pack=*/true);
  auto teacher = tiny_model_sized(3, 32, 2);
  teacher_cache_write(*teacher, *data, cache_options(path, 61, "float32", 1));
  DistillOptions live_o;
  live_o.alpha = 1;
  auto s_live = tiny_model_sized(4), s_cached = tiny_model_sized(4);
  Trainer a(s_live, constant_lr(1e-2), {std::make_shared<Distiller>(teacher, s_live, live_o)});
  Trainer b(s_cached, constant_lr(1e-2), {std::make_shared<CachedDistiller>(s_cached, cached(path, 1, 1))});
  for (int64_t step = 1; step <= 2; step++) {
    Batch sb = data->batch(data->step_rows(step, 2, true, true));
    StepStats sa = a.step(sb), sc = b.step(sb);
    EXPECT_TRUE(near(sa.loss, sc.loss, 1e-5)) << step << ": " << sa.loss << " vs " << sc.loss;
  }
}

// k < V: the KD term is the teacher's top-k mass against the student, no renormalisation. Checked
// against the whole teacher and student logits (Model::forward), restricted to the teacher's top-k.
TEST(TeacherCache, TopKEqualsTheWholeLogitsRestrictedToTheTopK) {
  TempDir dir;
  const std::string path = dir.path + "/cache";
  auto data = prompt_data();
  auto teacher = tiny_model_sized(5, 48, 2), student = tiny_model_sized(6);
  const int64_t k = 5;
  const double T = 1.5;
  teacher_cache_write(*teacher, *data, cache_options(path, k, "float32", T));
  Trainer t(student, constant_lr(1e-2), {std::make_shared<CachedDistiller>(student, cached(path, 0.5, T))});
  Batch batch = data->batch({0, 1, 2, 3, 4, 5});
  EvalStats e = t.evaluate({batch});

  at::NoGradGuard no_grad;
  ForwardOptions fo;
  fo.positions = batch.positions;
  fo.segments = batch.segments;
  at::Tensor keep = batch.targets.reshape({-1}).ne(kIgnoreTarget).nonzero().reshape({-1});
  at::Tensor zt = teacher->forward(batch.ids, fo).reshape({-1, 61}).index_select(0, keep) / T;
  at::Tensor zs = student->forward(batch.ids, fo).reshape({-1, 61}).index_select(0, keep) / T;
  at::Tensor lt = at::log_softmax(zt.to(at::kDouble), -1), ls = at::log_softmax(zs.to(at::kDouble), -1);
  at::Tensor top = std::get<1>(at::topk(zt, k, -1));
  at::Tensor ltk = lt.gather(1, top);
  const double ref = (ltk.exp() * (ltk - ls.gather(1, top))).sum().item<double>() * T * T / keep.numel();
  EXPECT_TRUE(near(step_stat(e.extra, "kd_loss"), ref, 1e-5))
      << step_stat(e.extra, "kd_loss") << " vs " << ref;
  // The tail left out: the whole forward KL differs from it by the tail terms.
  const double full = (lt.exp() * (lt - ls)).sum().item<double>() * T * T / keep.numel();
  EXPECT_GT(std::abs(full - ref), 1e-4);
}

TEST(TeacherCache, HalfPrecisionValuesStayCloseToFloat32) {
  TempDir dir;
  auto data = prompt_data();
  auto teacher = tiny_model_sized(7, 48, 2), student = tiny_model_sized(8);
  Batch batch = data->batch({0, 1, 2, 3, 4, 5});
  double kd[3];
  const char* dtypes[] = {"float32", "bf16", "float16"};
  for (int i = 0; i < 3; i++) {
    const std::string path = dir.path + "/" + dtypes[i];
    TeacherCacheInfo info = teacher_cache_write(*teacher, *data, cache_options(path, 8, dtypes[i]));
    EXPECT_EQ(fs::file_size(path + "/values.bin"),
              static_cast<uintmax_t>(info.entries * 8 * (i == 0 ? 4 : 2)));
    Trainer t(student, constant_lr(1e-2), {std::make_shared<CachedDistiller>(student, cached(path))});
    kd[i] = step_stat(t.evaluate({batch}).extra, "kd_loss");
  }
  EXPECT_EQ(teacher_cache_info(dir.path + "/bf16").dtype, "bfloat16");
  EXPECT_GT(kd[0], 0);
  EXPECT_TRUE(near(kd[1], kd[0], 2e-2)) << kd[1] << " vs " << kd[0];  // bf16: 8 bits of mantissa
  EXPECT_TRUE(near(kd[2], kd[0], 2e-3)) << kd[2] << " vs " << kd[0];  // f16: 11
}

// ============================================================================================
// Writing: never a half-written cache under the final name

TEST(TeacherCache, WriterPublishesByRenameOnly) {
  TempDir dir;
  const std::string path = dir.path + "/cache";
  auto data = prompt_data();
  auto teacher = tiny_model_sized(9);
  teacher_cache_write(*teacher, *data, cache_options(path, 4));
  EXPECT_EQ(names_in(dir.path), std::vector<std::string>{"cache"});
  EXPECT_EQ(names_in(path), (std::vector<std::string>{"hashes.u64", "indices.i32", "lse.f32", "meta.json",
                                                      "offsets.i64", "values.bin"}));
  // A second write replaces the first.
  teacher_cache_write(*teacher, *data, cache_options(path, 6, "bfloat16"));
  EXPECT_EQ(names_in(dir.path), std::vector<std::string>{"cache"});
  EXPECT_EQ(teacher_cache_info(path).k, 6);
  // A write that fails half way (a teacher too small for the data's token ids) leaves the old
  // cache in place and no temporary beside it.
  auto small = tiny_model_sized(10, 32, 2, /*vocab=*/8);
  EXPECT_THROW(teacher_cache_write(*small, *data, cache_options(path, 2)), std::exception);
  EXPECT_EQ(names_in(dir.path), std::vector<std::string>{"cache"});
  TeacherCacheInfo m = teacher_cache_info(path);
  EXPECT_EQ(m.k, 6);
  EXPECT_EQ(m.dtype, "bfloat16");
  EXPECT_EQ(m.vocab, 61);
  EXPECT_EQ(m.teacher_type, "llama");
  EXPECT_EQ(m.teacher_layers, 2);
}

// ============================================================================================
// Errors

TEST(TeacherCache, ErrorsNameTheProblem) {
  TempDir dir;
  const std::string path = dir.path + "/cache";
  auto data = prompt_data();
  auto teacher = tiny_model_sized(11), student = tiny_model_sized(12);
  auto write = [&](TeacherCacheOptions o) {
    return error_of([&] { teacher_cache_write(*teacher, *data, o); });
  };
  EXPECT_EQ(write(cache_options(path, 0)),
            "distill.write_cache: option 'k' must be in 1..61 (the teacher's vocabulary), got 0");
  EXPECT_EQ(write(cache_options(path, 62)),
            "distill.write_cache: option 'k' must be in 1..61 (the teacher's vocabulary), got 62");
  EXPECT_EQ(
      write(cache_options(path, 4, "int8")),
      "distill.write_cache: option 'dtype' must be \"float32\", \"bfloat16\" or \"float16\", got \"int8\"");
  EXPECT_EQ(write(cache_options(path, 4, "float32", 0)),
            "distill.write_cache: option 'temperature' must be positive, got 0");
  EXPECT_FALSE(fs::exists(path));
  teacher_cache_write(*teacher, *data, cache_options(path, 4));

  auto open = [&](CachedDistillOptions o, std::shared_ptr<Model> s = nullptr) {
    return error_of([&] { CachedDistiller d(s ? s : student, o); });
  };
  EXPECT_EQ(open(cached(path, 0.4, 1)), "distill.cached: temperature 1 differs from the teacher cache's 2 (" +
                                            path + "); use the cache's or write the cache again");
  EXPECT_EQ(open(cached(path), tiny_model_sized(13, 32, 2, 80)),
            "distill.cached: the teacher cache " + path +
                " has vocabulary 61 (teacher llama, hidden 32, 2 layers), the student 80");
  CachedDistillOptions o = cached(path);
  o.loss = "jsd";
  EXPECT_EQ(
      open(o),
      "distill.cached: loss must be \"forward_kl\" with a cached teacher, got \"jsd\" (reverse KL and JSD "
      "need the teacher's whole distribution; use distill.new with the teacher loaded)");
  EXPECT_EQ(open(cached(dir.path + "/none")), "distill.cached: no teacher cache at " + dir.path +
                                                  "/none (write one with distill.write_cache first)");

  // Other data: the same number of rows, other prompts.
  auto other = prompt_data(1);
  {
    Trainer t(student, constant_lr(1e-2), {std::make_shared<CachedDistiller>(student, cached(path))});
    EXPECT_EQ(error_of([&] {
                t.step(other->batch({2, 0}));
              }),
              "distill.cached: the teacher cache " + path + " was written for other data (row 2 differs)");
    Batch no_ids = data->batch({0});
    no_ids.row_ids = at::Tensor();
    EXPECT_EQ(error_of([&] { t.step(no_ids); }),
              "distill.cached: the cached teacher needs batches from data.jsonl's dataset (row ids); this "
              "batch has none");
    // Evaluation of rows the cache does not hold (a validation set): the LM loss alone, no KD numbers.
    Trainer plain(student, constant_lr(1e-2));
    EvalStats e = t.evaluate({other->batch({2, 0})}), p = plain.evaluate({other->batch({2, 0})});
    EXPECT_EQ(e.loss, p.loss);
    EXPECT_TRUE(e.extra.empty());
  }

  // A damaged cache: meta.json missing or not JSON, a file cut short.
  const std::string meta = file_read(path + "/meta.json");
  fs::remove(path + "/meta.json");
  EXPECT_EQ(open(cached(path)),
            "distill.cached: " + path + "/meta.json is missing (not a teacher cache, or one not finished)");
  write_text(path + "/meta.json", "{\"format\": ");
  EXPECT_EQ(open(cached(path)), "distill.cached: " + path +
                                    "/meta.json is damaged (expected a JSON object with format "
                                    "\"luatune.teacher_cache\")");
  write_text(path + "/meta.json", meta);
  EXPECT_EQ(open(cached(path)), "(no error)");
  fs::resize_file(path + "/values.bin", fs::file_size(path + "/values.bin") - 2);
  std::string m = open(cached(path));
  EXPECT_EQ(m.rfind("distill.cached: " + path + "/values.bin has ", 0), 0u) << m;
  EXPECT_NE(m.find("(a damaged cache: write it again)"), std::string::npos) << m;
}
