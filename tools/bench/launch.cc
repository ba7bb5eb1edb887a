#include "launch.h"

#include <netinet/in.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/cpus.h"
#include "tdist/errors.h"

namespace tdist::bench {
namespace {

// The exit code a rank uses when the results it saw were wrong; all ranks
// agree on that (the count is all-reduced), so it is no reason to stop them.
constexpr int kWrongResults = 1;
constexpr auto kGracePeriod = std::chrono::seconds(5);

// A port the kernel just handed out; another process could take it before
// rank 0 binds it, which rendezvous then reports as an error.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw DistNetworkError("tdist-bench: cannot open a socket to find a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    throw DistNetworkError("tdist-bench: cannot find a free port on 127.0.0.1");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 2;
}

}  // namespace

int launch_local(int nproc, char** argv) {
  const std::string port = std::to_string(free_port());
  // Ranks that do not outnumber the CPUs are bound to a share of them each,
  // as tdistrun --bind-to auto binds them (docs/launcher.md): left to the
  // scheduler, two ranks at times share one CPU, each waiting for the other
  // to be scheduled (a 2-rank 1 KiB all_reduce took 3.8-8.9 us in a third
  // of the runs instead of 0.41). More ranks stay unbound.
  const std::vector<int> cpus = detail::allowed_cpus();
  const std::vector<std::vector<int>> shares = nproc > 1 && static_cast<size_t>(nproc) <= cpus.size()
                                                   ? detail::share_cpus(cpus, nproc)
                                                   : std::vector<std::vector<int>>{};
  std::vector<pid_t> pids;
  const pid_t parent = getpid();
  for (int rank = 0; rank < nproc; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("tdist-bench: fork");
      for (pid_t child : pids) kill(child, SIGTERM);
      return 2;
    }
    if (pid == 0) {
      // A rank must not outlive this launcher (killed by a test deadline, say).
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(2);
      // The forked child is single-threaded, so setenv is safe here.
      // NOLINTBEGIN(concurrency-mt-unsafe)
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port.c_str(), 1);
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      // NOLINTEND(concurrency-mt-unsafe)
      if (!shares.empty()) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int cpu : shares[static_cast<size_t>(rank)]) {
          if (cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
        }
        if (sched_setaffinity(0, sizeof(set), &set) != 0) std::perror("tdist-bench: sched_setaffinity");
      }
      execv("/proc/self/exe", argv);
      std::perror("tdist-bench: exec");
      _exit(127);
    }
    pids.push_back(pid);
  }

  int result = 0;
  size_t running = pids.size();
  std::chrono::steady_clock::time_point stop_at = std::chrono::steady_clock::time_point::max();
  bool stopped = false;
  while (running > 0) {
    int status = 0;
    const pid_t pid =
        waitpid(-1, &status, stop_at == std::chrono::steady_clock::time_point::max() ? 0 : WNOHANG);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (pid == 0) {
      if (!stopped && std::chrono::steady_clock::now() >= stop_at) {
        std::fprintf(stderr, "tdist-bench: a rank failed; stopping the %zu still running\n", running);
        for (pid_t child : pids) {
          if (child > 0) kill(child, SIGTERM);
        }
        stopped = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    --running;
    size_t rank = 0;
    while (rank < pids.size() && pids[rank] != pid) ++rank;
    if (rank < pids.size()) pids[rank] = -1;  // reaped: its pid may be reused
    const int code = exit_code_of(status);
    if (code == 0) continue;
    if (result == 0) result = code;
    if (WIFSIGNALED(status)) {
      std::fprintf(stderr, "tdist-bench: rank %zu was killed by signal %d\n", rank, WTERMSIG(status));
    } else if (code != kWrongResults) {
      std::fprintf(stderr, "tdist-bench: rank %zu exited with code %d\n", rank, code);
    }
    if (code != kWrongResults && stop_at == std::chrono::steady_clock::time_point::max()) {
      stop_at = std::chrono::steady_clock::now() + kGracePeriod;
    }
  }
  return result;
}

}  // namespace tdist::bench
