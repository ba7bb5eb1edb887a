// tdist-tcp-setup-time: times the TCP transport's connection setup
// (connect_tcp, from the first rank's start to the last rank's return) for
// 2, 4 and 8 ranks run as threads of this process on a shared HashStore,
// with and without a token, and prints the median and the range over the
// repeats:
//
//   build/bin/tdist-tcp-setup-time [repeats=21]
//
// Every connection passes the admission checks either way; the token adds
// the challenge-response (two more messages and four HMAC-SHA256s per
// connection).

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tdist/store.h"
#include "transport/tcp/tcp_transport.h"

namespace {

using Clock = std::chrono::steady_clock;

double setup_ms(int n, const std::string& token) {
  tdist::HashStore store;
  std::barrier start(n);
  std::barrier done(n);
  std::vector<Clock::time_point> began(static_cast<size_t>(n)), ended(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      tdist::transport::TcpOptions options;
      options.timeout = std::chrono::seconds(60);
      options.token = token;
      start.arrive_and_wait();
      began[static_cast<size_t>(rank)] = Clock::now();
      auto transport = tdist::transport::connect_tcp(store, rank, n, options);
      ended[static_cast<size_t>(rank)] = Clock::now();
      done.arrive_and_wait();  // no rank tears down what another still connects to
    });
  }
  for (auto& t : threads) t.join();
  const auto first = *std::min_element(began.begin(), began.end());
  const auto last = *std::max_element(ended.begin(), ended.end());
  return std::chrono::duration<double, std::milli>(last - first).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 21;
  std::printf("# ranks  token  median_ms    min_ms    max_ms  (%d repeats, %d connections per pair)\n",
              repeats, tdist::transport::kDefaultSocketsPerPeer);
  for (int n : {2, 4, 8}) {
    for (const std::string token : {"", "setup-time-token"}) {
      std::vector<double> ms;
      ms.reserve(static_cast<size_t>(repeats));
      for (int i = 0; i < repeats; ++i) ms.push_back(setup_ms(n, token));
      std::sort(ms.begin(), ms.end());
      std::printf("  %5d  %5s  %9.2f  %8.2f  %8.2f\n", n, token.empty() ? "no" : "yes", ms[ms.size() / 2],
                  ms.front(), ms.back());
    }
  }
  return 0;
}
