// tdist-store-demo: N processes on this host find each other through env://
// rendezvous (a TCPStore hosted by rank 0) and use the store together: they
// exchange their host names, elect a leader with compare_set, sum a counter
// and meet at a barrier. Run without RANK in the environment it starts the N
// processes itself, the way a launcher would.
//
//   build/bin/tdist-store-demo --nproc 4

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tdist/errors.h"
#include "tdist/rendezvous.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Barrier through the store: the last rank to arrive opens the gate.
void barrier(tdist::Store& store, const std::string& name, int world_size) {
  if (store.add(name + "/arrived", 1) == world_size) store.set(name + "/open", "1");
  store.wait({name + "/open"});
}

int worker(int timeout_s) {
  auto start = Clock::now();
  auto r = tdist::rendezvous("env://", -1, -1, std::chrono::seconds(timeout_s));
  double rendezvous_ms = ms_since(start);
  tdist::Store& store = *r.store;

  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  store.set("who/" + std::to_string(r.rank), std::string(host) + " pid " + std::to_string(getpid()));

  // Every rank proposes itself; compare_set lets exactly one win.
  std::string leader =
      tdist::to_string(store.compare_set("leader", tdist::Bytes{}, tdist::to_bytes(std::to_string(r.rank))));

  // A sum through a counter: ranks add rank+1.
  store.add("sum", r.rank + 1);
  barrier(store, "after-sum", r.world_size);
  int64_t sum = store.add("sum", 0);
  int64_t expected = static_cast<int64_t>(r.world_size) * (r.world_size + 1) / 2;

  if (r.rank == 0) {
    std::printf("tdist store demo: %d processes met through env:// rendezvous in %.1f ms\n", r.world_size,
                rendezvous_ms);
    for (int peer = 0; peer < r.world_size; ++peer) {
      std::printf("  rank %d: %s\n", peer,
                  tdist::to_string(store.get("who/" + std::to_string(peer))).c_str());
    }
    std::printf("  leader elected by compare_set: rank %s\n", leader.c_str());
    std::printf("  sum of rank+1 over all ranks via add(): %lld (expected %lld) %s\n",
                static_cast<long long>(sum), static_cast<long long>(expected),
                sum == expected ? "OK" : "WRONG");
    std::printf("  keys in the store: %lld\n", static_cast<long long>(store.num_keys()));
    std::fflush(stdout);
  }
  // Rank 0 hosts the server, so it leaves last: the others report with one
  // more add (whose reply proves the server handled it) after the barrier.
  barrier(store, "done", r.world_size);
  if (r.rank != 0 && store.add("left", 1) == r.world_size - 1) store.set("all_left", "1");
  if (r.rank == 0 && r.world_size > 1) store.wait({"all_left"});
  return sum == expected ? 0 : 1;
}

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    throw tdist::DistNetworkError("tdist-store-demo: cannot find a free port on 127.0.0.1");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// Starts nproc copies of this program as ranks and waits for them.
int launch(const char* self, int nproc, int timeout_s) {
  int port = free_port();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < nproc; ++rank) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    if (pid == 0) {
      // The forked child is single-threaded, so setenv is safe here.
      // NOLINTBEGIN(concurrency-mt-unsafe)
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      setenv("RANK", std::to_string(rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      // NOLINTEND(concurrency-mt-unsafe)
      std::string timeout = std::to_string(timeout_s);
      execl(self, self, "--timeout", timeout.c_str(), static_cast<char*>(nullptr));
      std::perror("exec");
      _exit(127);
    }
    pids.push_back(pid);
  }
  int failures = 0;
  for (int rank = 0; rank < nproc; ++rank) {
    int status = 0;
    waitpid(pids[static_cast<size_t>(rank)], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failures;
      if (WIFSIGNALED(status)) {
        std::fprintf(stderr, "rank %d was killed by signal %d\n", rank, WTERMSIG(status));
      } else {
        std::fprintf(stderr, "rank %d exited with code %d\n", rank, WEXITSTATUS(status));
      }
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tdist-store-demo: processes meet through env:// rendezvous and share a TCPStore"};
  int nproc = 4;
  int timeout_s = 60;
  app.add_option("--nproc", nproc, "number of processes to start when RANK is not set")
      ->check(CLI::Range(1, 1024));
  int local_rank = -1;  // passed by legacy launchers (tdistrun --no-use-env); LOCAL_RANK says the same
  app.add_option("--local-rank,--local_rank", local_rank,
                 "this process's rank on its node (set by launchers)");
  app.add_option("--timeout", timeout_s, "rendezvous and store timeout in seconds")
      ->check(CLI::Range(1, 3600));
  CLI11_PARSE(app, argc, argv);
  try {
    if (std::getenv("RANK") != nullptr) return worker(timeout_s);  // NOLINT(concurrency-mt-unsafe)
    return launch("/proc/self/exe", nproc, timeout_s);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tdist-store-demo: %s\n", e.what());
    return 1;
  }
}
