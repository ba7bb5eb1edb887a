// Simulates the dissemination barrier: who has heard (transitively) from whom.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "algorithms/patterns/dissemination.h"

namespace tdist::patterns {
namespace {

constexpr int kGroupSizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 31, 32, 33, 64};

TEST(Dissemination, EveryRankHearsFromEveryRankInCeilLog2Steps) {
  for (int p : kGroupSizes) {
    SCOPED_TRACE("p=" + std::to_string(p));
    // heard[r][s]: rank r knows that rank s has entered the barrier.
    std::vector<std::vector<bool>> heard(static_cast<size_t>(p),
                                         std::vector<bool>(static_cast<size_t>(p), false));
    std::vector<std::vector<Step>> schedules;
    for (int r = 0; r < p; ++r) {
      heard[r][r] = true;
      schedules.push_back(dissemination_barrier(r, p));
      ASSERT_EQ(static_cast<int>(schedules[r].size()), ceil_log2(p));
    }
    for (int k = 0; k < dissemination_num_steps(p); ++k) {
      std::map<std::pair<int, int>, std::vector<bool>> in_flight;  // a signal carries what its sender knows
      for (int r = 0; r < p; ++r) {
        const Step& s = schedules[r][k];
        ASSERT_EQ(s.send_to, (r + (1 << k)) % p);
        ASSERT_NE(s.send_to, r);
        ASSERT_TRUE(s.send_chunks.empty() && s.recv_chunks.empty());
        ASSERT_TRUE(in_flight.emplace(std::make_pair(r, s.send_to), heard[r]).second);
      }
      for (int r = 0; r < p; ++r) {
        const Step& s = schedules[r][k];
        auto it = in_flight.find({s.recv_from, r});
        ASSERT_NE(it, in_flight.end()) << "step " << k << ": rank " << r << " waits for " << s.recv_from;
        for (int x = 0; x < p; ++x) heard[r][x] = heard[r][x] || it->second[x];
        in_flight.erase(it);
      }
      ASSERT_TRUE(in_flight.empty());
      // Knowledge exactly doubles each step until it covers everyone, so no
      // schedule with fewer steps could be complete.
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(std::count(heard[r].begin(), heard[r].end(), true), std::min(2 << k, p)) << "rank " << r;
      }
    }
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(std::count(heard[r].begin(), heard[r].end(), true), p) << "rank " << r << " leaves too early";
    }
  }
}

}  // namespace
}  // namespace tdist::patterns
