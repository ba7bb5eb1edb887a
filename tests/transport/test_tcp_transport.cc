// The TCP transport beyond the interface's contract (test_transport_conformance.cc):
// striping over several connections, driven waits, and what a dead peer does.

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
#include "transport_harness.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;
using transport::kAnySource;
using transport::Transport;

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
