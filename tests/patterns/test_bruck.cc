// Simulates Bruck's all-gather on rotated per-rank buffers.

#include <gtest/gtest.h>

#include <map>
#include <utility>
#include <vector>

#include "algorithms/patterns/bruck.h"

namespace tdist::patterns {
namespace {

constexpr int kGroupSizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 31, 32, 33, 64};

static_assert(bruck_num_steps(5) == 3 && bruck_block_count(5, 0) == 1 && bruck_block_count(5, 1) == 2 &&
              bruck_block_count(5, 2) == 1);
static_assert(bruck_all_gather_step(0, 5, 2) == exchange_step(1, ChunkRange{0, 1}, 4, ChunkRange{4, 1}));

TEST(Bruck, AllGatherSimulation) {
  for (int p : kGroupSizes) {
    SCOPED_TRACE("p=" + std::to_string(p));
    // rotated[r][i] = the rank whose block sits at position i, -1 if empty.
    std::vector<std::vector<int>> rotated(static_cast<size_t>(p),
                                          std::vector<int>(static_cast<size_t>(p), -1));
    std::vector<int> received(static_cast<size_t>(p), 0);
    std::vector<std::vector<Step>> schedules;
    for (int r = 0; r < p; ++r) {
      rotated[r][0] = r;
      schedules.push_back(bruck_all_gather(r, p));
      ASSERT_EQ(static_cast<int>(schedules[r].size()), ceil_log2(p));
    }
    for (int k = 0; k < bruck_num_steps(p); ++k) {
      std::map<std::pair<int, int>, std::vector<int>> in_flight;  // (src, dst) -> blocks
      for (int r = 0; r < p; ++r) {
        const Step& s = schedules[r][k];
        ASSERT_EQ(s.send_to, rank_mod(r - (1 << k), p));
        ASSERT_EQ(s.send_chunks.first, 0);
        ASSERT_GE(s.send_chunks.count, 1);
        std::vector<int> blocks;
        for (int i = 0; i < s.send_chunks.count; ++i) {
          ASSERT_NE(rotated[r][i], -1) << "round " << k << ": rank " << r << " sends empty position " << i;
          blocks.push_back(rotated[r][i]);
        }
        ASSERT_TRUE(in_flight.emplace(std::make_pair(r, s.send_to), blocks).second);
      }
      for (int r = 0; r < p; ++r) {
        const Step& s = schedules[r][k];
        auto it = in_flight.find({s.recv_from, r});
        ASSERT_NE(it, in_flight.end())
            << "round " << k << ": rank " << r << " gets nothing from " << s.recv_from;
        ASSERT_EQ(static_cast<int>(it->second.size()), s.recv_chunks.count);
        for (int i = 0; i < s.recv_chunks.count; ++i) {
          const int pos = s.recv_chunks.first + i;
          ASSERT_LT(pos, p);
          ASSERT_EQ(rotated[r][pos], -1) << "round " << k << ": rank " << r << " overwrites position " << pos;
          ASSERT_EQ(it->second[i], bruck_block_owner(r, p, pos));
          rotated[r][pos] = it->second[i];
        }
        received[r] += s.recv_chunks.count;
        in_flight.erase(it);
      }
      ASSERT_TRUE(in_flight.empty());
    }
    for (int r = 0; r < p; ++r) {
      // The final rotation: output block j comes from position bruck_position(j).
      for (int j = 0; j < p; ++j) ASSERT_EQ(rotated[r][bruck_position(r, p, j)], j) << "rank " << r;
      EXPECT_EQ(received[r], p - 1);  // n(p-1)/p·beta: no block moves twice into a rank
    }
  }
}

}  // namespace
}  // namespace tdist::patterns
