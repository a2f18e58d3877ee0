// `runner --nproc N`: N local ranks of one job (see launch.h). Each rank runs in its own process
// group (process_spawn) with its stdout and stderr on pipes that this process re-emits line by
// line, so the ranks' lines never interleave mid-line. A terminal's Ctrl-C reaches this process
// alone; it forwards it to every rank's group, so a rank's own children stop too, and a rank
// outlives a launcher killed by SIGKILL only until its parent-death SIGTERM arrives.
#include "host/dist/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "host/core/error.h"
#include "host/core/process.h"

namespace luatune {

namespace {

// ============================================================================================
// Output: one pipe per rank and stream, cut into lines

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // our own output is gone; the ranks' exit statuses still matter
    p += w;
    n -= static_cast<size_t>(w);
  }
}

struct Stream {
  int fd = -1;  // read end; -1 once closed
  int to = 1;   // where its lines go: 1 or 2
  std::string prefix;
  std::string pending;  // a line not finished yet

  // Emits every complete line in `pending` (all of it when `flush`, ending it with a newline).
  void emit(bool flush) {
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      std::string line = prefix + pending.substr(start, nl + 1 - start);
      write_all(to, line.data(), line.size());
    }
    pending.erase(0, start);
    // A very long line without a newline (a progress bar on \r) goes out in pieces.
    if (!pending.empty() && (flush || pending.size() > 65536)) {
      std::string line = prefix + pending + "\n";
      write_all(to, line.data(), line.size());
      pending.clear();
    }
  }

  // Reads what is there now (the read end is non-blocking); closes at end of file.
  void drain() {
    char buf[65536];
    while (fd >= 0) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      if (n <= 0) {
        ::close(fd);
        fd = -1;
        emit(true);
        break;
      }
      pending.append(buf, static_cast<size_t>(n));
      emit(false);
    }
  }
};

struct Rank {
  int index = 0;
  pid_t pid = -1;
  bool running = false;
  int code = 0;  // exit code once it ended (128 + signal when killed)
  Stream out, err;
};

// A pipe whose read end is ours (non-blocking, close-on-exec) and whose write end the child gets.
void open_pipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0)
    fail(std::string("runner --nproc: cannot create a pipe: ") + std::strerror(errno));
  ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
}

// What a rank exited with, for the one line that names it.
std::string describe_exit(int wait_status) {
  if (WIFSIGNALED(wait_status)) return "was killed by signal " + process_signal_name(WTERMSIG(wait_status));
  return "exited with status " + std::to_string(process_exit_code(wait_status));
}

void say(const std::string& line) {
  std::fflush(stdout);
  std::string text = "runner --nproc: " + line + "\n";
  write_all(2, text.data(), text.size());
}

}  // namespace

// ============================================================================================

int dist_launch_local(const LaunchOptions& o) {
  LT_CHECK(o.nproc >= 1, "runner --nproc: expected at least 1 process, got " << o.nproc);
  std::vector<std::pair<std::string, std::string>> shared = {
      {"WORLD_SIZE", std::to_string(o.nproc)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
      {"MASTER_ADDR", "127.0.0.1"},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
  };
  const char* port = std::getenv("MASTER_PORT");
  shared.emplace_back("MASTER_PORT", port ? port : std::to_string(dist_free_port()));
  if (!std::getenv("OMP_NUM_THREADS"))  // each rank its share of the cores, as torchrun's would be 1
    shared.emplace_back("OMP_NUM_THREADS", std::to_string(std::max(1, process_cpu_count() / o.nproc)));

  InterruptCounter signals;
  std::vector<Rank> ranks(static_cast<size_t>(o.nproc));
  // Should the launcher itself fail (fork refused for rank 3), the ranks started must not outlive it.
  struct KillOnError {
    std::vector<Rank>& ranks;
    ~KillOnError() {
      for (auto& r : ranks) {
        if (r.running) {
          kill(-r.pid, SIGKILL);
          waitpid(r.pid, nullptr, 0);
        }
        if (r.out.fd >= 0) ::close(r.out.fd);
        if (r.err.fd >= 0) ::close(r.err.fd);
      }
    }
  } kill_on_error{ranks};

  for (int i = 0; i < o.nproc; i++) {
    Rank& r = ranks[static_cast<size_t>(i)];
    r.index = i;
    auto env = shared;
    env.emplace_back("RANK", std::to_string(i));
    env.emplace_back("LOCAL_RANK", std::to_string(i));
    int out[2], err[2];
    open_pipe(out);
    r.out.fd = out[0];
    open_pipe(err);
    r.err.fd = err[0];
    r.out.to = 1;
    r.err.to = 2;
    if (i > 0) r.out.prefix = r.err.prefix = "[rank " + std::to_string(i) + "] ";
    try {
      r.pid = process_spawn(o.runner, o.args, process_env(env), out[1], err[1], "runner --nproc");
    } catch (...) {
      ::close(out[1]);
      ::close(err[1]);
      throw;
    }
    r.running = true;
    ::close(out[1]);
    ::close(err[1]);
  }

  int result = 0;
  bool stopping = false;  // SIGTERM (or the launcher's signal) went to the ranks still running
  bool killed = false;    // SIGKILL went to them
  double stop_sent = 0;
  int signals_seen = 0;
  auto stop_all = [&](int sig) {
    for (auto& r : ranks)
      if (r.running) kill(-r.pid, sig);
  };

  for (;;) {
    // Output first, then who ended: a rank's last lines come before the line about its exit.
    std::vector<pollfd> fds;
    for (auto& r : ranks)
      for (Stream* s : {&r.out, &r.err})
        if (s->fd >= 0) fds.push_back({s->fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 100);
    for (auto& r : ranks) {
      r.out.drain();
      r.err.drain();
    }

    bool any_running = false;
    for (auto& r : ranks) {
      if (!r.running) continue;
      int status = 0;
      pid_t got = waitpid(r.pid, &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) {
        any_running = true;
        continue;
      }
      r.running = false;
      r.code = got < 0 ? 1 : process_exit_code(status);
      // What it wrote is all in the pipes now; anything still holding them open (a child it
      // left behind) does not keep the launcher waiting.
      for (Stream* s : {&r.out, &r.err}) {
        s->drain();
        if (s->fd >= 0) {
          ::close(s->fd);
          s->fd = -1;
          s->emit(true);
        }
      }
      if (r.code != 0 && !stopping) {
        result = r.code;
        say("rank " + std::to_string(r.index) + " " + describe_exit(status) + "; stopping the other ranks");
        stop_all(SIGTERM);
        stopping = true;
        stop_sent = process_now_seconds();
      }
    }
    if (!any_running) break;

    if (signals.count() > signals_seen) {
      if (signals_seen == 0 && !stopping) {
        say(std::string("interrupted by ") + (signals.first_signal() == SIGTERM ? "SIGTERM" : "Ctrl-C") +
            "; stopping the ranks (again to kill them now)");
        stop_all(signals.first_signal());
        stopping = true;
        stop_sent = process_now_seconds();
        result = 130;
      } else if (!killed) {
        stop_all(SIGKILL);
        killed = true;
      }
      signals_seen = signals.count();
    }
    if (stopping && !killed && process_now_seconds() - stop_sent > o.kill_grace_s) {
      int left = 0;
      for (auto& r : ranks) left += r.running ? 1 : 0;
      char grace[32];
      std::snprintf(grace, sizeof grace, "%g", o.kill_grace_s);
      say("killing " + std::to_string(left) + " rank(s) still running " + grace + " s after SIGTERM");
      stop_all(SIGKILL);
      killed = true;
    }
  }
  return result;
}

int dist_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail(std::string("dist: cannot find a free port: socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  int saved = errno;
  ::close(fd);
  if (!ok) fail(std::string("dist: cannot find a free port on 127.0.0.1: ") + std::strerror(saved));
  return ntohs(addr.sin_port);
}

}  // namespace luatune
