// bench_chat_template TOKENIZER_DIR DATA.jsonl [CHAT_TEMPLATE] [REPEAT]: renders and encodes every
// conversation of DATA.jsonl ({"messages": [...]} a line; the example chat set by default in
// bench/bench_chat_template.sh) with the tokenizer's own chat template (or CHAT_TEMPLATE: a file or a
// name, as the recipes' chat_template key), the assistant mask included, on one thread, REPEAT times
// (default 3) after one warm-up pass; prints the best pass. bench/bench_chat_template.py does the same
// with transformers' apply_chat_template; bench/bench_chat_template.sh runs both and prints the ratio.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "host/core/error.h"
#include "host/text/chat.h"
#include "host/text/tokenizer.h"

using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_chat_template TOKENIZER_DIR DATA.jsonl [CHAT_TEMPLATE] [REPEAT]\n");
    return 2;
  }
  const std::string choice = argc > 3 ? argv[3] : "";
  const int repeat = argc > 4 ? std::max(1, std::atoi(argv[4])) : 3;
  try {
    auto tok = luatune::Tokenizer::load(argv[1]);
    auto tmpl = luatune::chat_template_resolve(*tok, choice);
    luatune::ChatOptions options = luatune::chat_options_for(*tok, {});
    std::vector<nlohmann::ordered_json> conversations;
    std::ifstream in(argv[2]);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) conversations.push_back(nlohmann::ordered_json::parse(line)["messages"]);
    double best = 1e30;
    int64_t tokens = 0, targets = 0;
    for (int pass = 0; pass <= repeat; pass++) {
      auto t0 = Clock::now();
      tokens = targets = 0;
      for (const auto& messages : conversations) {
        luatune::ChatEncoding e = luatune::chat_encode(*tok, *tmpl, messages, options);
        tokens += static_cast<int64_t>(e.ids.size());
        for (uint8_t m : e.mask) targets += m;
      }
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (pass > 0) best = std::min(best, s);  // pass 0 warms up
    }
    std::printf("conversations=%zu seconds=%.4f tokens=%lld targets=%lld masks=%s template=%s\n",
                conversations.size(), best, static_cast<long long>(tokens), static_cast<long long>(targets),
                tmpl->has_generation_blocks() ? "generation" : "prefix", tmpl->origin().c_str());
  } catch (const luatune::Error& e) {
    std::fprintf(stderr, "bench_chat_template: %s\n", e.what());
    return 1;
  }
  return 0;
}
