// Distillation from cached teacher outputs (docs/distill.md, "Cached teacher"): the teacher runs
// once over a dataset and its top-k logits per target token go to disk; training then reads them
// back per micro-batch, so the teacher is not in memory during the student's training at all.
// The KD term is forward KL restricted to the cached top-k (exactly the live forward KL at k = V).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host/train/trainer.h"

namespace luatune {

class Dataset;  // host/data/dataset.h

// What the cache holds, in a directory (all little-endian, row-major, no headers):
//   meta.json     format version, rows, entries, max_length, k, dtype, temperature, vocab size, and
//                 the teacher's model type / hidden size / layers (for messages)
//   offsets.i64   (rows + 1) int64: row r's entries are [offsets[r], offsets[r+1])
//   hashes.u64    (rows) uint64: a hash of each row's tokens, targets mask and positions
//   lse.f32       (entries) float32: log-sum-exp over the FULL vocabulary of z / T
//   values.bin    (entries, k) in `dtype`: the top-k of z / T, largest first
//   indices.i32   (entries, k) int32: their token ids
// An entry is one position with a target, in row order then position order (the order of the
// trainer's `keep`). z is the teacher's logits, soft-capped when its config has a final softcap.
// Disk per target token: k * (value bytes + 4) + 4, e.g. 388 bytes at k = 64 in bfloat16 (the
// whole float32 distribution of Llama 3.1's 128,256 tokens would be 513,024). A micro-batch reads
// that much per kept token (its rows' entries, one contiguous range per row and file), plus
// 16 bytes per row for offsets and hashes, which stay in memory from open to close.
struct TeacherCacheOptions {
  std::string path;                // the cache directory (replaced when it exists)
  int64_t k = 64;                  // top logits kept per token, 1..V
  std::string dtype = "bfloat16";  // of the values: "float32", "bfloat16" or "float16" (or bf16, f16, ...)
  double temperature = 1.0;        // z / T is stored; training must use the same T
  int64_t batch_size = 8;          // rows per teacher forward
  int64_t chunk = 1024;            // rows of logits materialised at once
};

struct TeacherCacheInfo {
  int64_t version = 1;
  int64_t rows = 0, entries = 0, max_length = 0, k = 0, vocab = 0;
  std::string dtype;  // "float32", "bfloat16", "float16"
  double temperature = 1.0;
  std::string teacher_type;  // e.g. "llama"
  int64_t teacher_hidden = 0, teacher_layers = 0;
  int64_t bytes = 0;  // on disk, every file (teacher_cache_write's result; 0 when read back)
};

// Runs the teacher (without autograd, on its own device and dtype) over every row of `data` in
// order and writes the cache into PATH.tmp-PID, then renames it into place (an existing cache is
// moved aside and deleted only after the rename): there is never a half-written cache under PATH.
// Fails with one line on bad options (naming the option and what was expected).
TeacherCacheInfo teacher_cache_write(Model& teacher, const Dataset& data, const TeacherCacheOptions& o);
// Reads and checks PATH/meta.json and the sizes of the other files against it.
TeacherCacheInfo teacher_cache_info(const std::string& path);

// 64-bit hash of row i of `b`: its first lengths[i] tokens (all T when lengths is undefined), with
// whether each has a target and its position. The cache refuses rows whose hash differs.
uint64_t teacher_cache_row_hash(const Batch& b, int64_t i);

// T^2 * sum over rows of sum_j p_t,j (log p_t,j - log p_s[idx_j]) with p_t,j = exp(values_j - lse)
// and log p_s = log_softmax(softcap(hidden @ weight^T) / T): forward KL over the cached top-k
// (no renormalisation: the teacher's mass outside the top-k is left out). hidden (N, C), weight
// (V, C), lse (N) and values (N, k) float32 (already divided by T), indices (N, k) int64, all on
// hidden's device. float32 scalar, differentiable in hidden and weight; `chunk` rows of student
// logits at a time, forward and backward (closed-form gradient, docs/distill.md).
at::Tensor cached_distill_loss(const at::Tensor& hidden, const at::Tensor& weight, double softcap,
                               const at::Tensor& lse, const at::Tensor& values, const at::Tensor& indices,
                               double temperature, int64_t chunk);

struct CachedDistillOptions {
  std::string path;                 // a cache written by teacher_cache_write
  std::string loss = "forward_kl";  // the only one: reverse KL and JSD need the whole distribution
  double temperature = 1.0;         // must equal the cache's
  double alpha = 0.5;               // total = (1 - alpha) * LM + alpha * KD, as the live Distiller
  int64_t chunk = 1024;             // rows of student logits materialised at once
};

class CachedDistiller : public TrainerHook {
 public:
  // Opens the cache and checks it against the options and the student (vocabulary). Holds the
  // student for its LM head; it must be the model of the Trainer this hook is given to.
  CachedDistiller(std::shared_ptr<Model> student, CachedDistillOptions options);
  ~CachedDistiller() override;
  const CachedDistillOptions& options() const { return options_; }
  const TeacherCacheInfo& info() const;

  // As the live Distiller: training micro-batches get (1 - alpha) * ce_sum + alpha * KD sum;
  // evaluation keeps the LM loss; stats lm_loss and kd_loss (with T^2), means per target token
  // since begin(). Training batches must carry row_ids (Dataset::batch sets them) of rows the
  // cache holds, else the step fails naming why; evaluation leaves such micro-batches to the LM
  // loss and out of the statistics (no lm_loss / kd_loss when none was cached).
  void begin(bool training) override;
  at::Tensor micro_loss(const MicroBatch& mb, const at::Tensor& ce_sum) override;
  bool uses_lm_loss_gradient() const override { return options_.alpha < 1; }
  std::vector<std::pair<std::string, double>> stats(bool training) override;

 private:
  std::shared_ptr<Model> student_;
  CachedDistillOptions options_;
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace luatune
