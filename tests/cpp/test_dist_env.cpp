// host/dist/env.cpp: torchrun's and Slurm's variables read into a DistEnv, precedence, Slurm's
// node and task lists, and every one-line error pinned; dist_free_port gives a port we can bind.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <string>

#include "host/core/error.h"
#include "host/dist/env.h"
#include "host/dist/launch.h"

using namespace luatune;

namespace {

using Vars = std::map<std::string, std::string>;

DistEnv env_of(const Vars& vars) {
  return dist_env_from([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

// The message dist_env_from fails with ("" when it does not fail).
std::string error_of(const Vars& vars) {
  try {
    env_of(vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Every field of a DistEnv on one line, so a test pins them all at once and a failure shows them
// side by side: "torchrun rank 3/8, local 1/2, master node7:29400, agent store no, restart 0".
std::string summary_of(const DistEnv& e) {
  return e.launcher + " rank " + std::to_string(e.rank) + "/" + std::to_string(e.world_size) + ", local " +
         std::to_string(e.local_rank) + "/" + std::to_string(e.local_world_size) + ", master " +
         e.master_addr + ":" + std::to_string(e.master_port) + ", agent store " +
         (e.agent_store ? "yes" : "no") + ", restart " + std::to_string(e.restart_count);
}

std::string host_error_of(const std::string& list) {
  try {
    slurm_first_host(list);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const Vars kTorchrun = {{"RANK", "3"},
                        {"WORLD_SIZE", "8"},
                        {"LOCAL_RANK", "1"},
                        {"LOCAL_WORLD_SIZE", "2"},
                        {"MASTER_ADDR", "node7"},
                        {"MASTER_PORT", "29400"},
                        {"TORCHELASTIC_USE_AGENT_STORE", "False"},
                        {"TORCHELASTIC_RESTART_COUNT", "0"}};

const Vars kSlurm = {{"SLURM_PROCID", "5"},
                     {"SLURM_NTASKS", "8"},
                     {"SLURM_LOCALID", "1"},
                     {"SLURM_NTASKS_PER_NODE", "4"},
                     {"SLURM_NODELIST", "gpu[07-08]"},
                     {"SLURM_JOB_NODELIST", "other1"}};

Vars with(Vars base, const Vars& changes) {
  for (const auto& [k, v] : changes) base[k] = v;
  return base;
}

Vars without(Vars base, const std::string& name) {
  base.erase(name);
  return base;
}

}  // namespace

// ============================================================================================
// torchrun

TEST(DistEnv, NoneIsOneProcess) {
  EXPECT_EQ(summary_of(env_of({{"PATH", "/bin"}, {"MASTER_PORT", "1234"}})),
            "none rank 0/1, local 0/1, master 127.0.0.1:29500, agent store no, restart 0");
}

TEST(DistEnv, Torchrun) {
  EXPECT_EQ(summary_of(env_of(kTorchrun)),
            "torchrun rank 3/8, local 1/2, master node7:29400, agent store no, restart 0");
}

TEST(DistEnv, TorchrunAgentStoreAndRestartCount) {
  DistEnv e = env_of(
      with(kTorchrun, {{"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RESTART_COUNT", "2"}}));
  EXPECT_TRUE(e.agent_store);
  EXPECT_EQ(e.restart_count, 2);
}

TEST(DistEnv, TorchrunDefaults) {
  // A hand-written job: RANK and WORLD_SIZE only means one node at 127.0.0.1:29500.
  EXPECT_EQ(summary_of(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}})),
            "torchrun rank 1/2, local 1/2, master 127.0.0.1:29500, agent store no, restart 0");
}

TEST(DistEnv, TorchrunWinsOverSlurm) {
  // torchrun started inside a Slurm allocation: its variables describe this process.
  DistEnv e = env_of(with(kSlurm, kTorchrun));
  EXPECT_EQ(e.launcher, "torchrun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.master_addr, "node7");
}

TEST(DistEnv, TorchrunErrors) {
  // A value that is not a whole number, in each variable that holds one.
  const std::pair<std::string, std::string> not_integers[] = {
      {"RANK", "x"},           {"RANK", ""},
      {"RANK", " 1"},          {"RANK", "99999999999"},
      {"WORLD_SIZE", "2.0"},   {"LOCAL_RANK", "a"},
      {"MASTER_PORT", "http"}, {"TORCHELASTIC_RESTART_COUNT", "one"}};
  for (const auto& [name, value] : not_integers)
    EXPECT_EQ(error_of(with(kTorchrun, {{name, value}})),
              "dist: " + name + "=\"" + value + "\" is not an integer");
  // A number out of its range, and the other values a variable cannot have.
  const struct {
    const char* name;
    const char* value;
    const char* error;
  } bad_values[] = {
      {"LOCAL_RANK", "2", "dist: LOCAL_RANK=2 is outside [0, LOCAL_WORLD_SIZE=2)"},
      {"LOCAL_WORLD_SIZE", "9", "dist: LOCAL_WORLD_SIZE=9 is outside [1, WORLD_SIZE=8]"},
      {"LOCAL_WORLD_SIZE", "0", "dist: LOCAL_WORLD_SIZE=0 is outside [1, WORLD_SIZE=8]"},
      {"MASTER_PORT", "70000", "dist: MASTER_PORT=70000 is outside 1..65535"},
      {"MASTER_PORT", "0", "dist: MASTER_PORT=0 is outside 1..65535"},
      {"MASTER_ADDR", "", "dist: MASTER_ADDR is set but empty"},
      {"TORCHELASTIC_USE_AGENT_STORE", "true",
       "dist: TORCHELASTIC_USE_AGENT_STORE=\"true\" is not True or False"},
      {"TORCHELASTIC_RESTART_COUNT", "-1", "dist: TORCHELASTIC_RESTART_COUNT=-1 must be at least 0"},
  };
  for (const auto& b : bad_values)
    EXPECT_EQ(error_of(with(kTorchrun, {{b.name, b.value}})), b.error) << b.name << "=" << b.value;
  // Hand-written jobs: RANK and WORLD_SIZE alone, out of range or one without the other.
  EXPECT_EQ(error_of({{"RANK", "3"}, {"WORLD_SIZE", "2"}}), "dist: RANK=3 is outside [0, WORLD_SIZE=2)");
  EXPECT_EQ(error_of({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}), "dist: RANK=-1 is outside [0, WORLD_SIZE=2)");
  EXPECT_EQ(error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}), "dist: WORLD_SIZE=0 must be at least 1");
  EXPECT_EQ(error_of({{"RANK", "0"}}), "dist: RANK is set but WORLD_SIZE is not (torchrun sets both)");
  EXPECT_EQ(error_of({{"WORLD_SIZE", "2"}}), "dist: WORLD_SIZE is set but RANK is not (torchrun sets both)");
}

// ============================================================================================
// Slurm

TEST(DistEnv, Slurm) {
  // The master is SLURM_NODELIST's first host (before SLURM_JOB_NODELIST), its padding kept.
  EXPECT_EQ(summary_of(env_of(kSlurm)),
            "slurm rank 5/8, local 1/4, master gpu07:29500, agent store no, restart 0");
}

TEST(DistEnv, SlurmMasterOverrides) {
  DistEnv e = env_of(with(kSlurm, {{"MASTER_ADDR", "10.0.0.9"}, {"MASTER_PORT", "12355"}}));
  EXPECT_EQ(e.master_addr, "10.0.0.9");
  EXPECT_EQ(e.master_port, 12355);
  EXPECT_EQ(env_of(without(kSlurm, "SLURM_NODELIST")).master_addr, "other1");
}

TEST(DistEnv, SlurmTasksPerNode) {
  Vars base = without(kSlurm, "SLURM_NTASKS_PER_NODE");
  EXPECT_EQ(env_of(with(base, {{"SLURM_TASKS_PER_NODE", "4(x2)"}})).local_world_size, 4);
  EXPECT_EQ(env_of(with(base, {{"SLURM_TASKS_PER_NODE", "4(x1),3,1"}})).local_world_size, 4);
  EXPECT_EQ(env_of(with(base, {{"SLURM_TASKS_PER_NODE", "2,2,2,2"}})).local_world_size, 2);
  EXPECT_EQ(env_of(with(base, {{"SLURM_TASKS_PER_NODE", "8"}})).local_world_size, 8);
  // SLURM_NTASKS_PER_NODE (set by --ntasks-per-node) wins over the list.
  EXPECT_EQ(env_of(with(kSlurm, {{"SLURM_TASKS_PER_NODE", "8"}})).local_world_size, 4);
  // Neither: every task on one node.
  DistEnv e = env_of(base);
  EXPECT_EQ(e.local_world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
}

TEST(DistEnv, SlurmDefaultsLocalRank) {
  DistEnv e = env_of(without(kSlurm, "SLURM_LOCALID"));
  EXPECT_EQ(e.local_rank, 1);  // 5 % 4
}

TEST(DistEnv, SlurmErrors) {
  EXPECT_EQ(error_of(without(kSlurm, "SLURM_NTASKS")),
            "dist: SLURM_PROCID is set but SLURM_NTASKS is not (srun sets both)");
  EXPECT_EQ(error_of(with(kSlurm, {{"SLURM_PROCID", "x"}})), "dist: SLURM_PROCID=\"x\" is not an integer");
  EXPECT_EQ(error_of(with(kSlurm, {{"SLURM_PROCID", "8"}})),
            "dist: SLURM_PROCID=8 is outside [0, SLURM_NTASKS=8)");
  EXPECT_EQ(error_of(with(kSlurm, {{"SLURM_NTASKS", "0"}})), "dist: SLURM_NTASKS=0 must be at least 1");
  EXPECT_EQ(error_of(with(kSlurm, {{"SLURM_LOCALID", "4"}})),
            "dist: SLURM_LOCALID=4 is outside [0, SLURM_NTASKS_PER_NODE=4)");
  EXPECT_EQ(error_of(with(kSlurm, {{"SLURM_NTASKS_PER_NODE", "16"}})),
            "dist: SLURM_NTASKS_PER_NODE=16 is outside [1, SLURM_NTASKS=8]");
  Vars listed = with(without(kSlurm, "SLURM_NTASKS_PER_NODE"), {{"SLURM_TASKS_PER_NODE", "1(x8)"}});
  EXPECT_EQ(error_of(listed), "dist: SLURM_LOCALID=1 is outside [0, SLURM_TASKS_PER_NODE=1)");
  for (const char* bad : {"", "x", "4(x2", "4(2)", "4(x)", "4(x0)", "0", "4,", "4(x2)3", "-1"})
    EXPECT_EQ(error_of(with(without(kSlurm, "SLURM_NTASKS_PER_NODE"), {{"SLURM_TASKS_PER_NODE", bad}})),
              std::string("dist: SLURM_TASKS_PER_NODE=\"") + bad +
                  "\" is not a Slurm task count list (like \"4(x2),3\")")
        << bad;
  EXPECT_EQ(error_of(with(kSlurm, {{"SLURM_NODELIST", "gpu[07-"}})),
            "dist: SLURM_NODELIST=\"gpu[07-\" has '[' without ']'");
  EXPECT_EQ(error_of(with(without(kSlurm, "SLURM_NODELIST"), {{"SLURM_JOB_NODELIST", ""}})),
            "dist: SLURM_JOB_NODELIST=\"\" is an empty node list");
  EXPECT_EQ(error_of(with(kSlurm, {{"MASTER_PORT", "65536"}})),
            "dist: MASTER_PORT=65536 is outside 1..65535");
  // No node list at all: fine on one node, an error across nodes (127.0.0.1 would never answer).
  Vars no_list = without(without(kSlurm, "SLURM_NODELIST"), "SLURM_JOB_NODELIST");
  EXPECT_EQ(error_of(no_list),
            "dist: SLURM_PROCID is set but neither MASTER_ADDR nor SLURM_NODELIST nor SLURM_JOB_NODELIST is");
  EXPECT_EQ(env_of(with(no_list, {{"SLURM_NTASKS_PER_NODE", "8"}})).master_addr, "127.0.0.1");
}

// ============================================================================================
// Node lists

TEST(DistEnv, SlurmFirstHost) {
  EXPECT_EQ(slurm_first_host("host"), "host");
  EXPECT_EQ(slurm_first_host("a,b"), "a");
  EXPECT_EQ(slurm_first_host("gpu[3]"), "gpu3");
  EXPECT_EQ(slurm_first_host("node[01-04,07],gpu3"), "node01");
  EXPECT_EQ(slurm_first_host("node[007,1-2]"), "node007");            // the first range's width
  EXPECT_EQ(slurm_first_host("node[10-12]-ib"), "node10-ib");         // a suffix
  EXPECT_EQ(slurm_first_host("rack[2-3]-n[001-016]"), "rack2-n001");  // two groups
  EXPECT_EQ(slurm_first_host("login1,node[1-2]"), "login1");
  EXPECT_EQ(slurm_first_host("gpu-a100-[05-06].cluster"), "gpu-a100-05.cluster");
  EXPECT_EQ(slurm_first_host("[1-3]"), "1");
}

TEST(DistEnv, SlurmFirstHostErrors) {
  // Each bad list and what its message says after 'dist: Slurm node list "LIST" '.
  const std::string range = " (expected N or N-M with N <= M)";
  const std::pair<std::string, std::string> bad_lists[] = {
      {"", "is an empty node list"},
      {"a,,b", "has an empty entry"},
      {"a,", "has an empty entry"},
      {",a", "has an empty entry"},
      {"node[1-2", "has '[' without ']'"},
      {"node1-2]", "has ']' without '['"},
      {"n[1[2]]", "has '[' inside '[...]'"},
      {"node[]", "has a bad range \"\"" + range},
      {"node[4-2]", "has a bad range \"4-2\"" + range},
      {"node[a-b]", "has a bad range \"a-b\"" + range},
      {"node[1,,2]", "has a bad range \"\"" + range},
      {"node[1-2-3]", "has a bad range \"1-2-3\"" + range},
      {"ok,bad[2-1]", "has a bad range \"2-1\"" + range},  // every entry is checked, not only the first
  };
  for (const auto& [list, problem] : bad_lists)
    EXPECT_EQ(host_error_of(list), "dist: Slurm node list \"" + list + "\" " + problem);
}

// ============================================================================================
// The launcher's port

TEST(DistEnv, FreePortIsBindable) {
  int port = dist_free_port();
  ASSERT_GE(port, 1);
  ASSERT_LE(port, 65535);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << "port " << port;
  EXPECT_EQ(listen(fd, 1), 0);
  close(fd);
}
