// Child processes (see process.h). Everything a child touches is prepared before the fork:
// between fork and exec only async-signal-safe calls.
#include "host/core/process.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>

#include "host/core/error.h"

extern char** environ;

namespace luatune {

std::string process_self_exe(const std::string& who) {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) fail(who + ": cannot find this program (/proc/self/exe): " + std::strerror(errno));
  return std::string(buf, static_cast<size_t>(n));
}

std::vector<std::string> process_env(const std::vector<std::pair<std::string, std::string>>& set) {
  std::map<std::string, std::string> last;
  for (const auto& [k, v] : set) last[k] = v;
  std::vector<std::string> out;
  for (char** e = environ; e && *e; e++) {
    std::string kv = *e;
    if (!last.count(kv.substr(0, kv.find('=')))) out.push_back(kv);
  }
  for (const auto& [k, v] : last) out.push_back(k + "=" + v);
  return out;
}

pid_t process_spawn(const std::string& exe, const std::vector<std::string>& args,
                    const std::vector<std::string>& env, int out_fd, int err_fd, const std::string& who) {
  int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  std::vector<char*> argv, envp;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  long max_fd = sysconf(_SC_OPEN_MAX);
  if (max_fd < 0 || max_fd > 65536) max_fd = 65536;
  pid_t parent = getpid();
  std::string exec_failed = who + ": cannot run " + exe + "\n";
  std::fflush(stdout);
  std::fflush(stderr);
  // Signals wait until the child has put back the default actions: a SIGTERM sent right after
  // the fork would otherwise run the parent's handler in the child, and be lost.
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old);
  pid_t pid = fork();
  if (pid < 0) {
    int saved = errno;
    sigprocmask(SIG_SETMASK, &old, nullptr);
    if (null >= 0) ::close(null);
    fail(who + ": cannot start " + exe + ": fork: " + std::strerror(saved));
  }
  if (pid == 0) {
    for (int sig = 1; sig < NSIG; sig++) {
      struct sigaction sa {};
      if (sigaction(sig, nullptr, &sa) == 0 && sa.sa_handler != SIG_IGN && sa.sa_handler != SIG_DFL) {
        sa.sa_handler = SIG_DFL;
        sa.sa_flags = 0;
        sigaction(sig, &sa, nullptr);
      }
    }
    sigprocmask(SIG_SETMASK, &old, nullptr);
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(125);  // the parent died before the line above
    if (null >= 0) dup2(null, 0);
    // Move both targets above 2 first, so dup2 onto 1 cannot clobber err_fd when it is 1.
    int out = fcntl(out_fd, F_DUPFD, 3), err = fcntl(err_fd, F_DUPFD, 3);
    dup2(out, 1);
    dup2(err, 2);
    for (long fd = 3; fd < max_fd; fd++) ::close(static_cast<int>(fd));
    execve(argv[0], argv.data(), envp.data());
    (void)!::write(2, exec_failed.data(), exec_failed.size());
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so a signal sent right after the fork finds the group
  sigprocmask(SIG_SETMASK, &old, nullptr);
  if (null >= 0) ::close(null);
  return pid;
}

int process_exit_code(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

std::string process_signal_name(int sig) {
  static const std::map<int, const char*> names = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
  };
  auto it = names.find(sig);
  return it != names.end() ? it->second : "signal " + std::to_string(sig);
}

int process_cpu_count() {
  cpu_set_t set;
  int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  return n > 0 ? n : 1;
}

namespace {

volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_signals = 0;
struct sigaction g_old_int {
}, g_old_term{};

void on_signal(int sig) {
  if (!g_signals) g_signal = sig;
  g_signals = g_signals + 1;
}

}  // namespace

InterruptCounter::InterruptCounter() {
  g_signal = 0;
  g_signals = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

InterruptCounter::~InterruptCounter() {
  g_signal = 0;
  g_signals = 0;
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int InterruptCounter::count() {
  return g_signals;
}
int InterruptCounter::first_signal() {
  return g_signal;
}

double process_now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace luatune
