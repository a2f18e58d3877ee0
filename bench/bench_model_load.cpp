// Peak host memory of models.load against the checkpoint's size: an 8B model must not need twice
// its size in host memory. Writes a bf16 model of about `--gb` GB (Llama shape), then loads it in a
// fresh child process per variant and reports the child's peak RSS / checkpoint bytes:
//   bf16 -> bf16 on CPU (zero-copy views of the mapped file), bf16 -> float32 (converted per tensor).
// Usage: bench_model_load [--gb 1.0] [--dir /tmp/luatune_bench_model] [--hidden 2048]
// (--hidden: a narrower model, the MLP and vocabulary as before; the smoke test's --gb 0.01 --hidden 128
// writes a few MB).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "host/model/checkpoint.h"
#include "host/model/config.h"

using namespace luatune;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t dir_bytes(const std::string& dir) {
  uint64_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") n += e.file_size();
  return n;
}

// Runs one load in a child so its peak RSS is its own; returns {peak RSS bytes, seconds}.
std::pair<double, double> load_in_child(const std::string& dir, const std::string& dtype) {
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    // One thread: the parent's OpenMP pool (libgomp, which PyTorch's wheel ships) did not come
    // through the fork, and a parallel region here would wait for its threads forever.
    at::set_num_threads(1);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double base = static_cast<double>(ru.ru_maxrss) * 1024.0;  // LibTorch itself, before loading
    double t0 = now();
    auto m = model_load(dir, {dtype, "cpu"});
    // Touch every weight (a reduction, no temporary copy) so lazily mapped pages count too.
    double sum = 0;
    for (const auto& [name, t] : m->state()) sum += t.sum().item<double>();
    double secs = now() - t0;
    getrusage(RUSAGE_SELF, &ru);
    double out[2] = {static_cast<double>(ru.ru_maxrss) * 1024.0 - base, secs + 0 * sum};
    if (write(fds[1], out, sizeof(out)) != sizeof(out)) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  double in[2] = {0, 0};
  if (read(fds[0], in, sizeof(in)) != sizeof(in)) std::fprintf(stderr, "child failed\n");
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return {in[0], in[1]};
}

}  // namespace

int main(int argc, char** argv) {
  double gb = 1.0;
  int64_t hidden = 2048;
  std::string dir = (std::filesystem::temp_directory_path() / "luatune_bench_model").string();
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--gb")) gb = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--dir")) dir = argv[i + 1];
    if (!std::strcmp(argv[i], "--hidden")) hidden = std::max<int64_t>(64, std::atoll(argv[i + 1]) / 64 * 64);
  }
  // Llama-8B proportions scaled down: hidden 2048, 14336/4096 MLP ratio, vocab 32000.
  const int64_t inter = hidden * 7 / 2, vocab = 32000;
  const double layer_bytes = 2.0 * (4.0 * hidden * hidden * 0.625 + 3.0 * hidden * inter);
  const int64_t layers =
      std::max<int64_t>(1, static_cast<int64_t>((gb * 1e9 - 4.0 * vocab * hidden) / layer_bytes));
  std::string fields = "{\"vocab_size\": " + std::to_string(vocab) +
                       ", \"hidden_size\": " + std::to_string(hidden) +
                       ", \"intermediate_size\": " + std::to_string(inter) +
                       ", \"num_hidden_layers\": " + std::to_string(layers) +
                       ", \"num_attention_heads\": 16, \"num_key_value_heads\": 4}";
  {
    auto m = model_init(model_config_with("llama", fields, "bench"), 0, at::kBFloat16, at::kCPU);
    SaveOptions so;
    so.max_shard_bytes = 500000000;
    model_save(*m, dir, so);
  }
  const double bytes = static_cast<double>(dir_bytes(dir));
  // Warm the page cache so both variants read from memory.
  load_in_child(dir, "bfloat16");
  std::printf("checkpoint: %s, %lld layers, %.2f GB (bf16)\n", dir.c_str(), static_cast<long long>(layers),
              bytes / 1e9);
  for (const char* dtype : {"bfloat16", "float32"}) {
    auto [rss, secs] = load_in_child(dir, dtype);
    std::printf(
        "load as %-8s: peak RSS growth %.2f GB = %.2f x checkpoint (%.2f x the loaded weights), %.2f s\n",
        dtype, rss / 1e9, rss / bytes, rss / (bytes * (std::strcmp(dtype, "float32") ? 1 : 2)), secs);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
