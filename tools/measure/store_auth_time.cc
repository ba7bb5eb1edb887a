// tdist-store-auth-time: what TCPStore authentication costs at startup.
// N clients connect to one server and do one GET each, once without a token
// and once with one (auth.h's handshake on every connection); prints the
// median and p99 time per client (connect + handshake + PING + GET) and the
// total, for clients connecting one after another and from T threads at
// once. The figures of docs/security.md.
//
//     tdist-store-auth-time [--clients 1000] [--threads 8]

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/auth.h"
#include "store/tcp/client.h"
#include "store/tcp/server.h"

namespace {

using Clock = std::chrono::steady_clock;
using tdist::TCPServer;
using tdist::TCPServerOptions;
using tdist::TCPStoreClient;

constexpr std::chrono::milliseconds kTimeout{60000};

struct Result {
  std::vector<double> per_client_ms;
  double total_ms = 0;
};

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// `clients` clients over `threads` threads; every client stays connected
// until the end, as ranks do.
Result run(int clients, int threads, const std::optional<std::string>& token) {
  TCPServerOptions options;
  options.host = "127.0.0.1";
  options.auth_token = token;
  auto server = TCPServer::start(options);
  {
    TCPStoreClient setter("127.0.0.1", server->port(), kTimeout, token);
    setter.set("key", tdist::to_bytes("value"), kTimeout);
  }
  Result result;
  result.per_client_ms.resize(static_cast<size_t>(clients));
  std::vector<std::unique_ptr<TCPStoreClient>> alive(static_cast<size_t>(clients));
  auto start = Clock::now();
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = t; i < clients; i += threads) {
        auto begin = Clock::now();
        auto client = std::make_unique<TCPStoreClient>("127.0.0.1", server->port(), kTimeout, token);
        if (tdist::to_string(client->get("key", kTimeout)) != "value") std::abort();
        result.per_client_ms[static_cast<size_t>(i)] = ms_between(begin, Clock::now());
        alive[static_cast<size_t>(i)] = std::move(client);
      }
    });
  }
  for (auto& w : workers) w.join();
  result.total_ms = ms_between(start, Clock::now());
  if (server->stats().auth_refusals != 0) std::abort();
  return result;
}

void print(const char* label, int threads, Result r) {
  std::sort(r.per_client_ms.begin(), r.per_client_ms.end());
  auto at = [&](double q) { return r.per_client_ms[static_cast<size_t>(q * (r.per_client_ms.size() - 1))]; };
  std::printf("%-8s threads=%-2d clients=%zu  median=%.3f ms  p99=%.3f ms  total=%.1f ms\n", label, threads,
              r.per_client_ms.size(), at(0.5), at(0.99), r.total_ms);
}

}  // namespace

int main(int argc, char** argv) {
  int clients = 1000;
  int threads = 8;
  CLI::App app{"tdist-store-auth-time: startup cost of TCPStore authentication"};
  app.add_option("--clients", clients, "clients connecting")->check(CLI::Range(1, 100000));
  app.add_option("--threads", threads, "threads connecting at once (besides 1)")->check(CLI::Range(1, 256));
  CLI11_PARSE(app, argc, argv);
  std::string token = tdist::auth::generate_token();
  for (int t : {1, threads}) {
    print("no auth", t, run(clients, t, std::nullopt));
    print("auth", t, run(clients, t, token));
  }
  return 0;
}
