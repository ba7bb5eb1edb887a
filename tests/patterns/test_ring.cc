#include <gtest/gtest.h>

#include <ostream>
#include <vector>

#include "algorithms/patterns/ring.h"

namespace tdist::patterns {

// Readable gtest output (found by argument-dependent lookup).
[[maybe_unused]] static void PrintTo(const ChunkRange& c, std::ostream* os) {
  *os << "[" << c.first << ", " << c.end() << ")";
}
[[maybe_unused]] static void PrintTo(const Step& s, std::ostream* os) {
  *os << "{send_to=" << s.send_to << " [" << s.send_chunks.first << ", " << s.send_chunks.end()
      << ") recv_from=" << s.recv_from << " [" << s.recv_chunks.first << ", " << s.recv_chunks.end() << ")"
      << (s.reduce ? " reduce}" : "}");
}

namespace {

constexpr int kGroupSizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 31, 32, 33, 64};

static_assert(ring_next(3, 4) == 0 && ring_prev(0, 4) == 3 && ring_next(0, 1) == 0);
static_assert(ring_reduce_scatter_step(0, 4, 0) ==
              exchange_step(1, ChunkRange{3, 1}, 3, ChunkRange{2, 1}, true));

TEST(Ring, FourRanksByHand) {
  // Rank 1 of 4: reduce-scatter sends 0, 3, 2 and receives 3, 2, 1 (ending
  // with its own chunk 1); all-gather sends 1, 0, 3 and receives 0, 3, 2.
  const std::vector<Step> steps = ring_all_reduce(1, 4);
  ASSERT_EQ(steps.size(), 6U);
  const int sent[] = {0, 3, 2, 1, 0, 3};
  const int received[] = {3, 2, 1, 0, 3, 2};
  for (size_t s = 0; s < steps.size(); ++s) {
    EXPECT_EQ(steps[s].send_to, 2);
    EXPECT_EQ(steps[s].recv_from, 0);
    EXPECT_EQ(steps[s].send_chunks, (ChunkRange{sent[s], 1})) << s;
    EXPECT_EQ(steps[s].recv_chunks, (ChunkRange{received[s], 1})) << s;
    EXPECT_EQ(steps[s].reduce, s < 3) << s;
  }
}

TEST(Ring, EachPhaseTouchesEveryOtherChunkOnce) {
  for (int p : kGroupSizes) {
    for (int r = 0; r < p; ++r) {
      SCOPED_TRACE("p=" + std::to_string(p) + " rank=" + std::to_string(r));
      std::vector<int> rs_recv(static_cast<size_t>(p), 0), ag_recv(static_cast<size_t>(p), 0);
      for (const Step& s : ring_reduce_scatter(r, p)) ++rs_recv[s.recv_chunks.first];
      for (const Step& s : ring_all_gather(r, p)) ++ag_recv[s.recv_chunks.first];
      for (int c = 0; c < p; ++c) {
        // Reduce-scatter reduces into every chunk but r - 1's, which it only
        // sends (it starts that chunk's journey); its own chunk r comes last.
        EXPECT_EQ(rs_recv[c], c == rank_mod(r - 1, p) ? 0 : 1) << "chunk " << c;
        EXPECT_EQ(ag_recv[c], c == r ? 0 : 1) << "chunk " << c;
      }
      if (p > 1) {
        EXPECT_EQ(ring_reduce_scatter(r, p).back().recv_chunks.first, ring_owned_chunk(r, p));
        EXPECT_EQ(ring_all_gather(r, p).front().send_chunks.first, ring_owned_chunk(r, p));
      }
      EXPECT_EQ(static_cast<int>(ring_all_reduce(r, p).size()), ring_all_reduce_num_steps(p));
    }
  }
  EXPECT_TRUE(ring_all_reduce(0, 1).empty());
}

}  // namespace
}  // namespace tdist::patterns
