// Where this process sits in a data-parallel job, read from the environment its launcher set:
// torchrun (and `runner --nproc`, which sets the same variables), or Slurm's srun. Conventions:
// docs/distributed.md, "The variables and their precedence" and "Sources". No Torch here.
#pragma once

#include <functional>
#include <string>

namespace luatune {

struct DistEnv {
  int rank = 0;  // global rank
  int world_size = 1;
  int local_rank = 0;  // rank on this node (the GPU it uses)
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";  // where rank 0's TCPStore listens
  int master_port = 29500;
  // torchrun's agent hosts the store (TORCHELASTIC_USE_AGENT_STORE=True): every rank is a client
  // and keys live under PrefixStore("/worker/attempt_<restart_count>").
  bool agent_store = false;
  int restart_count = 0;
  std::string launcher = "none";  // "torchrun" (RANK/WORLD_SIZE set), "slurm", or "none" (one process)
};

// Reads, in this order of precedence:
//   torchrun / runner --nproc: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
//     MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE ("True"/"False"), TORCHELASTIC_RESTART_COUNT;
//   Slurm: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE (else
//     SLURM_TASKS_PER_NODE's first count, else SLURM_NTASKS), the first host of SLURM_NODELIST
//     (else SLURM_JOB_NODELIST) unless MASTER_ADDR is set, MASTER_PORT (else 29500);
//   neither: one process (launcher "none").
// `get` returns nullptr for an unset variable. A malformed value (not an integer, rank outside
// [0, world), a port outside 1..65535) fails in one line naming the variable.
DistEnv dist_env_from(const std::function<const char*(const char*)>& get);
DistEnv dist_env();  // dist_env_from(std::getenv)

// The first host of a Slurm node list: "node[01-04,07],gpu3" -> "node01", "a,b" -> "a",
// "gpu[3]" -> "gpu3", "host" -> "host". Fails in one line on an empty or malformed list.
std::string slurm_first_host(const std::string& nodelist);

}  // namespace luatune
