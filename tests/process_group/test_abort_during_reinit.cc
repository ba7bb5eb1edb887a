// abort() and peer_crashed() from another thread while reinit() rebuilds the
// group's connections: the abort is not lost (reinit raises it, the peers
// learn of it, the group stays unusable until the next rebuild) and neither
// call touches connections being destroyed (run these under TSan: build-tsan,
// TSAN_OPTIONS=suppressions=tests/tsan.supp). Ranks as threads and as forked
// processes, 2 and 3 of them; the tcp. copy of the suite runs them over TCP.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "pg_harness.h"
#include "process_group/tdist_backend.h"
#include "tdist/errors.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Runs fn(group, store of the group, store, rank) on n ranks; the group's
// timeout (20 s) bounds a wait for a rank that failed.
std::string with_group(Mode mode, int n,
                       const std::function<void(ProcessGroupTdist&, Store& group_store, Store&, int)>& fn) {
  return run_with_store(
      mode, n,
      [&](Store& store, int rank) -> KeepAlive {
        ProcessGroupOptions options;
        options.timeout = 20s;
        std::shared_ptr<Store> shared(&store, [](Store*) {});
        auto group_store = std::make_shared<PrefixStore>("pg", shared);
        auto group = create_process_group("tdist", group_store, rank, n, options);
        fn(dynamic_cast<ProcessGroupTdist&>(*group), *group_store, store, rank);
        return group;
      },
      60s, 40s);
}

// Returns once the group's rank 0 has counted `generation` connects, i.e.
// its reinit has closed the old connections and waits in the rendezvous of
// the new ones (which cannot end before the other ranks come). Polls the
// count itself: there is no key to wait for.
void await_generation_of_rank0(Store& group_store, int64_t generation) {
  const auto deadline = Clock::now() + 20s;
  while (group_store.add("tdist/generation/0", 0) < generation) {
    check(Clock::now() < deadline, "rank 0 did not begin its rebuild within 20 s");
    std::this_thread::sleep_for(1ms);
  }
}

class DuringReinit : public WorldsTest {};

// Rank 0 rebuilds; another of its threads aborts while the rebuild waits
// for the others, who begin theirs only after the abort. Rank 0's reinit
// raises the abort and its group stays unusable; a rank whose rebuild
// succeeded fails its next call, naming rank 0; then everyone rebuilds
// again and the group works.
TEST_P(DuringReinit, AnAbortIsNotLostAndReachesThePeers) {
  EXPECT_EQ(with_group(mode(), n(),
                       [&](ProcessGroupTdist& pg, Store& group_store, Store& store, int rank) {
                         checked_all_reduce(pg, 5);
                         if (rank == 0) {
                           std::thread aborter([&] {
                             await_generation_of_rank0(group_store, 2);
                             pg.abort("the test aborts during the rebuild");
                             store.set("aborted", "1");
                           });
                           std::string what;
                           try {
                             pg.reinit(true);
                           } catch (const DistBackendError& e) {
                             what = e.what();
                           }
                           aborter.join();
                           check(!what.empty(), "reinit returned although an abort came during it");
                           expect_in(what,
                                     "reinit_process_group: the group was aborted by rank 0: the test "
                                     "aborts during the rebuild");
                           expect_in(what, "while the group was being rebuilt");
                           try {
                             pg.barrier()->wait();
                             check(false, "a call after the abort during the rebuild did not raise");
                           } catch (const DistBackendError& e) {
                             expect_in(e.what(), "barrier: the group was aborted by rank 0");
                           }
                         } else {
                           store.wait({"aborted"});
                           bool rebuilt = true;
                           try {
                             pg.reinit(true);  // may meet the abort while it sets up shared memory
                           } catch (const DistError&) {
                             rebuilt = false;
                           }
                           if (rebuilt) {
                             try {
                               checked_all_reduce(pg, 3);
                               check(false, "an all_reduce after rank 0's abort returned");
                             } catch (const DistError& e) {
                               expect_in(e.what(), "rank 0");
                             }
                           }
                         }
                         // Every rank saw the abort; the next rebuild is clean.
                         if (store.add("seen", 1) == n()) store.set("all_seen", "1");
                         store.wait({"all_seen"});
                         pg.reinit(true);
                         checked_all_reduce(pg, 7);
                         checked_all_reduce(pg, 70001);
                       }),
            "");
}

// One thread asks peer_crashed (as shrink and agree do) without pause while
// another rebuilds the group three times: it never touches connections
// being destroyed (TSan) and never takes a live peer for dead.
TEST_P(DuringReinit, PeerCrashedIsSafeAndFalseForLivePeers) {
  EXPECT_EQ(with_group(mode(), n(),
                       [&](ProcessGroupTdist& pg, Store&, Store&, int rank) {
                         std::atomic<bool> done{false};
                         std::atomic<int> wrong{-1};
                         std::atomic<uint64_t> asked{0};
                         std::thread asker([&] {
                           while (!done.load()) {
                             for (int r = 0; r < pg.size(); ++r) {
                               if (r != rank && pg.peer_crashed(r)) wrong.store(r);
                             }
                             asked.fetch_add(1);
                             std::this_thread::yield();  // 2 cores: leave the ranks room
                           }
                         });
                         for (int round = 0; round < 3; ++round) {
                           pg.reinit(true);
                           checked_all_reduce(pg, 9);
                         }
                         done.store(true);
                         asker.join();
                         check(wrong.load() < 0,
                               "peer_crashed said live rank " + std::to_string(wrong.load()) + " died");
                         check(asked.load() > 0, "peer_crashed was never asked");
                       }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Worlds, DuringReinit,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(2, 3)),
                         worlds_param_name);

}  // namespace
}  // namespace tdist::testing
