// Many clients at once: 1,000 client threads against one server, and forked
// processes racing on add and compare_set. Totals must come out exact.

#include <sys/resource.h>

#include <atomic>
#include <string>

#include <gtest/gtest.h>

#include "multirank.h"
#include "store/tcp/server.h"
#include "tdist/errors.h"
#include "tdist/tcp_store.h"

namespace tdist {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr milliseconds kStoreTimeout = seconds(120);

// Each client thread holds a socket and the server holds its end: two fds
// per client, in this one process.
void raise_fd_limit() {
  rlimit limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  limit.rlim_cur = limit.rlim_max;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &limit), 0);
}

TCPStoreOptions client_options(uint16_t port) {
  TCPStoreOptions options;
  options.port = port;
  options.timeout = kStoreTimeout;
  return options;
}

TEST(TCPStoreStress, ThousandConcurrentClientThreads) {
  raise_fd_limit();
  constexpr int kClients = 1000;
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur < 2 * kClients + 64) GTEST_SKIP() << "RLIMIT_NOFILE is only " << limit.rlim_cur;

  TCPStoreOptions master_options;
  master_options.is_master = true;
  master_options.timeout = kStoreTimeout;
  TCPStore master("127.0.0.1", master_options);
  uint16_t port = master.port();
  std::atomic<int> cas_winners{0};
  std::atomic<int> last_arrivals{0};

  EXPECT_EQ(testing::run_ranks(
                testing::Mode::kThreads, kClients,
                [&](int rank) {
                  TCPStore store("127.0.0.1", client_options(port));
                  std::string me = std::to_string(rank);
                  store.add("total", rank + 1);
                  store.set("value/" + me, me);
                  // Another client's key: answered by the server once that client set it.
                  std::string next = std::to_string((rank + 1) % kClients);
                  if (to_string(store.get("value/" + next)) != next)
                    throw std::runtime_error("wrong value of " + next);
                  // Exactly one client wins the race to create the key.
                  Bytes won = store.compare_set("winner", {}, to_bytes(me));
                  if (won == to_bytes(me)) cas_winners.fetch_add(1);
                  // Rendezvous: the last to arrive opens the gate for all.
                  if (store.add("arrived", 1) == kClients) {
                    last_arrivals.fetch_add(1);
                    store.set("gate", "open");
                  }
                  store.wait({"gate"});
                  if (to_string(store.get("gate")) != "open") throw std::runtime_error("gate not open");
                },
                seconds(240)),
            "");

  EXPECT_EQ(master.add("total", 0), int64_t{kClients} * (kClients + 1) / 2);
  EXPECT_EQ(master.add("arrived", 0), kClients);
  EXPECT_EQ(cas_winners.load(), 1);
  EXPECT_EQ(last_arrivals.load(), 1);
  Bytes winner = master.get("winner");
  int winner_rank = std::stoi(to_string(winner));
  EXPECT_GE(winner_rank, 0);
  EXPECT_LT(winner_rank, kClients);
  // value/0..999, total, winner, arrived, gate.
  EXPECT_EQ(master.num_keys(), kClients + 4);
}

TEST(TCPStoreStress, ForkedProcessesRaceOnAddAndCompareSet) {
  constexpr int kProcesses = 8;
  constexpr int kOps = 50;
  TCPStoreOptions master_options;
  master_options.is_master = true;
  master_options.timeout = kStoreTimeout;
  TCPStore master("127.0.0.1", master_options);
  uint16_t port = master.port();
  master.set("cas", "0");

  EXPECT_EQ(testing::run_ranks(
                testing::Mode::kProcesses, kProcesses,
                [&](int rank) {
                  TCPStore store("127.0.0.1", client_options(port));
                  for (int i = 0; i < kOps; ++i) {
                    store.add("sum", rank + 1);
                    // Increment the count in "cas" with compare_set, retrying
                    // until our expected value was the current one. Values
                    // name their writer, so seeing `next` back means we wrote it.
                    for (;;) {
                      Bytes current = store.get("cas");
                      long long count = std::stoll(to_string(current));
                      Bytes next = to_bytes(std::to_string(count + 1) + " by " + std::to_string(rank) + "/" +
                                            std::to_string(i));
                      if (store.compare_set("cas", current, next) == next) break;
                    }
                  }
                },
                seconds(120)),
            "");

  EXPECT_EQ(master.add("sum", 0), int64_t{kOps} * kProcesses * (kProcesses + 1) / 2);
  EXPECT_EQ(std::stoll(to_string(master.get("cas"))), kOps * kProcesses);
}

}  // namespace
}  // namespace tdist
