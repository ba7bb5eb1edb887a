// The TCP transport: matching, ordering, sizes, and what a dead peer does.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <numeric>
#include <optional>
#include <thread>

#include "multirank.h"
#include "tdist/errors.h"
#include "tdist/file_store.h"
#include "transport/tcp/tcp_transport.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;
using transport::kAnySource;
using transport::Transport;

auto deadline(std::chrono::milliseconds ms = 30s) {
  return transport::Clock::now() + ms;
}

void wait_ok(const transport::RequestPtr& request) {
  if (!request->wait_until(deadline())) throw std::runtime_error("request timed out");
}

// Runs fn on n ranks, each with a connected TCP transport.
std::string with_transport(Mode mode, int n, const std::function<void(Transport&, int)>& fn) {
  return run_with_store(mode, n, [&](Store& store, int rank) -> KeepAlive {
    transport::TcpOptions options;
    options.timeout = 30s;
    std::shared_ptr<Transport> t = transport::connect_tcp(store, rank, n, options);
    fn(*t, rank);
    return t;
  });
}

class TcpTransportTest : public ::testing::TestWithParam<std::tuple<Mode, int>> {
 protected:
  Mode mode() const { return std::get<0>(GetParam()); }
  int n() const { return std::get<1>(GetParam()); }
};

TEST_P(TcpTransportTest, EveryPairExchangesMessagesInBothDirections) {
  EXPECT_EQ(with_transport(mode(), n(),
                           [&](Transport& t, int rank) {
                             std::vector<int64_t> out(static_cast<size_t>(n())),
                                 in(static_cast<size_t>(n()), -1);
                             std::vector<transport::RequestPtr> requests;
                             for (int peer = 0; peer < n(); ++peer) {
                               out[static_cast<size_t>(peer)] = rank * 100 + peer;
                               requests.push_back(t.irecv(peer, 7, &in[static_cast<size_t>(peer)], 8));
                               requests.push_back(t.isend(peer, 7, &out[static_cast<size_t>(peer)], 8));
                             }
                             for (auto& r : requests) wait_ok(r);
                             for (int peer = 0; peer < n(); ++peer) {
                               if (in[static_cast<size_t>(peer)] != peer * 100 + rank) {
                                 throw std::runtime_error("wrong value from rank " + std::to_string(peer));
                               }
                             }
                           }),
            "");
}

TEST_P(TcpTransportTest, SameTagMessagesArriveInOrderAndTagsDoNotMix) {
  if (n() < 2) GTEST_SKIP();
  EXPECT_EQ(with_transport(mode(), n(),
                           [&](Transport& t, int rank) {
                             constexpr int kCount = 50;
                             if (rank == 1) {
                               std::vector<int> values(kCount * 2);
                               std::vector<transport::RequestPtr> sends;
                               for (int i = 0; i < kCount; ++i) {
                                 values[static_cast<size_t>(i)] = i;
                                 values[static_cast<size_t>(kCount + i)] = 1000 + i;
                                 sends.push_back(t.isend(0, 1, &values[static_cast<size_t>(i)], 4));
                                 sends.push_back(t.isend(0, 2, &values[static_cast<size_t>(kCount + i)], 4));
                               }
                               for (auto& r : sends) wait_ok(r);
                             } else if (rank == 0) {
                               // Receive tag 2 first: tag 1 messages wait as unexpected.
                               for (int tag : {2, 1}) {
                                 for (int i = 0; i < kCount; ++i) {
                                   int v = -1;
                                   wait_ok(t.irecv(1, static_cast<uint64_t>(tag), &v, 4));
                                   int want = tag == 1 ? i : 1000 + i;
                                   if (v != want) {
                                     throw std::runtime_error("tag " + std::to_string(tag) + " message " +
                                                              std::to_string(i) + " is " + std::to_string(v));
                                   }
                                 }
                               }
                             }
                           }),
            "");
}

TEST_P(TcpTransportTest, AnySourceReceiveReportsTheSender) {
  EXPECT_EQ(with_transport(mode(), n(),
                           [&](Transport& t, int rank) {
                             if (rank != 0) {
                               int v = rank * 3;
                               wait_ok(t.isend(0, 9, &v, 4));
                               return;
                             }
                             std::vector<int> seen(static_cast<size_t>(n()), 0);
                             for (int i = 1; i < n(); ++i) {
                               int v = -1;
                               auto r = t.irecv(kAnySource, 9, &v, 4);
                               wait_ok(r);
                               if (v != r->source() * 3)
                                 throw std::runtime_error("value does not match sender");
                               seen[static_cast<size_t>(r->source())]++;
                             }
                             for (int peer = 1; peer < n(); ++peer) {
                               if (seen[static_cast<size_t>(peer)] != 1)
                                 throw std::runtime_error("sender seen twice");
                             }
                           }),
            "");
}

TEST_P(TcpTransportTest, LargeMessagesArriveIntactInARing) {
  EXPECT_EQ(with_transport(mode(), n(),
                           [&](Transport& t, int rank) {
                             const size_t count = (size_t{8} << 20) / 4 + 3;  // 8 MiB and a bit
                             std::vector<uint32_t> out(count), in(count);
                             for (size_t i = 0; i < count; ++i)
                               out[i] = static_cast<uint32_t>(i * 2654435761u + rank);
                             int next = (rank + 1) % n();
                             int prev = (rank + n() - 1) % n();
                             auto r = t.irecv(prev, 3, in.data(), count * 4);
                             auto s = t.isend(next, 3, out.data(), count * 4);
                             wait_ok(s);
                             wait_ok(r);
                             for (size_t i = 0; i < count; ++i) {
                               if (in[i] != static_cast<uint32_t>(i * 2654435761u + prev)) {
                                 throw std::runtime_error("byte mismatch at element " + std::to_string(i));
                               }
                             }
                           }),
            "");
}

TEST_P(TcpTransportTest, SizesUnknownInAdvanceAndTooSmallBuffers) {
  if (n() < 2) GTEST_SKIP();
  EXPECT_EQ(with_transport(mode(), n(),
                           [&](Transport& t, int rank) {
                             if (rank == 1) {
                               std::string a = "hello, rank 0";
                               std::vector<uint8_t> big(100, 7);
                               wait_ok(t.isend(0, 1, a.data(), a.size()));
                               wait_ok(t.isend(0, 2, big.data(), big.size()));
                               wait_ok(t.isend(0, 3, nullptr, 0));
                             } else if (rank == 0) {
                               auto bytes = std::make_shared<std::vector<uint8_t>>();
                               wait_ok(t.irecv_bytes(1, 1, bytes));
                               if (std::string(bytes->begin(), bytes->end()) != "hello, rank 0") {
                                 throw std::runtime_error("irecv_bytes got the wrong bytes");
                               }
                               uint8_t small[10];
                               try {
                                 wait_ok(t.irecv(1, 2, small, sizeof(small)));
                                 throw std::runtime_error("a 100-byte message fit a 10-byte buffer");
                               } catch (const DistBackendError& e) {
                                 if (std::string(e.what()).find("100 bytes") == std::string::npos) throw;
                               }
                               auto r = t.irecv(1, 3, small, sizeof(small));
                               wait_ok(r);
                               if (r->received_bytes() != 0)
                                 throw std::runtime_error("empty message not empty");
                             }
                           }),
            "");
}

// Sizes around the transport's edges: empty, one byte, its 16-byte header,
// its 4 KiB read stage, and large; several small messages then share one
// read, and a large one starts inside the stage and ends outside it.
std::vector<size_t> edge_sizes() {
  return {0, 1, 15, 16, 17, 3, 4079, 4080, 4095, 4096, 4097, 8191, 2, (size_t{1} << 20) + 5, 0, 7, 65537, 1};
}

uint8_t pattern_byte(int sender, size_t message, size_t i) {
  return static_cast<uint8_t>(sender * 31 + message * 7 + i * 13 + (i >> 8));
}

// Every rank sends the edge sizes to the next and receives them from the
// previous rank, waiting through Transport::wait (the thread drives the
// sockets itself), inside a CallScope or not.
void exchange_edge_sizes(Transport& t, int rank, int n, bool in_call) {
  const int next = (rank + 1) % n;
  const int prev = (rank + n - 1) % n;
  const auto sizes = edge_sizes();
  std::vector<std::vector<uint8_t>> out(sizes.size()), in(sizes.size());
  std::vector<transport::RequestPtr> recvs(sizes.size()), sends;
  std::optional<transport::CallScope> call;
  if (in_call) call.emplace(t);
  // Messages of one tag match receives in posting order. The first half of
  // the receives is posted before the sends, the rest after, so both the
  // direct path and the unexpected one are taken.
  const size_t half = sizes.size() / 2;
  for (size_t m = 0; m < sizes.size(); ++m) {
    out[m].resize(sizes[m]);
    for (size_t i = 0; i < sizes[m]; ++i) out[m][i] = pattern_byte(rank, m, i);
    in[m].assign(sizes[m] + 1, 0xEE);  // one byte of room: a size error would show
    if (m < half) recvs[m] = t.irecv(prev, 9, in[m].data(), in[m].size());
  }
  for (size_t m = 0; m < sizes.size(); ++m) sends.push_back(t.isend(next, 9, out[m].data(), out[m].size()));
  for (size_t m = half; m < sizes.size(); ++m) recvs[m] = t.irecv(prev, 9, in[m].data(), in[m].size());
  for (const auto* list : {&recvs, &sends}) {
    for (const auto& r : *list) {
      if (!t.wait(r, deadline())) throw std::runtime_error("a driven wait timed out");
    }
  }
  for (size_t m = 0; m < sizes.size(); ++m) {
    if (recvs[m]->received_bytes() != sizes[m]) {
      throw std::runtime_error("message " + std::to_string(m) + ": " +
                               std::to_string(recvs[m]->received_bytes()) + " bytes, expected " +
                               std::to_string(sizes[m]));
    }
    for (size_t i = 0; i < sizes[m]; ++i) {
      if (in[m][i] != pattern_byte(prev, m, i)) {
        throw std::runtime_error("message " + std::to_string(m) + " byte " + std::to_string(i) + " is wrong");
      }
    }
  }
}

TEST_P(TcpTransportTest, DrivenWaitsDeliverEdgeSizesIntactAndInOrder) {
  EXPECT_EQ(with_transport(mode(), n(),
                           [&](Transport& t, int rank) {
                             exchange_edge_sizes(t, rank, n(), /*in_call=*/true);
                             exchange_edge_sizes(t, rank, n(), /*in_call=*/false);
                           }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, TcpTransportTest,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(1, 2, 3, 5, 8)),
                         [](const auto& p) {
                           return std::string(mode_name(std::get<0>(p.param))) + "_" +
                                  std::to_string(std::get<1>(p.param));
                         });

// Large messages travel in stripes over several connections per pair. The
// rank that connects chooses how many; here every rank chooses differently
// (1 to 5), so pairs with one, two, ... connections all carry messages of
// many sizes around the striping threshold, in both directions at once.
TEST(TcpTransportStriping, PairsWithDifferentConnectionCountsCarryLargeMessagesIntact) {
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    constexpr int kRanks = 5;
    std::string failures = run_with_store(mode, kRanks, [&](Store& store, int rank) -> KeepAlive {
      transport::TcpOptions options;
      options.timeout = 30s;
      options.sockets_per_peer = rank + 1;
      std::shared_ptr<Transport> t = transport::connect_tcp(store, rank, kRanks, options);
      const std::vector<size_t> sizes = {transport::tcp::kStripeMinBytes - 1, transport::tcp::kStripeMinBytes,
                                         transport::tcp::kStripeMinBytes + 4097, (size_t{3} << 20) + 7, 5};
      std::vector<std::vector<uint8_t>> out, in;
      std::vector<transport::RequestPtr> recvs, sends;
      for (int peer = 0; peer < kRanks; ++peer) {
        if (peer == rank) continue;
        for (size_t m = 0; m < sizes.size(); ++m) {
          out.emplace_back(sizes[m]);
          for (size_t i = 0; i < sizes[m]; ++i) out.back()[i] = pattern_byte(rank * 8 + peer, m, i);
          in.emplace_back(sizes[m]);
          recvs.push_back(t->irecv(peer, 4, in.back().data(), sizes[m]));
          sends.push_back(t->isend(peer, 4, out.back().data(), sizes[m]));
        }
      }
      for (auto& r : recvs) wait_ok(r);
      for (auto& r : sends) wait_ok(r);
      size_t k = 0;
      for (int peer = 0; peer < kRanks; ++peer) {
        if (peer == rank) continue;
        for (size_t m = 0; m < sizes.size(); ++m, ++k) {
          for (size_t i = 0; i < sizes[m]; ++i) {
            if (in[k][i] != pattern_byte(peer * 8 + rank, m, i)) {
              throw std::runtime_error("from rank " + std::to_string(peer) + ", message " +
                                       std::to_string(m) + ": byte " + std::to_string(i) + " is wrong");
            }
          }
        }
      }
      return t;
    });
    EXPECT_EQ(failures, "") << mode_name(mode);
  }
}

TEST(TcpTransportStriping, StripesStartOnPageBoundariesAndCoverTheMessage) {
  for (size_t size : {size_t{1} << 20, (size_t{1} << 20) + 1, (size_t{64} << 20) + 12345}) {
    for (int parts : {1, 2, 3, 4, 7, 16}) {
      size_t previous = 0;
      EXPECT_EQ(transport::tcp::stripe_begin(size, parts, 0), 0U);
      for (int i = 1; i <= parts; ++i) {
        const size_t begin = transport::tcp::stripe_begin(size, parts, i);
        EXPECT_GT(begin, previous) << size << " bytes, stripe " << i << " of " << parts << " is empty";
        if (i < parts) {
          EXPECT_EQ(begin % 4096, 0U);
        }
        previous = begin;
      }
      EXPECT_EQ(previous, size);
    }
  }
}

// A thread inside a call drives the sockets, and so reads messages meant for
// other threads' requests too. It must not run their callbacks (they might
// wait for the very call it is in): the loop thread runs them. Rank 1 sends
// only once the callback is in place (a callback registered on a request
// already complete runs at once, on the thread registering it).
TEST(TcpTransportDriving, CallbacksOfRequestsADriverInACallCompletesRunOnTheLoopThread) {
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    EXPECT_EQ(
        with_transport(mode, 2,
                       [&](Transport& t, int rank) {
                         int value = 0;
                         int token = 0;
                         if (rank == 1) {
                           int a = 11;
                           int b = 22;
                           wait_ok(t.irecv(0, 9, &token, 4));
                           wait_ok(t.isend(0, 1, &a, 4));  // tag 1 first: read on the way to tag 2
                           wait_ok(t.isend(0, 2, &b, 4));
                           return;
                         }
                         std::mutex mutex;
                         std::condition_variable cv;
                         bool ran = false;
                         std::thread::id ran_on;
                         auto early = t.irecv(1, 1, &value, 4);
                         early->on_complete([&](transport::Request&) {
                           std::lock_guard<std::mutex> lock(mutex);
                           ran = true;
                           ran_on = std::this_thread::get_id();
                           cv.notify_all();
                         });
                         // Not t.wait: a driver outside a call would run the callback itself.
                         if (!t.isend(1, 9, &token, 4)->wait_until(deadline()))
                           throw std::runtime_error("the go-ahead was not sent");
                         int other = 0;
                         {
                           transport::CallScope call(t);
                           auto mine = t.irecv(1, 2, &other, 4);
                           if (!t.wait(mine, deadline())) throw std::runtime_error("driven wait timed out");
                         }
                         std::unique_lock<std::mutex> lock(mutex);
                         if (!cv.wait_for(lock, 20s, [&] { return ran; }))
                           throw std::runtime_error("the callback never ran");
                         if (ran_on == std::this_thread::get_id())
                           throw std::runtime_error("the driving thread ran another request's callback");
                         if (value != 11 || other != 22) throw std::runtime_error("wrong values");
                       }),
        "")
        << mode_name(mode);
  }
}

// Two threads wait on one transport at once: one drives, the other waits for
// the driver (or takes over when it stops); both complete, whatever order
// the messages come in.
TEST(TcpTransportDriving, TwoThreadsWaitingOnOneTransportBothComplete) {
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    EXPECT_EQ(with_transport(mode, 2,
                             [&](Transport& t, int rank) {
                               constexpr int kRounds = 200;
                               if (rank == 1) {
                                 for (int i = 0; i < kRounds; ++i) {
                                   int a = i;
                                   int b = -i;
                                   // Alternate which of the two waiters is served first.
                                   wait_ok(t.isend(0, (i % 2) ? 1 : 2, (i % 2) ? &a : &b, 4));
                                   wait_ok(t.isend(0, (i % 2) ? 2 : 1, (i % 2) ? &b : &a, 4));
                                 }
                                 return;
                               }
                               std::string error;
                               std::mutex error_mutex;
                               auto waiter = [&](uint64_t tag, int sign) {
                                 try {
                                   for (int i = 0; i < kRounds; ++i) {
                                     int got = 12345;
                                     auto r = t.irecv(1, tag, &got, 4);
                                     if (!t.wait(r, deadline())) throw std::runtime_error("wait timed out");
                                     if (got != sign * i) throw std::runtime_error("wrong value");
                                   }
                                 } catch (const std::exception& e) {
                                   std::lock_guard<std::mutex> lock(error_mutex);
                                   error = e.what();
                                 }
                               };
                               std::thread other(waiter, 2, -1);
                               waiter(1, 1);
                               other.join();
                               if (!error.empty()) throw std::runtime_error(error);
                             }),
              "")
        << mode_name(mode);
  }
}

TEST(TcpTransportFailure, AKilledPeerFailsPendingAndFutureOperationsNamingIt) {
  constexpr int kRanks = 3;
  std::string path = temp_path("killed");
  auto outcomes = run_forked(
      kRanks,
      [&](int rank) {
        FileStore store(path, kRanks);
        transport::TcpOptions options;
        options.timeout = 30s;
        auto t = transport::connect_tcp(store, rank, kRanks, options);
        if (store.add("connected", 1) == kRanks) store.set("connected_all", "1");
        store.wait({"connected_all"}, 30s);
        if (rank == 2) raise(SIGKILL);
        std::vector<uint8_t> buffer(1 << 20);
        auto pending = t->irecv(2, 1, buffer.data(), buffer.size());
        try {
          // The deadline only guards against a hang; the error must come
          // from the closed connection.
          if (!pending->wait_until(deadline(20s))) throw std::runtime_error("no error within 20 s");
          throw std::runtime_error("receive from a killed rank completed");
        } catch (const DistNetworkError& e) {
          if (std::string(e.what()).find("rank 2") == std::string::npos) throw;
        }
        auto later = t->isend(2, 1, buffer.data(), 16);
        if (!later->done()) throw std::runtime_error("a send to a dead rank was queued instead of failing");
        try {
          later->wait_until(deadline(5s));
          throw std::runtime_error("send to a killed rank completed");
        } catch (const DistNetworkError& e) {
          if (std::string(e.what()).find("rank 2") == std::string::npos) throw;
        }
        if (!t->peer_failed(2)) throw std::runtime_error("peer_failed(2) is false");
        // The group is broken: even operations between survivors fail, and
        // the error names the rank that died.
        int v = rank;
        try {
          t->isend(1 - rank, 5, &v, 4)->wait_until(deadline(5s));
          throw std::runtime_error("a send in a broken group completed");
        } catch (const DistNetworkError& e) {
          if (std::string(e.what()).find("rank 2") == std::string::npos) throw;
        }
      },
      60s);
  EXPECT_TRUE(outcomes[0].ok) << describe_failures(outcomes);
  EXPECT_TRUE(outcomes[1].ok) << describe_failures(outcomes);
  EXPECT_EQ(outcomes[2].signal, SIGKILL);
  unlink(path.c_str());
}

}  // namespace
}  // namespace tdist::testing
