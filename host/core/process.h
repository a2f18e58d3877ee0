// Child processes: the runner starting copies of itself (sweep trials, `runner --nproc` ranks).
// One fork+exec with the care it needs (a new process group, SIGTERM when the parent dies, no
// inherited descriptors), the environment a child gets, and how its exit status reads.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

namespace luatune {

// This program's own path (/proc/self/exe); `who` prefixes the error ("sweep: cannot find ...").
std::string process_self_exe(const std::string& who);

// This process's environment with `set` applied in order (a later entry replaces an earlier one
// of the same name), as "NAME=value" strings for process_spawn.
std::vector<std::string> process_env(const std::vector<std::pair<std::string, std::string>>& set);

// fork + exec `exe args...` with stdin from /dev/null, stdout to `out_fd` and stderr to `err_fd`,
// in a new process group (so a terminal's Ctrl-C reaches the parent alone and kill(-pid, sig)
// reaches the child's own children too) that gets SIGTERM if the parent dies. Other descriptors
// are closed in the child. The caller keeps and closes out_fd/err_fd. Fails "WHO: cannot start ...".
pid_t process_spawn(const std::string& exe, const std::vector<std::string>& args,
                    const std::vector<std::string>& env, int out_fd, int err_fd, const std::string& who);

// The exit status, or 128 + N for a child killed by signal N (as shells report it).
int process_exit_code(int wait_status);

// "SIGTERM", "SIGKILL", ...; "signal N" for one without a name here.
std::string process_signal_name(int sig);

// CPUs this process may run on (its affinity mask), at least 1.
int process_cpu_count();

// While alive, SIGINT and SIGTERM only count (the loops that wait on children poll the count and
// forward or stop); the previous handlers come back after. One at a time.
class InterruptCounter {
 public:
  InterruptCounter();
  ~InterruptCounter();
  InterruptCounter(const InterruptCounter&) = delete;
  InterruptCounter& operator=(const InterruptCounter&) = delete;
  static int count();         // signals received so far (0 when none is alive)
  static int first_signal();  // the first one (SIGINT or SIGTERM), 0 before any
};

// Seconds on a monotonic clock, for timing children.
double process_now_seconds();

}  // namespace luatune
