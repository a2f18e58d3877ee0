// host/dist/launch.cpp with /bin/sh as the "runner": the variables every rank gets, the exit
// status of the first failing rank, 128 + signal for a killed one, and SIGKILL after the grace
// period for a rank that ignores SIGTERM. (tests/dist/test_launch.sh runs the real runner.)
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <string>

#include "host/dist/launch.h"

using namespace luatune;

namespace {

int launch_sh(int nproc, const std::string& script, double grace_s = 10) {
  LaunchOptions o;
  o.nproc = nproc;
  o.runner = "/bin/sh";
  o.args = {"-c", script};
  o.kill_grace_s = grace_s;
  return dist_launch_local(o);
}

}  // namespace

TEST(DistLaunch, EveryRankGetsTorchrunsVariables) {
  EXPECT_EQ(launch_sh(3,
                      "test \"$RANK\" = \"$LOCAL_RANK\" && test \"$WORLD_SIZE\" = 3 && "
                      "test \"$LOCAL_WORLD_SIZE\" = 3 && test \"$MASTER_ADDR\" = 127.0.0.1 && "
                      "test -n \"$MASTER_PORT\" && test \"$TORCHELASTIC_USE_AGENT_STORE\" = False && "
                      "test -n \"$OMP_NUM_THREADS\" || exit 9"),
            0);
}

TEST(DistLaunch, FirstFailingRanksStatus) {
  // Ranks 0 and 2 would sleep for minutes; rank 1's failure stops them.
  EXPECT_EQ(launch_sh(3, "if [ \"$RANK\" = 1 ]; then exit 4; fi; sleep 300"), 4);
}

TEST(DistLaunch, KilledRankCountsAs128PlusSignal) {
  EXPECT_EQ(launch_sh(2, "if [ \"$RANK\" = 1 ]; then kill -KILL $$; fi; exit 0"), 128 + 9);
}

TEST(DistLaunch, SigkillAfterGraceForRanksIgnoringSigterm) {
  // Rank 0 fails once rank 1 ignores SIGTERM (it says so with a file).
  std::string ready = ::testing::TempDir() + "lt_launch_ready_" + std::to_string(getpid());
  std::remove(ready.c_str());
  EXPECT_EQ(launch_sh(2,
                      "if [ \"$RANK\" = 1 ]; then trap '' TERM; touch " + ready +
                          "; sleep 300; fi; while [ ! -e " + ready + " ]; do sleep 0.05; done; exit 5",
                      0.5),
            5);
  std::remove(ready.c_str());
}
