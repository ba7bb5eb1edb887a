// tdist-store-bench: throughput of a TCPStore server under N client threads for
// set/get/add mixes, and the time for many clients to connect and meet at a
// rendezvous (add to a counter, wait for the gate the last one opens).
//
//     tdist-store-bench [--clients N] [--seconds S] [--value-bytes B] [--rendezvous R]

#include <sys/resource.h>

#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tdist/errors.h"
#include "tdist/tcp_store.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  int clients = 8;
  double seconds = 1.0;
  size_t value_bytes = 64;
  int rendezvous = 1000;
};

// CLI11 (Debian's libcli11-dev) rather than hand parsing: --help, range
// checks and error messages for free.
Args parse(int argc, char** argv) {
  Args args;
  CLI::App app{"tdist-store-bench: TCPStore throughput and rendezvous time"};
  app.add_option("--clients", args.clients, "client threads for the throughput mixes")
      ->check(CLI::Range(1, 10000));
  app.add_option("--seconds", args.seconds, "duration of each mix")->check(CLI::PositiveNumber);
  app.add_option("--value-bytes", args.value_bytes, "size of each value");
  app.add_option("--rendezvous", args.rendezvous, "clients that connect and meet at a rendezvous (0: skip)")
      ->check(CLI::Range(0, 100000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));  // NOLINT(concurrency-mt-unsafe): no other thread runs yet
  }
  return args;
}

enum class Mix { kSet, kGet, kAdd, kMixed };

const char* mix_name(Mix mix) {
  switch (mix) {
    case Mix::kSet:
      return "set";
    case Mix::kGet:
      return "get";
    case Mix::kAdd:
      return "add";
    case Mix::kMixed:
      return "50% get / 25% set / 25% add";
  }
  return "?";
}

// Runs one mix on `clients` threads, each with its own connection, for the
// given time; returns total operations per second.
double run_mix(uint16_t port, const Args& args, Mix mix) {
  std::vector<std::unique_ptr<tdist::TCPStore>> stores;
  tdist::TCPStoreOptions options;
  options.port = port;
  stores.reserve(static_cast<size_t>(args.clients));
  for (int i = 0; i < args.clients; ++i)
    stores.push_back(std::make_unique<tdist::TCPStore>("127.0.0.1", options));
  const tdist::Bytes value(args.value_bytes, 'v');
  for (int i = 0; i < args.clients; ++i)
    stores[static_cast<size_t>(i)]->set("key/" + std::to_string(i), value);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> total{0};
  std::latch ready(args.clients + 1);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(args.clients));
  for (int i = 0; i < args.clients; ++i) {
    threads.emplace_back([&, i] {
      tdist::TCPStore& store = *stores[static_cast<size_t>(i)];
      const std::string key = "key/" + std::to_string(i);
      const std::string counter = "counter/" + std::to_string(i);
      uint64_t ops = 0;
      ready.arrive_and_wait();
      while (!stop.load(std::memory_order_relaxed)) {
        switch (mix) {
          case Mix::kSet:
            store.set(key, value);
            break;
          case Mix::kGet:
            store.get(key);
            break;
          case Mix::kAdd:
            store.add(counter, 1);
            break;
          case Mix::kMixed:
            if (ops % 4 < 2) {
              store.get(key);
            } else if (ops % 4 == 2) {
              store.set(key, value);
            } else {
              store.add(counter, 1);
            }
            break;
        }
        ++ops;
      }
      total.fetch_add(ops);
    });
  }
  ready.arrive_and_wait();
  auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(args.seconds));
  stop.store(true);
  for (auto& t : threads) t.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(total.load()) / elapsed;
}

// `n` threads each connect a new client, add 1 to a counter and wait for the
// gate the last arrival opens; returns the seconds from the first connect to
// the last thread through the gate.
double run_rendezvous(uint16_t port, int n) {
  tdist::TCPStoreOptions options;
  options.port = port;
  std::atomic<int> failures{0};
  std::latch ready(n + 1);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&] {
      ready.arrive_and_wait();
      try {
        tdist::TCPStore store("127.0.0.1", options);
        if (store.add("rendezvous/arrived", 1) == n) store.set("rendezvous/gate", "open");
        store.wait({"rendezvous/gate"});
      } catch (const std::exception& e) {
        if (failures.fetch_add(1) == 0) std::fprintf(stderr, "rendezvous client failed: %s\n", e.what());
      }
    });
  }
  ready.arrive_and_wait();
  auto start = Clock::now();
  for (auto& t : threads) t.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  if (failures.load() > 0) std::fprintf(stderr, "%d rendezvous clients failed\n", failures.load());
  return elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) {
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  try {
    tdist::TCPStoreOptions options;
    options.is_master = true;
    tdist::TCPStore master("127.0.0.1", options);
    std::printf("TCPStore server on 127.0.0.1:%u, %u hardware threads\n", master.port(),
                std::thread::hardware_concurrency());
    std::printf("clients: %d, value size: %zu bytes, %.1f s per mix\n", args.clients, args.value_bytes,
                args.seconds);
    for (Mix mix : {Mix::kSet, Mix::kGet, Mix::kAdd, Mix::kMixed}) {
      double rate = run_mix(master.port(), args, mix);
      std::printf("  %-28s %10.0f ops/s total  (%.1f us per op per client)\n", mix_name(mix), rate,
                  1e6 * args.clients / rate);
    }
    if (args.rendezvous > 0) {
      double seconds = run_rendezvous(master.port(), args.rendezvous);
      std::printf("rendezvous: %d clients connected, met and passed the gate in %.3f s\n", args.rendezvous,
                  seconds);
    }
  } catch (const tdist::DistError& e) {
    std::fprintf(stderr, "store_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
