// How tdistrun --bind-to auto shares a node's CPUs among its ranks
// (detail::share_cpus): equal runs, whole cores where the cores divide.

#include <gtest/gtest.h>

#include <vector>

#include "common/cpus.h"

namespace tdist::detail {
namespace {

using Shares = std::vector<std::vector<int>>;

TEST(ShareCpus, OneCpuPerRankWhenTheyAreEqual) {
  EXPECT_EQ(share_cpus({0, 1}, {0, 1}, 2), (Shares{{0}, {1}}));
  EXPECT_EQ(share_cpus({3}, {3}, 1), (Shares{{3}}));
}

TEST(ShareCpus, RanksGetEqualRunsTheFirstOnesShorterWhenTheyDoNotDivide) {
  EXPECT_EQ(share_cpus({0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3, 4, 5, 6, 7}, 2),
            (Shares{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(share_cpus({0, 1, 2}, {0, 1, 2}, 2), (Shares{{0}, {1, 2}}));
  EXPECT_EQ(share_cpus({0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, 3), (Shares{{0}, {1, 2}, {3, 4}}));
}

// Hosts that number a core's second threads after every core's first
// (Intel: CPU i and i + 4 share a core) must not hand one core's two
// threads to two ranks; the shares then are not contiguous numbers.
TEST(ShareCpus, HardwareThreadsOfOneCoreGoToOneRank) {
  const std::vector<int> cpus{0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<int> core_of{0, 1, 2, 3, 0, 1, 2, 3};
  EXPECT_EQ(share_cpus(cpus, core_of, 2), (Shares{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(share_cpus(cpus, core_of, 4), (Shares{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // Threads numbered next to each other (0 and 1 share a core) stay together too.
  EXPECT_EQ(share_cpus(cpus, {0, 0, 2, 2, 4, 4, 6, 6}, 2), (Shares{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

TEST(ShareCpus, EveryAllowedCpuIsGivenOutOnce) {
  // A cpuset with holes (taskset -c 2,5,9-11).
  const std::vector<int> cpus{2, 5, 9, 10, 11};
  const Shares shares = share_cpus(cpus, cpus, 2);
  EXPECT_EQ(shares, (Shares{{2, 5}, {9, 10, 11}}));
}

TEST(ShareCpus, TheCoreOfACpuTheKernelDoesNotKnowIsItself) {
  EXPECT_EQ(core_of_cpu(1 << 20), 1 << 20);
}

}  // namespace
}  // namespace tdist::detail
