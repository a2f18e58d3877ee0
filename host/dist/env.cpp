// Where this process sits in a data-parallel job (see env.h): torchrun's variables first, then
// Slurm's, else one process. Every malformed value fails in one line that names its variable and
// shows the value, so a typo in a job script reads as such and not as a hang in rendezvous.
#include "host/dist/env.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "host/core/error.h"
#include "host/core/strings.h"

namespace luatune {

namespace {

using Getter = std::function<const char*(const char*)>;

// ============================================================================================
// One variable at a time

// The whole value as a decimal int (an optional '-', digits, nothing else).
bool parse_int(const std::string& s, int* out) {
  if (s.empty()) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t j = i; j < s.size(); j++)
    if (s[j] < '0' || s[j] > '9') return false;
  errno = 0;
  long v = std::strtol(s.c_str(), nullptr, 10);
  if (errno == ERANGE || v < INT_MIN || v > INT_MAX) return false;
  *out = static_cast<int>(v);
  return true;
}

// A set variable read as an int: `dist: RANK="x" is not an integer`.
int int_var(const char* name, const char* value) {
  int v = 0;
  if (!parse_int(value, &v)) fail(std::string("dist: ") + name + "=\"" + value + "\" is not an integer");
  return v;
}

// An optional int variable; `fallback` when unset.
int int_var_or(const Getter& get, const char* name, int fallback) {
  const char* v = get(name);
  return v ? int_var(name, v) : fallback;
}

// rank in [0, world): `dist: RANK=3 is outside [0, WORLD_SIZE=2)`.
void check_rank(const char* rank_name, int rank, const std::string& world_name, int world) {
  LT_CHECK(rank >= 0 && rank < world,
           "dist: " << rank_name << "=" << rank << " is outside [0, " << world_name << "=" << world << ")");
}

void check_world(const std::string& name, int world) {
  LT_CHECK(world >= 1, "dist: " << name << "=" << world << " must be at least 1");
}

// A node's share: 1 <= local_world <= world.
void check_local_world(const std::string& name, int local_world, const std::string& world_name, int world) {
  LT_CHECK(local_world >= 1 && local_world <= world,
           "dist: " << name << "=" << local_world << " is outside [1, " << world_name << "=" << world << "]");
}

int port_var_or(const Getter& get, int fallback) {
  const char* v = get("MASTER_PORT");
  if (!v) return fallback;
  int port = int_var("MASTER_PORT", v);
  LT_CHECK(port >= 1 && port <= 65535, "dist: MASTER_PORT=" << port << " is outside 1..65535");
  return port;
}

// MASTER_ADDR when set (and not empty); nullptr when unset.
const char* addr_var(const Getter& get) {
  const char* v = get("MASTER_ADDR");
  LT_CHECK(!v || *v, "dist: MASTER_ADDR is set but empty");
  return v;
}

// ============================================================================================
// Slurm's compact lists

// The first host of a node list; `what` names the list in errors ("SLURM_NODELIST=" or
// "Slurm node list "). An entry is text with zero or more [ranges] groups ("rack[1-2]-n[01-04]");
// a range is "a" or "a-b" with a <= b. The first host takes each group's first number as written,
// so zero padding survives. Every entry is checked, not only the first.
std::string first_host(const std::string& list, const std::string& what) {
  auto bad = [&](const std::string& problem) -> void {
    fail("dist: " + what + "\"" + list + "\" " + problem);
  };
  if (list.empty()) bad("is an empty node list");
  std::string first;
  bool in_first = true, entry_empty = true;
  size_t i = 0;
  while (i <= list.size()) {
    if (i == list.size() || list[i] == ',') {
      if (entry_empty) bad("has an empty entry");
      if (i == list.size()) break;
      in_first = false;
      entry_empty = true;
      i++;
    } else if (list[i] == ']') {
      bad("has ']' without '['");
    } else if (list[i] == '[') {
      size_t close = list.find(']', i + 1);
      if (close == std::string::npos) bad("has '[' without ']'");
      std::string inside = list.substr(i + 1, close - i - 1);
      if (inside.find('[') != std::string::npos) bad("has '[' inside '[...]'");
      std::vector<std::string> ranges = str_split(inside, ',');
      for (const auto& r : ranges) {
        size_t dash = r.find('-');
        std::string a = r.substr(0, dash), b = dash == std::string::npos ? a : r.substr(dash + 1);
        int lo = 0, hi = 0;
        bool digits = !a.empty() && !b.empty() && a[0] != '-' && b[0] != '-';
        if (!digits || !parse_int(a, &lo) || !parse_int(b, &hi) || lo > hi)
          bad("has a bad range \"" + r + "\" (expected N or N-M with N <= M)");
      }
      if (in_first) first += ranges.front().substr(0, ranges.front().find('-'));
      entry_empty = false;
      i = close + 1;
    } else {
      if (in_first) first += list[i];
      entry_empty = false;
      i++;
    }
  }
  return first;
}

// SLURM_TASKS_PER_NODE ("4(x2),3": two nodes with 4 tasks, one with 3): the first node's count.
int tasks_per_node_first(const char* value) {
  const std::string s = value;
  auto bad = [&]() -> void {
    fail("dist: SLURM_TASKS_PER_NODE=\"" + s + "\" is not a Slurm task count list (like \"4(x2),3\")");
  };
  int first = 0;
  std::vector<std::string> entries = str_split(s, ',');
  for (size_t k = 0; k < entries.size(); k++) {
    const std::string& e = entries[k];
    size_t paren = e.find('(');
    int count = 0, times = 1;
    if (!parse_int(e.substr(0, paren), &count) || count < 1) bad();
    if (paren != std::string::npos) {
      if (e.size() < paren + 4 || e.compare(paren, 2, "(x") != 0 || e.back() != ')') bad();
      if (!parse_int(e.substr(paren + 2, e.size() - paren - 3), &times) || times < 1) bad();
    }
    if (k == 0) first = count;
  }
  return first;
}

// ============================================================================================
// The launchers

DistEnv from_torchrun(const Getter& get) {
  const char* rank_v = get("RANK");
  const char* world_v = get("WORLD_SIZE");
  if (!rank_v || !world_v)
    fail(std::string("dist: ") + (rank_v ? "RANK" : "WORLD_SIZE") + " is set but " +
         (rank_v ? "WORLD_SIZE" : "RANK") + " is not (torchrun sets both)");
  DistEnv e;
  e.launcher = "torchrun";
  e.world_size = int_var("WORLD_SIZE", world_v);
  check_world("WORLD_SIZE", e.world_size);
  e.rank = int_var("RANK", rank_v);
  check_rank("RANK", e.rank, "WORLD_SIZE", e.world_size);
  // Without the local pair (a hand-written job), assume one node.
  e.local_world_size = int_var_or(get, "LOCAL_WORLD_SIZE", e.world_size);
  check_local_world("LOCAL_WORLD_SIZE", e.local_world_size, "WORLD_SIZE", e.world_size);
  e.local_rank = int_var_or(get, "LOCAL_RANK", e.rank % e.local_world_size);
  check_rank("LOCAL_RANK", e.local_rank, "LOCAL_WORLD_SIZE", e.local_world_size);
  if (const char* addr = addr_var(get)) e.master_addr = addr;
  e.master_port = port_var_or(get, e.master_port);
  if (const char* agent = get("TORCHELASTIC_USE_AGENT_STORE")) {
    std::string a = agent;
    LT_CHECK(a == "True" || a == "False",
             "dist: TORCHELASTIC_USE_AGENT_STORE=\"" << a << "\" is not True or False");
    e.agent_store = a == "True";
  }
  e.restart_count = int_var_or(get, "TORCHELASTIC_RESTART_COUNT", 0);
  LT_CHECK(e.restart_count >= 0,
           "dist: TORCHELASTIC_RESTART_COUNT=" << e.restart_count << " must be at least 0");
  return e;
}

DistEnv from_slurm(const Getter& get) {
  const char* ntasks_v = get("SLURM_NTASKS");
  if (!ntasks_v) fail("dist: SLURM_PROCID is set but SLURM_NTASKS is not (srun sets both)");
  DistEnv e;
  e.launcher = "slurm";
  e.world_size = int_var("SLURM_NTASKS", ntasks_v);
  check_world("SLURM_NTASKS", e.world_size);
  e.rank = int_var("SLURM_PROCID", get("SLURM_PROCID"));
  check_rank("SLURM_PROCID", e.rank, "SLURM_NTASKS", e.world_size);

  std::string local_name = "SLURM_NTASKS";
  e.local_world_size = e.world_size;
  if (const char* v = get("SLURM_NTASKS_PER_NODE")) {
    local_name = "SLURM_NTASKS_PER_NODE";
    e.local_world_size = int_var("SLURM_NTASKS_PER_NODE", v);
  } else if (const char* t = get("SLURM_TASKS_PER_NODE")) {
    local_name = "SLURM_TASKS_PER_NODE";
    e.local_world_size = tasks_per_node_first(t);
  }
  check_local_world(local_name, e.local_world_size, "SLURM_NTASKS", e.world_size);
  e.local_rank = int_var_or(get, "SLURM_LOCALID", e.rank % e.local_world_size);
  check_rank("SLURM_LOCALID", e.local_rank, local_name, e.local_world_size);

  if (const char* addr = addr_var(get)) {
    e.master_addr = addr;
  } else if (const char* list = get("SLURM_NODELIST")) {
    e.master_addr = first_host(list, "SLURM_NODELIST=");
  } else if (const char* job_list = get("SLURM_JOB_NODELIST")) {
    e.master_addr = first_host(job_list, "SLURM_JOB_NODELIST=");
  } else {
    // One node needs no address; across nodes 127.0.0.1 would leave the others waiting forever.
    LT_CHECK(
        e.local_world_size == e.world_size,
        "dist: SLURM_PROCID is set but neither MASTER_ADDR nor SLURM_NODELIST nor SLURM_JOB_NODELIST is");
  }
  e.master_port = port_var_or(get, e.master_port);
  return e;
}

}  // namespace

// ============================================================================================

DistEnv dist_env_from(const Getter& get) {
  if (get("RANK") || get("WORLD_SIZE")) return from_torchrun(get);
  if (get("SLURM_PROCID")) return from_slurm(get);
  return DistEnv{};
}

DistEnv dist_env() {
  return dist_env_from([](const char* name) -> const char* { return std::getenv(name); });
}

std::string slurm_first_host(const std::string& nodelist) {
  return first_host(nodelist, "Slurm node list ");
}

}  // namespace luatune
