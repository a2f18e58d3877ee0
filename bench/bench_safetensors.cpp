// How fast does luatune load a safetensors checkpoint, next to `cat file > /dev/null`?
// Writes a Llama-shaped bf16 checkpoint (or takes --path), warms the page cache, then times, best
// of --reps: cat, opening the reader (headers only), and opening plus materialising every tensor
// four ways: touching one byte per page of the zero-copy views, reading every byte of them,
// cloning into owned memory, and converting bf16 -> f32.
//
//   bench_safetensors [--gb 1.5] [--reps 3] [--shard-gb 0] [--path CHECKPOINT] [--keep]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "host/core/error.h"
#include "host/io/safetensors.h"

using namespace luatune;
namespace fs = std::filesystem;

static double seconds_of(const std::function<void()>& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

static double best_of(int reps, const std::function<void()>& fn) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) best = std::min(best, seconds_of(fn));
  return best;
}

// A Llama-like layout: an embedding, then layers of attention and MLP weights (hidden 2048,
// intermediate 5632, 4 KV heads of 128), until the checkpoint reaches `gb` gigabytes.
static std::vector<std::pair<std::string, at::Tensor>> make_tensors(double gb) {
  const int64_t h = 2048, ff = 5632, kv = 512, vocab = 32000;
  std::vector<std::pair<std::string, at::Tensor>> out;
  uint64_t bytes = 0;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    out.emplace_back(name, at::randn(shape, at::kBFloat16));
    bytes += out.back().second.nbytes();
  };
  add("model.embed_tokens.weight", {vocab, h});
  for (int l = 0; bytes < gb * 1e9; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {h});
    add(p + "self_attn.q_proj.weight", {h, h});
    add(p + "self_attn.k_proj.weight", {kv, h});
    add(p + "self_attn.v_proj.weight", {kv, h});
    add(p + "self_attn.o_proj.weight", {h, h});
    add(p + "post_attention_layernorm.weight", {h});
    add(p + "mlp.gate_proj.weight", {ff, h});
    add(p + "mlp.up_proj.weight", {ff, h});
    add(p + "mlp.down_proj.weight", {h, ff});
  }
  add("model.norm.weight", {h});
  return out;
}

// Opens the checkpoint and adds up what `read` returns for each tensor's zero-copy bytes (its
// pointer and size): a sum the caller keeps, so the reads cannot be optimised away.
static uint64_t sum_views(const std::string& path, uint64_t (*read)(const uint8_t* p, uint64_t n)) {
  SafetensorsReader r(path);
  uint64_t sum = 0;
  for (const std::string& name : r.names()) {
    at::Tensor t = r.tensor(name);
    sum += read(static_cast<const uint8_t*>(t.data_ptr()), t.nbytes());
  }
  return sum;
}

// One byte per 4 KiB page: what faulting the mapping in costs.
static uint64_t read_one_byte_per_page(const uint8_t* p, uint64_t n) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < n; i += 4096) sum += p[i];
  return sum;
}

// Every byte, 8 at a time.
static uint64_t read_every_byte(const uint8_t* p, uint64_t n) {
  uint64_t sum = 0, w = 0;
  for (uint64_t i = 0; i < n / 8; ++i) {
    std::memcpy(&w, p + 8 * i, 8);
    sum += w;
  }
  return sum;
}

int main(int argc, char** argv) {
  double gb = 1.5, shard_gb = 0;
  int reps = 3;
  bool keep = false;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_safetensors: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--gb")
      gb = std::atof(next().c_str());
    else if (a == "--reps")
      reps = std::max(1, std::atoi(next().c_str()));
    else if (a == "--shard-gb")
      shard_gb = std::atof(next().c_str());
    else if (a == "--path")
      path = next();
    else if (a == "--keep")
      keep = true;
    else {
      std::fprintf(
          stderr,
          "usage: bench_safetensors [--gb 1.5] [--reps 3] [--shard-gb 0] [--path CHECKPOINT] [--keep]\n");
      return 2;
    }
  }

  try {
    std::string tmp_dir;
    if (path.empty()) {
      const char* base = std::getenv("TMPDIR");
      std::string templ = std::string(base && *base ? base : "/tmp") + "/lt-bench-st-XXXXXX";
      std::vector<char> buf(templ.begin(), templ.end());
      buf.push_back('\0');
      if (!::mkdtemp(buf.data())) fail("bench_safetensors: cannot make a directory from " + templ);
      tmp_dir = path = buf.data();
      auto tensors = make_tensors(gb);
      uint64_t bytes = 0;
      for (const auto& kv : tensors) bytes += kv.second.nbytes();
      SafetensorsWriteOptions options;
      if (shard_gb > 0) options.max_shard_bytes = static_cast<uint64_t>(shard_gb * 1e9);
      double s = seconds_of([&] { safetensors_save_dir(path, tensors, options); });
      std::printf("write (with fsync)          %8.3f s  %6.2f GB/s  (%zu tensors)\n", s, bytes / s / 1e9,
                  tensors.size());
    }

    SafetensorsReader probe(path);
    std::vector<std::string> files;
    for (const std::string& n : probe.names()) {
      const std::string& f = probe.file_of(n);
      if (std::find(files.begin(), files.end(), f) == files.end()) files.push_back(f);
    }
    const double gbytes = probe.total_bytes() / 1e9;
    std::string cat = "cat";
    for (const std::string& f : files) cat += " '" + f + "'";
    cat += " > /dev/null";
    std::printf(
        "checkpoint %s: %zu tensors, %.3f GB of data in %zu file(s); %d intra-op threads; best of %d\n",
        path.c_str(), probe.names().size(), gbytes, files.size(), at::get_num_threads(), reps);
    if (std::system(cat.c_str()) != 0)
      fail("bench_safetensors: '" + cat + "' failed");  // warms the page cache

    double t_cat = best_of(reps, [&] {
      if (std::system(cat.c_str()) != 0) fail("bench_safetensors: '" + cat + "' failed");
    });
    auto report = [&](const char* what, double s) {
      std::printf("%-27s %8.3f s  %6.2f GB/s  %5.2fx cat\n", what, s, gbytes / s, t_cat / s);
    };
    report("cat > /dev/null", t_cat);

    double t_open = best_of(reps, [&] { SafetensorsReader r(path); });  // no data touched: no GB/s
    std::printf("%-27s %8.3f s  (map + parse + validate %zu header(s))\n", "open (headers only)", t_open,
                files.size());

    volatile uint64_t sink = 0;  // keeps the reads from being optimised away
    report("zero-copy, 1 byte per page",
           best_of(reps, [&] { sink = sink + sum_views(path, read_one_byte_per_page); }));
    report("zero-copy, read every byte",
           best_of(reps, [&] { sink = sink + sum_views(path, read_every_byte); }));
    report("clone to owned memory", best_of(reps, [&] {
             SafetensorsReader r(path);
             for (const std::string& n : r.names()) r.tensor(n).clone();
           }));
    report("convert bf16 -> f32", best_of(reps, [&] {
             SafetensorsReader r(path);
             for (const std::string& n : r.names()) r.tensor(n).to(at::kFloat);
           }));

    if (!tmp_dir.empty() && !keep) fs::remove_all(tmp_dir);
    if (!tmp_dir.empty() && keep) std::printf("kept %s\n", tmp_dir.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
