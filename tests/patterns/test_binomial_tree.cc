// Tree structure of binomial_tree.h; test_schedules.cc simulates broadcast,
// reduce, gather and scatter over it.

#include <gtest/gtest.h>

#include <ostream>
#include <vector>

#include "algorithms/patterns/binomial_tree.h"

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
[[maybe_unused]] static void PrintTo(const TreeChild& c, std::ostream* os) {
  *os << "{rank=" << c.rank << " subtree=[" << c.subtree.first << ", " << c.subtree.end()
      << ") round=" << c.broadcast_round << "}";
}

namespace {

constexpr int kGroupSizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 31, 32, 33, 64};

TEST(BinomialTree, SevenRanksByHand) {
  constexpr int p = 7;
  const int parents[] = {kNoPeer, 0, 0, 2, 0, 4, 4};
  for (int r = 0; r < p; ++r) EXPECT_EQ(binomial_parent(r, 0, p), parents[r]) << r;
  EXPECT_EQ(binomial_children(0, 0, p),
            (std::vector<TreeChild>{{4, {4, 3}, 0}, {2, {2, 2}, 1}, {1, {1, 1}, 2}}));
  EXPECT_EQ(binomial_children(4, 0, p), (std::vector<TreeChild>{{6, {6, 1}, 1}, {5, {5, 1}, 2}}));
  EXPECT_TRUE(binomial_children(6, 0, p).empty());
  EXPECT_EQ(binomial_subtree(4, 0, p), (ChunkRange{4, 3}));
  EXPECT_EQ(binomial_subtree(0, 0, p), (ChunkRange{0, 7}));
  // Rooted at 5 the same shape is shifted: relative 4 is real rank 2.
  EXPECT_EQ(binomial_parent(2, 5, p), 5);
  EXPECT_EQ(binomial_parent(4, 5, p), 2);  // relative 6 -> 4
  EXPECT_EQ(binomial_subtree(2, 5, p), (ChunkRange{4, 3}));
}

TEST(BinomialTree, ParentsChildrenAndSubtreesAgreeForEveryRoot) {
  for (int p : kGroupSizes) {
    for (int root = 0; root < p; ++root) {
      SCOPED_TRACE("p=" + std::to_string(p) + " root=" + std::to_string(root));
      std::vector<int> times_a_child(static_cast<size_t>(p), 0);
      for (int r = 0; r < p; ++r) {
        const int rel = relative_rank(r, root, p);
        EXPECT_EQ(absolute_rank(rel, root, p), r);
        const ChunkRange subtree = binomial_subtree(r, root, p);
        EXPECT_EQ(subtree.first, rel);
        EXPECT_LE(subtree.end(), p);
        // Children, largest subtree first, tile the subtree above rel from
        // the top down, and are sent to in increasing rounds.
        int top = subtree.end();
        int last_round = binomial_broadcast_round(r, root, p);
        for (const TreeChild& child : binomial_children(r, root, p)) {
          EXPECT_EQ(binomial_parent(child.rank, root, p), r);
          EXPECT_EQ(child.subtree, binomial_subtree(child.rank, root, p));
          EXPECT_EQ(child.subtree.end(), top);
          top = child.subtree.first;
          EXPECT_GT(child.broadcast_round, last_round);
          EXPECT_EQ(child.broadcast_round, binomial_broadcast_round(child.rank, root, p));
          EXPECT_LT(child.broadcast_round, binomial_num_rounds(p));
          last_round = child.broadcast_round;
          ++times_a_child[child.rank];
        }
        EXPECT_EQ(top, rel + 1);
        // Depth is at most the number of rounds.
        int depth = 0;
        for (int a = r; a != root; a = binomial_parent(a, root, p))
          ASSERT_LE(++depth, binomial_num_rounds(p));
      }
      for (int r = 0; r < p; ++r) EXPECT_EQ(times_a_child[r], r == root ? 0 : 1) << r;
      EXPECT_EQ(binomial_parent(root, root, p), kNoPeer);
      EXPECT_EQ(binomial_subtree(root, root, p), (ChunkRange{0, p}));
    }
  }
}

TEST(BinomialTree, SchedulesFollowTheTree) {
  for (int p : kGroupSizes) {
    for (int root = 0; root < p; ++root) {
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("p=" + std::to_string(p) + " root=" + std::to_string(root) +
                     " rank=" + std::to_string(r));
        const int rounds = binomial_num_rounds(p);
        std::vector<Step> down(static_cast<size_t>(rounds)), up(static_cast<size_t>(rounds));
        std::vector<Step> scatter_down(down), gather_up(up);
        const int parent = binomial_parent(r, root, p);
        const ChunkRange own = binomial_subtree(r, root, p);
        if (parent != kNoPeer) {
          const int t = binomial_broadcast_round(r, root, p);
          down[t] = recv_step(parent, ChunkRange{0, 1});
          scatter_down[t] = recv_step(parent, own);
          up[rounds - 1 - t] = send_step(parent, ChunkRange{0, 1});
          gather_up[rounds - 1 - t] = send_step(parent, own);
        }
        for (const TreeChild& c : binomial_children(r, root, p)) {
          const int t = c.broadcast_round;
          down[t] = send_step(c.rank, ChunkRange{0, 1});
          scatter_down[t] = send_step(c.rank, c.subtree);
          up[rounds - 1 - t] = recv_step(c.rank, ChunkRange{0, 1}, true);
          gather_up[rounds - 1 - t] = recv_step(c.rank, c.subtree);
        }
        EXPECT_EQ(binomial_broadcast(r, root, p), down);
        EXPECT_EQ(binomial_reduce(r, root, p), up);
        EXPECT_EQ(binomial_scatter(r, root, p), scatter_down);
        EXPECT_EQ(binomial_gather(r, root, p), gather_up);
      }
    }
  }
}

TEST(BinomialTree, RelativeChunkRangesMapToAtMostTwoRealRanges) {
  for (int p : kGroupSizes) {
    for (int root = 0; root < p; ++root) {
      for (int first = 0; first <= p; ++first) {
        for (int n = 0; first + n <= p; ++n) {
          const auto parts = binomial_absolute_chunks(ChunkRange{first, n}, root, p);
          std::vector<int> got, want;
          for (const ChunkRange& part : parts) {
            EXPECT_TRUE(part.first >= 0 && part.end() <= p);
            for (int c = part.first; c < part.end(); ++c) got.push_back(c);
          }
          for (int i = first; i < first + n; ++i) want.push_back(absolute_rank(i, root, p));
          ASSERT_EQ(got, want) << "p=" << p << " root=" << root << " [" << first << ", " << first + n << ")";
        }
      }
    }
  }
}

}  // namespace
}  // namespace tdist::patterns
