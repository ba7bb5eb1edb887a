// The test harness itself: a rank that fails inside run_with_store is
// reported as itself, and the other ranks are not held at the closing
// barrier until the store's timeout.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>

#include "multirank.h"

namespace tdist::testing {
namespace {

class RunWithStore : public ::testing::TestWithParam<Mode> {};

TEST_P(RunWithStore, AFailingRankIsReportedAloneAndReleasesTheOthers) {
  // The store's timeout is far beyond the deadline: if the others still
  // waited for the failed rank at the closing barrier, the deadline would
  // end them (processes: reported as hung; threads: the binary aborts).
  const auto deadline = std::chrono::seconds(30);
  const auto store_timeout = std::chrono::seconds(600);
  const std::string failures = run_with_store(
      GetParam(), 3,
      [](Store& store, int rank) -> KeepAlive {
        store.set("arrived/" + std::to_string(rank), "1");
        if (rank == 1) throw std::runtime_error("the check of rank 1 failed");
        return nullptr;
      },
      deadline, store_timeout);
  // One line, rank 1's, with its error (processes add the exit code).
  EXPECT_EQ(std::count(failures.begin(), failures.end(), '\n'), 1) << failures;
  EXPECT_EQ(failures.rfind("rank 1:", 0), 0u) << failures;
  EXPECT_NE(failures.find("the check of rank 1 failed"), std::string::npos) << failures;
}

TEST_P(RunWithStore, EveryRankSucceedingReportsNothing) {
  EXPECT_EQ(run_with_store(GetParam(), 3,
                           [](Store& store, int rank) -> KeepAlive {
                             store.set("arrived/" + std::to_string(rank), "1");
                             return nullptr;
                           }),
            "");
}

INSTANTIATE_TEST_SUITE_P(Modes, RunWithStore, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& test) { return std::string(mode_name(test.param)); });

}  // namespace
}  // namespace tdist::testing
