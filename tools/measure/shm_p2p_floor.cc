// Times the shared-memory point-to-point transport alone: two forked ranks,
// each bound to its own CPU, exchange messages as tdist-bench's sendrecv does
// (post the receive, send, wait for both), straight on ShmP2pTransport, with
// no process group, works or flight recorder. What tdist-bench --op sendrecv
// measures above this is the process group's cost per call.
//
//   build/bin/tdist-shm-p2p-floor [bytes=8] [iterations=200000] [streamed]
//
// streamed: large messages go through the rings even where the ranks may
// read each other's memory.

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/call_signature.h"
#include "tdist/file_store.h"
#include "transport/shm/shm_group.h"
#include "transport/shm/shm_p2p_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

void bind_to_cpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu % static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))), &set);
  sched_setaffinity(0, sizeof(set), &set);
}

int run_rank(const std::string& path, int rank, size_t bytes, int iterations, bool streamed) {
  bind_to_cpu(rank);
  tdist::FileStore store(path, 2);
  tdist::transport::TcpOptions tcp_options;
  tcp_options.timeout = 30s;
  auto tcp = tdist::transport::connect_tcp(store, rank, 2, tcp_options);
  auto domain = tdist::transport::shm::ShmGroup::connect(store, rank, 2, 30s);
  tdist::transport::shm::ShmP2pOptions options;
  options.peer_read = domain->single_copy() && !streamed;
  options.policy = domain->policy();
  options.timeout = 30s;
  options.watch = tcp.get();
  auto t = tdist::transport::shm::connect_shm_p2p(store, rank, 2, options);
  const int peer = 1 - rank;
  std::vector<uint8_t> out(bytes, static_cast<uint8_t>(rank + 1)), in(bytes, 0);
  const auto sig = tdist::detail::p2p_signature(tdist::DType::kUInt8, bytes);
  const uint64_t tag = uint64_t{1} << 63;
  auto exchange = [&] {
    auto r = t->irecv(peer, tag, in.data(), bytes, sig);
    auto s = t->isend(peer, tag, out.data(), bytes, sig);
    const auto deadline = Clock::now() + 30s;
    if (!t->wait(r, deadline) || !t->wait(s, deadline)) throw std::runtime_error("an exchange timed out");
  };
  for (int i = 0; i < iterations / 10 + 1; ++i) exchange();
  store.set("warm" + std::to_string(rank), "1");
  store.wait({"warm0", "warm1"});
  const auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) exchange();
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / iterations;
  if (in.size() > 0 && in[0] != static_cast<uint8_t>(peer + 1))
    throw std::runtime_error("wrong bytes arrived");
  store.set("done" + std::to_string(rank), "1");
  store.wait({"done0", "done1"});
  if (rank == 0) std::printf("%zu bytes: %.3f us per exchange (%d iterations)\n", bytes, us, iterations);
  std::fflush(stdout);  // the rank leaves by _exit
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 8;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 200000;
  const bool streamed = argc > 3 && std::string(argv[3]) == "streamed";
  const std::string path = "/tmp/tdist_shm_p2p_floor." + std::to_string(getpid());
  std::vector<pid_t> children;
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      try {
        _exit(run_rank(path, rank, bytes, iterations, streamed));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
        _exit(1);
      }
    }
    children.push_back(pid);
  }
  int rc = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  unlink(path.c_str());
  return rc;
}
