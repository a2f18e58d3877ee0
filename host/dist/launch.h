// `runner --nproc N RECIPE [key=value ...]`: starts N local copies of the runner as ranks 0..N-1
// of one job, with the variables torchrun would set (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT = a free port unless set,
// TORCHELASTIC_USE_AGENT_STORE=False, OMP_NUM_THREADS split between them unless set), waits
// for them, and returns the job's exit status. No Torch here.
#pragma once

#include <string>
#include <vector>

namespace luatune {

struct LaunchOptions {
  int nproc = 1;
  std::string runner;             // the executable (this runner's own path)
  std::vector<std::string> args;  // its arguments for every rank (the recipe and key=value)
  // After one rank fails, the others get SIGTERM, then SIGKILL when they have not exited after
  // this many seconds.
  double kill_grace_s = 10;
};

// Output: each rank's stdout/stderr go to the launcher's, lines of ranks other than 0 prefixed
// "[rank N] ". Exit status: 0 when every rank exits 0; else the first failing rank's status (a
// signal-killed rank counts as 128 + signal), after the others were stopped as above, with one
// line naming the rank. SIGINT/SIGTERM to the launcher are forwarded to every rank, and the
// launcher then returns 130.
int dist_launch_local(const LaunchOptions& o);

// A TCP port nobody listens on now (bind to port 0 on 127.0.0.1, read it back, close).
int dist_free_port();

}  // namespace luatune
