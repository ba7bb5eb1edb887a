// The fold and the per-step arithmetic of recursive doubling and halving;
// test_schedules.cc simulates the full schedules.

#include <gtest/gtest.h>

#include <ostream>
#include <set>
#include <vector>

#include "algorithms/patterns/recursive_doubling.h"
#include "algorithms/patterns/recursive_halving.h"

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

TEST(Fold, SixRanksByHand) {
  // pof2 = 4, rem = 2: pairs (0,1) and (2,3); 4 and 5 are core ranks.
  constexpr int p = 6;
  static_assert(fold_pof2(p) == 4 && fold_num_extras(p) == 2 && fold_num_steps(p) == 1);
  const FoldRole roles[] = {FoldRole::kExtra, FoldRole::kProxy, FoldRole::kExtra,
                            FoldRole::kProxy, FoldRole::kCore,  FoldRole::kCore};
  const int vranks[] = {kNoPeer, 0, kNoPeer, 1, 2, 3};
  const int partners[] = {1, 0, 3, 2, kNoPeer, kNoPeer};
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(fold_role(r, p), roles[r]) << r;
    EXPECT_EQ(fold_virtual_rank(r, p), vranks[r]) << r;
    EXPECT_EQ(fold_partner(r, p), partners[r]) << r;
  }
  const int real[] = {1, 3, 4, 5};
  const int first[] = {0, 2, 4, 5, 6};
  for (int v = 0; v < 4; ++v) EXPECT_EQ(fold_real_rank(v, p), real[v]);
  for (int v = 0; v <= 4; ++v) EXPECT_EQ(fold_first_rank(v, p), first[v]);
  EXPECT_EQ(fold_chunks(ChunkRange{1, 2}, p, FoldLayout::kPerRank), (ChunkRange{2, 3}));
  EXPECT_EQ(fold_chunks(ChunkRange{1, 2}, p, FoldLayout::kPerVirtualRank), (ChunkRange{1, 2}));
  EXPECT_EQ(fold_in_step(0, p, ChunkRange{0, 1}, true), (send_step(1, ChunkRange{0, 1})));
  EXPECT_EQ(fold_in_step(1, p, ChunkRange{0, 1}, true), (recv_step(0, ChunkRange{0, 1}, true)));
  EXPECT_TRUE(fold_in_step(4, p, ChunkRange{0, 1}, true).idle());
  EXPECT_EQ(fold_out_step(3, p, ChunkRange{0, 1}), (send_step(2, ChunkRange{0, 1})));
}

TEST(Fold, VirtualRanksAreABijectionCoveringEveryRealRank) {
  for (int p : kGroupSizes) {
    SCOPED_TRACE("p=" + std::to_string(p));
    const int pof2 = fold_pof2(p);
    EXPECT_TRUE(is_pow2(pof2) && pof2 <= p && p < 2 * pof2);
    std::set<int> seen;
    int extras = 0;
    for (int r = 0; r < p; ++r) {
      const int v = fold_virtual_rank(r, p);
      if (v == kNoPeer) {
        ++extras;
        EXPECT_EQ(fold_role(r, p), FoldRole::kExtra);
        EXPECT_EQ(fold_role(fold_partner(r, p), p), FoldRole::kProxy);
        EXPECT_EQ(fold_partner(fold_partner(r, p), p), r);
        continue;
      }
      EXPECT_TRUE(v >= 0 && v < pof2);
      EXPECT_TRUE(seen.insert(v).second);
      EXPECT_EQ(fold_real_rank(v, p), r);
    }
    EXPECT_EQ(extras, fold_num_extras(p));
    EXPECT_EQ(static_cast<int>(seen.size()), pof2);
    // Virtual rank v stands for [first(v), first(v + 1)): itself, plus its
    // extra if it is a proxy. The ranges tile [0, p).
    EXPECT_EQ(fold_first_rank(0, p), 0);
    EXPECT_EQ(fold_first_rank(pof2, p), p);
    for (int v = 0; v < pof2; ++v) {
      const ChunkRange stands_for = fold_chunks(ChunkRange{v, 1}, p, FoldLayout::kPerRank);
      const int r = fold_real_rank(v, p);
      EXPECT_TRUE(stands_for.contains(r));
      EXPECT_EQ(stands_for.count, fold_role(r, p) == FoldRole::kProxy ? 2 : 1);
      if (stands_for.count == 2) {
        EXPECT_TRUE(stands_for.contains(fold_partner(r, p)));
      }
      EXPECT_EQ(stands_for.end(), fold_first_rank(v + 1, p));
    }
  }
}

TEST(RecursiveDoubling, PartnersArePairedAndDistinct) {
  for (int p : kGroupSizes) {
    for (int r = 0; r < p; ++r) {
      SCOPED_TRACE("p=" + std::to_string(p) + " rank=" + std::to_string(r));
      std::set<int> partners;
      for (int s = 0; s < recursive_doubling_num_core_steps(p); ++s) {
        const int q = recursive_doubling_partner(r, p, s);
        if (fold_role(r, p) == FoldRole::kExtra) {
          EXPECT_EQ(q, kNoPeer);
          continue;
        }
        ASSERT_NE(q, kNoPeer);
        EXPECT_NE(fold_role(q, p), FoldRole::kExtra);
        EXPECT_EQ(recursive_doubling_partner(q, p, s), r);
        EXPECT_TRUE(partners.insert(q).second);
        EXPECT_EQ(recursive_halving_partner(r, p, recursive_halving_num_core_steps(p) - 1 - s), q);
      }
    }
  }
  EXPECT_TRUE(recursive_doubling_all_reduce(0, 1).empty());
  EXPECT_TRUE(recursive_doubling_all_gather(0, 1).empty());
  EXPECT_TRUE(recursive_halving_reduce_scatter(0, 1).empty());
  EXPECT_TRUE(rabenseifner_all_reduce(0, 1).empty());
}

TEST(RecursiveHalving, EightRanksByHand) {
  // Virtual rank 5 = 0b101: partners 1, 7, 4; keeps [4, 8), [4, 6), [5, 6).
  const int partners[] = {1, 7, 4};
  const ChunkRange kept[] = {{4, 4}, {4, 2}, {5, 1}};
  const ChunkRange sent[] = {{0, 4}, {6, 2}, {4, 1}};
  for (int s = 0; s < 3; ++s) {
    const Step step = recursive_halving_core_step(5, 8, s, FoldLayout::kPerRank);
    EXPECT_EQ(step.send_to, partners[s]);
    EXPECT_EQ(step.recv_from, partners[s]);
    EXPECT_EQ(step.recv_chunks, kept[s]);
    EXPECT_EQ(step.send_chunks, sent[s]);
    EXPECT_TRUE(step.reduce);
  }
  // The following doubling all-gather retraces the halves in reverse.
  const ChunkRange gathered[] = {{4, 1}, {6, 2}, {0, 4}};
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(recursive_doubling_all_gather_core_step(5, 8, s, FoldLayout::kPerRank).recv_chunks,
              gathered[s]);
  }
}

TEST(RecursiveHalving, KeptRangesHalveDownToTheOwnedChunks) {
  for (FoldLayout layout : {FoldLayout::kPerRank, FoldLayout::kPerVirtualRank}) {
    for (int p : kGroupSizes) {
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE("p=" + std::to_string(p) + " rank=" + std::to_string(r));
        if (fold_role(r, p) == FoldRole::kExtra) continue;
        ChunkRange held{0, fold_num_chunks(p, layout)};
        for (int s = 0; s < recursive_halving_num_core_steps(p); ++s) {
          const Step step = recursive_halving_core_step(r, p, s, layout);
          // Kept and sent halves are disjoint, adjacent and tile what was held.
          const ChunkRange lo =
              step.recv_chunks.first < step.send_chunks.first ? step.recv_chunks : step.send_chunks;
          const ChunkRange hi =
              step.recv_chunks.first < step.send_chunks.first ? step.send_chunks : step.recv_chunks;
          EXPECT_EQ(lo.first, held.first);
          EXPECT_EQ(lo.end(), hi.first);
          EXPECT_EQ(hi.end(), held.end());
          EXPECT_GE(step.recv_chunks.count, 1);
          EXPECT_GE(step.send_chunks.count, 1);
          held = step.recv_chunks;
        }
        EXPECT_EQ(held, recursive_halving_owned_chunks(r, p, layout));
      }
    }
  }
}

}  // namespace
}  // namespace tdist::patterns
