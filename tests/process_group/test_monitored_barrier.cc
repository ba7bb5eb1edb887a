// monitored_barrier (distributed.h): a barrier when every rank comes, and
// gloo's report naming the ranks that did not, on rank 0 and on the ranks
// that did come. Ranks as threads and as forked processes, 1 to 5 of them.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pg_harness.h"
#include "tdist/distributed.h"
#include "tdist/errors.h"

namespace tdist::testing {
namespace {

using namespace std::chrono_literals;

// Runs fn(group, store, rank) on n ranks with a tdist group whose global
// ranks are `global_ranks` (empty: 0..n-1), as with_groups does but with
// the group's handle, which the functional API takes.
std::string with_group_handles(Mode mode, int n, const std::vector<int>& global_ranks,
                               const std::function<void(const Group&, Store&, int)>& fn) {
  return run_with_store(
      mode, n,
      [&](Store& store, int rank) -> KeepAlive {
        ProcessGroupOptions options;
        options.timeout = 30s;
        options.global_ranks = global_ranks;
        std::shared_ptr<Store> shared(&store, [](Store*) {});
        auto group =
            create_process_group("tdist", std::make_shared<PrefixStore>("pg", shared), rank, n, options);
        fn(group, store, rank);
        return group;
      },
      70s, 50s);
}

// The message of the DistError `fn` raises, checking its type.
template <typename Expected>
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Expected& e) {
    return e.what();
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("wrong error type: ") + e.what());
  }
  throw std::runtime_error("no error raised");
}

class MonitoredBarrier : public WorldsTest {};

TEST_P(MonitoredBarrier, NobodyLeavesBeforeEveryoneArrived) {
  const int size = n();
  EXPECT_EQ(with_group_handles(mode(), size, {},
                               [&](const Group& g, Store& store, int rank) {
                                 for (int round = 0; round < 3; ++round) {
                                   const std::string key = "arrived" + std::to_string(round);
                                   store.add(key, 1);
                                   monitored_barrier(g, 20s, /*wait_all_ranks=*/round == 1);
                                   // Every rank counted itself before entering: all are in.
                                   check(store.add(key, 0) == size,
                                         "rank " + std::to_string(rank) + " left barrier " +
                                             std::to_string(round) + " before every rank arrived");
                                 }
                               }),
            "");
}

// Rank `missing` never enters; it leaves once rank 0 has reported it.
void run_with_missing(Mode mode, int size, const std::vector<int>& missing, bool wait_all_ranks,
                      const std::vector<int>& global_ranks, const std::string& named) {
  EXPECT_EQ(with_group_handles(
                mode, size, global_ranks,
                [&](const Group& g, Store& store, int rank) {
                  if (std::find(missing.begin(), missing.end(), rank) != missing.end()) {
                    store.wait({"reported"});
                    return;
                  }
                  if (rank != 0) {
                    // Told at once by rank 0, not after its own (group) timeout.
                    const std::string what =
                        error_of<DistTimeoutError>([&] { monitored_barrier(g, 300ms, wait_all_ranks); });
                    expect_in(what, "monitored_barrier: Rank " + std::to_string(rank) +
                                        " successfully reached monitoredBarrier, but received errors while "
                                        "waiting for send/recv from rank 0: rank 0 reports: " +
                                        named + " failed to pass monitoredBarrier in 300 ms");
                    return;
                  }
                  const std::string what =
                      error_of<DistTimeoutError>([&] { monitored_barrier(g, 300ms, wait_all_ranks); });
                  store.set("reported", {1});
                  expect_in(what,
                            "monitored_barrier: " + named + " failed to pass monitoredBarrier in 300 ms");
                }),
            "");
}

// Ranks that do not arrive: 2 ranks or more.
using MonitoredBarrierMissing = MonitoredBarrier;

TEST_P(MonitoredBarrierMissing, NamesTheFirstRankThatDidNotArrive) {
  // Ranks 1 and the last are missing: the first in rank order is named.
  std::vector<int> missing = {1, n() - 1};
  run_with_missing(mode(), n(), missing, false, {}, "Rank 1");
}

TEST_P(MonitoredBarrierMissing, WaitAllRanksNamesEveryRankThatDidNotArrive) {
  std::vector<int> missing = {1};
  if (n() > 2) missing.push_back(n() - 1);
  const std::string named = n() > 2 ? "Ranks 1, " + std::to_string(n() - 1) : "Rank 1";
  run_with_missing(mode(), n(), missing, true, {}, named);
}

TEST_P(MonitoredBarrierMissing, ASubgroupNamesGroupRanksAndTheirGlobalRanks) {
  std::vector<int> global;
  for (int r = 0; r < n(); ++r) global.push_back(10 + 2 * r);
  run_with_missing(mode(), n(), {1}, true, global, "Rank 1 (global rank 12)");
}

INSTANTIATE_TEST_SUITE_P(Worlds, MonitoredBarrier,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(1, 2, 3, 5)),
                         worlds_param_name);
INSTANTIATE_TEST_SUITE_P(Worlds, MonitoredBarrierMissing,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(2, 3, 5)),
                         worlds_param_name);

TEST(MonitoredBarrierArguments, ATimeoutMustNotBeNegative) {
  EXPECT_EQ(with_group_handles(
                Mode::kThreads, 2, {},
                [](const Group& g, Store&, int) {
                  const std::string what = error_of<DistInvalidArgument>([&] { monitored_barrier(g, -1ms); });
                  expect_in(what, "monitored_barrier: timeout must not be negative, got -1 ms");
                }),
            "");
}

// As gloo: with a zero timeout rank 0 waits for nobody. Rank 1 enters only
// after rank 0 has given up (the store orders them), so it is never there
// in time; it then gets rank 0's report, as a late rank does.
TEST(MonitoredBarrierArguments, AZeroTimeoutPassesOnlyTheRanksAlreadyThere) {
  EXPECT_EQ(with_group_handles(
                Mode::kThreads, 2, {},
                [](const Group& g, Store& store, int rank) {
                  if (rank == 0) {
                    const std::string what = error_of<DistTimeoutError>([&] { monitored_barrier(g, 0ms); });
                    store.set("rank 0 gave up", {1});
                    expect_in(what,
                              "monitored_barrier: Rank 0 timed out in monitoredBarrier after 0 ms: "
                              "Rank 1 failed to pass monitoredBarrier in 0 ms");
                    return;
                  }
                  store.wait({"rank 0 gave up"});
                  const std::string what = error_of<DistTimeoutError>([&] { monitored_barrier(g, 0ms); });
                  expect_in(what, "rank 0 reports: Rank 1 failed to pass monitoredBarrier in 0 ms");
                }),
            "");
}

}  // namespace
}  // namespace tdist::testing
