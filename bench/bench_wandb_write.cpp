// bench_wandb_write: what a training step pays to log one row to W&B, against the JSONL sink (the
// peer: one formatted, flushed line) in the same run. The W&B sink's base URL is a closed port, so
// its sender thread is busy failing and retrying the whole time: the worst case for the step.
// Run: build/bench/bench_wandb_write [rows]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "host/metrics/metrics.h"
#include "host/metrics/wandb.h"

using namespace luatune;

namespace {

double us_per_write(MetricSink& sink, int rows) {
  MetricValues v;
  v.numbers = {{"loss", 1.25}, {"lr", 2e-4}, {"grad_norm", 0.5}, {"tokens_per_s", 12345}};
  auto t0 = std::chrono::steady_clock::now();
  for (int step = 1; step <= rows; step++) sink.write(step, v);
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / rows;
}

}  // namespace

int main(int argc, char** argv) {
  int rows = argc > 1 ? std::atoi(argv[1]) : 20000;
  std::string dir = (std::filesystem::temp_directory_path() / "luatune_bench_wandb").string();
  std::filesystem::remove_all(dir);

  JsonlOptions jo;
  jo.path = dir + "/metrics.jsonl";
  std::filesystem::create_directories(dir);
  auto jsonl = jsonl_sink_new(jo);
  double jsonl_us = us_per_write(*jsonl, rows);
  jsonl->close(0);

  WandbOptions wo;
  wo.project = "bench";
  wo.mode = "online";
  wo.base_url = "http://127.0.0.1:1";  // nothing listens: every request fails and is retried
  wo.api_key = "benchkey-not-a-real-key-0000000000000000000";
  wo.dir = dir;
  wo.run_id = "bench001";
  wo.retry_wait_min = 0.01;
  wo.retry_wait_max = 0.05;
  wo.finish_timeout = 0.1;
  std::FILE* null = std::fopen("/dev/null", "w");
  wo.notices = null;
  auto wandb = wandb_sink_new(wo);
  double wandb_us = us_per_write(*wandb, rows);
  wandb->close(0);
  std::fclose(null);

  std::printf("%d rows of 4 numbers, one write per step:\n", rows);
  std::printf("  JSONL sink (peer)                  %8.2f us/row\n", jsonl_us);
  std::printf("  W&B sink, server unreachable       %8.2f us/row  (%.2fx the JSONL sink)\n", wandb_us,
              wandb_us / jsonl_us);
  std::filesystem::remove_all(dir);
  return 0;
}
