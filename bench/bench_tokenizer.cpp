// bench_tokenizer DIR CORPUS.jsonl [MB] [THREADS]: load time of a tokenizer, then encode throughput
// on a corpus (one JSON string a line) repeated with a varying suffix until it holds MB megabytes
// (default 4), encoded by THREADS threads sharing the tokenizer (default 1; each takes every
// THREADS-th line). bench/bench_tokenizer.mjs builds the same text for transformers.js;
// bench/bench_tokenizer.sh runs both and prints the ratio.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "host/text/tokenizer.h"

using Clock = std::chrono::steady_clock;

static double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_tokenizer DIR CORPUS.jsonl [MB] [THREADS]\n");
    return 2;
  }
  double mb = argc > 3 ? std::atof(argv[3]) : 4.0;
  int threads = argc > 4 ? std::max(1, std::atoi(argv[4])) : 1;
  try {
    auto t0 = Clock::now();
    auto tok = luatune::Tokenizer::load(argv[1]);
    double load_s = seconds_since(t0);

    std::vector<std::string> corpus;
    std::ifstream in(argv[2]);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) corpus.push_back(nlohmann::json::parse(line).get<std::string>());
    // Rep r appends " r" to every line, so words vary a little between repetitions.
    std::vector<std::string> texts;
    size_t bytes = 0;
    for (int r = 0; bytes < mb * 1e6; r++)
      for (const std::string& line : corpus) {
        texts.push_back(line + " " + std::to_string(r));
        bytes += texts.back().size();
      }

    std::atomic<size_t> tokens{0};
    t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int k = 0; k < threads; k++)
      pool.emplace_back([&, k] {
        size_t n = 0;
        for (size_t i = k; i < texts.size(); i += threads) n += tok->encode(texts[i], false).size();
        tokens += n;
      });
    for (auto& t : pool) t.join();
    double enc_s = seconds_since(t0);
    std::printf("luatune load_s=%.3f bytes=%zu tokens=%zu threads=%d encode_s=%.3f MB/s=%.2f\n", load_s,
                bytes, tokens.load(), threads, enc_s, bytes / 1e6 / enc_s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
