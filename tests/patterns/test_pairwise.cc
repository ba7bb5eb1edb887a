// Simulates pairwise-exchange all-to-all.

#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <vector>

#include "algorithms/patterns/pairwise.h"

namespace tdist::patterns {
namespace {

constexpr int kGroupSizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 31, 32, 33, 64};

static_assert(pairwise_step(1, 4, 0) == exchange_step(2, ChunkRange{2, 1}, 0, ChunkRange{0, 1}));
static_assert(pairwise_step(1, 4, 2) == exchange_step(0, ChunkRange{0, 1}, 2, ChunkRange{2, 1}));

TEST(Pairwise, EveryBlockDeliveredExactlyOnce) {
  for (int p : kGroupSizes) {
    SCOPED_TRACE("p=" + std::to_string(p));
    std::vector<std::vector<int>> delivered(static_cast<size_t>(p),
                                            std::vector<int>(static_cast<size_t>(p), 0));
    std::vector<std::vector<Step>> schedules;
    for (int r = 0; r < p; ++r) {
      schedules.push_back(pairwise_all_to_all(r, p));
      ASSERT_EQ(static_cast<int>(schedules[r].size()), p - 1);
    }
    for (int k = 0; k < pairwise_num_steps(p); ++k) {
      std::map<std::pair<int, int>, int> in_flight;  // (src, dst) -> the block's intended destination
      for (int r = 0; r < p; ++r) {
        const Step& s = schedules[r][k];
        ASSERT_EQ(s.send_to, (r + k + 1) % p);
        ASSERT_NE(s.send_to, r);
        ASSERT_EQ(s.send_chunks.count, 1);
        ASSERT_TRUE(in_flight.emplace(std::make_pair(r, s.send_to), s.send_chunks.first).second);
      }
      for (int r = 0; r < p; ++r) {
        const Step& s = schedules[r][k];
        ASSERT_EQ(s.recv_from, rank_mod(r - k - 1, p));
        auto it = in_flight.find({s.recv_from, r});
        ASSERT_NE(it, in_flight.end())
            << "step " << k << ": rank " << r << " gets nothing from " << s.recv_from;
        ASSERT_EQ(it->second, r) << "step " << k << ": rank " << r << " receives a block meant for "
                                 << it->second;
        ASSERT_EQ(s.recv_chunks, (ChunkRange{s.recv_from, 1}));
        ++delivered[s.recv_from][r];
        in_flight.erase(it);
      }
      ASSERT_TRUE(in_flight.empty());  // every step is a permutation
    }
    for (int src = 0; src < p; ++src) {
      for (int dst = 0; dst < p; ++dst)
        EXPECT_EQ(delivered[src][dst], src == dst ? 0 : 1) << src << "->" << dst;
    }
  }
}

}  // namespace
}  // namespace tdist::patterns
