// fake_wandb_server: the loopback W&B server (tests/cpp/fake_wandb.h) as a program, for the
// recipe tests. Prints its port on the first line of stdout, then serves until killed; after
// every request it rewrites DUMP (atomically) with what it has received, as JSON.
//   fake_wandb_server --key KEY --dump DUMP [--stop-after-rows N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "tests/cpp/fake_wandb.h"

int main(int argc, char** argv) {
  std::string key, dump;
  long long stop_after = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--key") {
      key = argv[i + 1];
    } else if (flag == "--dump") {
      dump = argv[i + 1];
    } else if (flag == "--stop-after-rows") {
      stop_after = std::atoll(argv[i + 1]);
    } else {
      std::fprintf(stderr, "fake_wandb_server: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (key.empty() || dump.empty()) {
    std::fprintf(stderr, "usage: fake_wandb_server --key KEY --dump FILE [--stop-after-rows N]\n");
    return 2;
  }
  luatune::FakeWandb server(key);
  server.stop_after_rows(stop_after);
  std::mutex dump_mu;  // requests are served on several threads
  auto write_dump = [&] {
    std::lock_guard<std::mutex> lock(dump_mu);
    std::string tmp = dump + ".tmp";
    {
      std::ofstream out(tmp);
      out << server.dump().dump(1) << "\n";
    }
    std::rename(tmp.c_str(), dump.c_str());
  };
  write_dump();
  server.on_request(write_dump);
  std::printf("%d\n", server.port());
  std::fflush(stdout);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}
