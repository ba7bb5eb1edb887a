// Simulates the Step schedules of ring, recursive doubling, recursive
// halving / Rabenseifner and binomial trees on p simulated ranks and checks
// the final state exactly. A simulated chunk records how many times each
// rank's contribution was folded into it, so a double-counted or missing
// contribution fails, not just a wrong sum.

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/patterns/binomial_tree.h"
#include "algorithms/patterns/recursive_doubling.h"
#include "algorithms/patterns/recursive_halving.h"
#include "algorithms/patterns/ring.h"

namespace tdist::patterns {
namespace {

constexpr int kGroupSizes[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 31, 32, 33, 64};

// contributions[s] = how often rank s's data is folded into a chunk; all zero
// means the rank does not hold the chunk.
using Contributions = std::vector<int>;

Contributions none(int p) {
  return Contributions(static_cast<size_t>(p), 0);
}
Contributions only(int p, int source) {
  Contributions c = none(p);
  c[static_cast<size_t>(source)] = 1;
  return c;
}
Contributions everyone(int p) {
  return Contributions(static_cast<size_t>(p), 1);
}

bool held(const Contributions& c) {
  for (int n : c) {
    if (n != 0) return true;
  }
  return false;
}

std::string describe(const Contributions& c) {
  std::string out = "{";
  for (size_t s = 0; s < c.size(); ++s) {
    if (c[s] == 0) continue;
    if (out.size() > 1) out += ",";
    out += std::to_string(s);
    if (c[s] != 1) out += "x" + std::to_string(c[s]);
  }
  return out + "}";
}

using Schedules = std::vector<std::vector<Step>>;

Schedules schedules_of(int p, const std::function<std::vector<Step>(int)>& schedule) {
  Schedules out;
  for (int r = 0; r < p; ++r) out.push_back(schedule(r));
  return out;
}

struct World {
  int p = 0;
  int num_chunks = 0;
  std::vector<std::vector<Contributions>> chunks;  // [rank][chunk]
  int rounds = 0;
  std::vector<int> chunks_sent;      // per rank, over the whole run
  std::vector<int> chunks_received;  // per rank, over the whole run
};

World make_world(int p, int num_chunks, const std::function<Contributions(int, int)>& initial) {
  World w;
  w.p = p;
  w.num_chunks = num_chunks;
  w.chunks.resize(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    for (int c = 0; c < num_chunks; ++c) w.chunks[r].push_back(initial(r, c));
  }
  w.chunks_sent.assign(static_cast<size_t>(p), 0);
  w.chunks_received.assign(static_cast<size_t>(p), 0);
  return w;
}

struct Message {
  ChunkRange chunks;
  std::vector<Contributions> payload;
};

// Runs the schedules round by round: all sends of a round are collected
// (snapshotting the sender's chunks) before any is delivered. Fails on a
// malformed step, a chunk sent by a rank that does not hold it, a receive
// with no matching send, a send nobody receives, or mismatched chunk ranges.
void run(World& world, const Schedules& schedules) {
  const int p = world.p;
  ASSERT_EQ(static_cast<int>(schedules.size()), p);
  const size_t rounds = schedules[0].size();
  for (int r = 0; r < p; ++r) ASSERT_EQ(schedules[r].size(), rounds) << "rank " << r << "'s schedule length";
  world.rounds = static_cast<int>(rounds);
  for (size_t k = 0; k < rounds; ++k) {
    std::map<std::pair<int, int>, Message> in_flight;  // (src, dst)
    for (int r = 0; r < p; ++r) {
      const Step& step = schedules[r][k];
      if (!step.sends()) continue;
      const ChunkRange range = step.send_chunks;
      ASSERT_TRUE(step.send_to >= 0 && step.send_to < p && step.send_to != r)
          << "round " << k << ": rank " << r << " sends to " << step.send_to;
      ASSERT_TRUE(range.count >= 1 && range.first >= 0 && range.end() <= world.num_chunks)
          << "round " << k << ": rank " << r << " sends chunks [" << range.first << ", " << range.end()
          << ")";
      Message m{range, {}};
      for (int c = range.first; c < range.end(); ++c) {
        ASSERT_TRUE(held(world.chunks[r][c]))
            << "round " << k << ": rank " << r << " sends chunk " << c << " that it does not hold";
        m.payload.push_back(world.chunks[r][c]);
      }
      world.chunks_sent[r] += range.count;
      in_flight.emplace(std::make_pair(r, step.send_to), std::move(m));
    }
    for (int r = 0; r < p; ++r) {
      const Step& step = schedules[r][k];
      if (!step.receives()) continue;
      ASSERT_TRUE(step.recv_from >= 0 && step.recv_from < p && step.recv_from != r)
          << "round " << k << ": rank " << r << " receives from " << step.recv_from;
      auto it = in_flight.find({step.recv_from, r});
      ASSERT_NE(it, in_flight.end()) << "round " << k << ": rank " << r << " waits for rank "
                                     << step.recv_from << ", which sends it nothing";
      const Message& m = it->second;
      ASSERT_EQ(m.chunks, step.recv_chunks)
          << "round " << k << ": rank " << r << " expects chunks [" << step.recv_chunks.first << ", "
          << step.recv_chunks.end() << ") from rank " << step.recv_from << ", which sends [" << m.chunks.first
          << ", " << m.chunks.end() << ")";
      for (int i = 0; i < m.chunks.count; ++i) {
        Contributions& local = world.chunks[r][m.chunks.first + i];
        if (step.reduce) {
          for (int s = 0; s < p; ++s) local[s] += m.payload[i][s];
        } else {
          local = m.payload[i];
        }
      }
      world.chunks_received[r] += m.chunks.count;
      in_flight.erase(it);
    }
    for (const auto& [route, m] : in_flight) {
      ADD_FAILURE() << "round " << k << ": rank " << route.first << " sends to rank " << route.second
                    << ", which does not receive from it";
    }
  }
}

// "" if rank r's chunk c equals want, else a description of the first
// difference (so a failing p reports one line, not thousands).
std::string check(const World& w, int r, int c, const Contributions& want) {
  const Contributions& got = w.chunks[r][c];
  if (got == want) return "";
  return "rank " + std::to_string(r) + " chunk " + std::to_string(c) + ": has " + describe(got) + ", want " +
         describe(want);
}

// "" if every chunk of every rank holds every contribution exactly once.
std::string check_all_reduced(const World& w) {
  for (int r = 0; r < w.p; ++r) {
    for (int c = 0; c < w.num_chunks; ++c) {
      std::string e = check(w, r, c, everyone(w.p));
      if (!e.empty()) return e;
    }
  }
  return "";
}

// "" if every rank holds chunk c as exactly rank c's block.
std::string check_all_gathered(const World& w) {
  for (int r = 0; r < w.p; ++r) {
    for (int c = 0; c < w.num_chunks; ++c) {
      std::string e = check(w, r, c, only(w.p, c));
      if (!e.empty()) return e;
    }
  }
  return "";
}

// "" if rank r holds chunk r with every contribution exactly once.
std::string check_reduce_scattered(const World& w) {
  for (int r = 0; r < w.p; ++r) {
    std::string e = check(w, r, r, everyone(w.p));
    if (!e.empty()) return e;
  }
  return "";
}

World all_reduce_input(int p, int num_chunks) {
  return make_world(p, num_chunks, [p](int r, int) { return only(p, r); });
}

World all_gather_input(int p) {
  return make_world(p, p, [p](int r, int c) { return c == r ? only(p, r) : none(p); });
}

// ---------------------------------------------------------------------------
// The simulator itself must catch broken schedules
// ---------------------------------------------------------------------------

void run_ring_with_unmatched_receive() {
  const int p = 4;
  World w = all_reduce_input(p, p);
  Schedules s = schedules_of(p, [p](int r) { return ring_all_reduce(r, p); });
  s[2][1].recv_from = 0;  // rank 0 sends to 1, not to 2
  run(w, s);
}

void run_ring_with_mismatched_chunks() {
  const int p = 5;
  World w = all_reduce_input(p, p);
  Schedules s = schedules_of(p, [p](int r) { return ring_all_reduce(r, p); });
  s[3][2].recv_chunks.first = (s[3][2].recv_chunks.first + 1) % p;
  run(w, s);
}

void run_gather_sending_unheld_chunk() {
  const int p = 3;
  World w = make_world(p, p, [p](int r, int c) { return c == r ? only(p, r) : none(p); });
  Schedules s = schedules_of(p, [p](int r) { return binomial_gather(r, 0, p); });
  s[1][0].send_chunks = {0, 2};
  s[0][0].recv_chunks = {0, 2};
  run(w, s);
}

TEST(Simulator, CatchesBrokenSchedules) {
  EXPECT_FATAL_FAILURE(run_ring_with_unmatched_receive(), "which sends it nothing");
  EXPECT_FATAL_FAILURE(run_ring_with_mismatched_chunks(), "expects chunks");
  EXPECT_FATAL_FAILURE(run_gather_sending_unheld_chunk(), "that it does not hold");

  const int p = 6;
  // Reducing in the all-gather phase double-counts.
  World doubled = all_reduce_input(p, p);
  Schedules s = schedules_of(p, [p](int r) { return ring_all_reduce(r, p); });
  for (auto& steps : s) {
    for (size_t k = static_cast<size_t>(p - 1); k < steps.size(); ++k) steps[k].reduce = true;
  }
  run(doubled, s);
  EXPECT_NE(check_all_reduced(doubled).find("x2"), std::string::npos) << check_all_reduced(doubled);

  // Stopping one round early leaves a chunk incomplete somewhere.
  World short_run = all_reduce_input(p, p);
  s = schedules_of(p, [p](int r) { return ring_all_reduce(r, p); });
  for (auto& steps : s) steps.pop_back();
  run(short_run, s);
  EXPECT_NE(check_all_reduced(short_run), "");
}

// ---------------------------------------------------------------------------
// Ring
// ---------------------------------------------------------------------------

TEST(RingSimulation, AllReduce) {
  for (int p : kGroupSizes) {
    SCOPED_TRACE("p=" + std::to_string(p));
    World w = all_reduce_input(p, ring_num_chunks(p));
    ASSERT_NO_FATAL_FAILURE(run(w, schedules_of(p, [p](int r) { return ring_all_reduce(r, p); })));
    EXPECT_EQ(check_all_reduced(w), "");
    EXPECT_EQ(w.rounds, 2 * (p - 1));
    EXPECT_EQ(w.rounds, ring_all_reduce_num_steps(p));
    for (int r = 0; r < p; ++r) {
      // 2(p-1) messages of n/p each: the 2n(p-1)/p·beta of the cost model.
      EXPECT_EQ(w.chunks_sent[r], 2 * (p - 1));
      EXPECT_EQ(w.chunks_received[r], 2 * (p - 1));
    }
  }
}

TEST(RingSimulation, ReduceScatterLeavesRankRWithChunkR) {
  for (int p : kGroupSizes) {
    SCOPED_TRACE("p=" + std::to_string(p));
    World w = all_reduce_input(p, ring_num_chunks(p));
    ASSERT_NO_FATAL_FAILURE(run(w, schedules_of(p, [p](int r) { return ring_reduce_scatter(r, p); })));
    EXPECT_EQ(check_reduce_scattered(w), "");
    for (int r = 0; r < p; ++r) EXPECT_EQ(ring_owned_chunk(r, p), r);
    EXPECT_EQ(w.rounds, p - 1);
  }
}

TEST(RingSimulation, AllGather) {
  for (int p : kGroupSizes) {
    SCOPED_TRACE("p=" + std::to_string(p));
    World w = all_gather_input(p);
    ASSERT_NO_FATAL_FAILURE(run(w, schedules_of(p, [p](int r) { return ring_all_gather(r, p); })));
    EXPECT_EQ(check_all_gathered(w), "");
    EXPECT_EQ(w.rounds, p - 1);
    for (int r = 0; r < p; ++r) EXPECT_EQ(w.chunks_received[r], p - 1);
  }
}

// ---------------------------------------------------------------------------
// Recursive doubling
// ---------------------------------------------------------------------------

TEST(RecursiveDoublingSimulation, AllReduce) {
  for (int p : kGroupSizes) {
    SCOPED_TRACE("p=" + std::to_string(p));
    World w = all_reduce_input(p, 1);
    ASSERT_NO_FATAL_FAILURE(
        run(w, schedules_of(p, [p](int r) { return recursive_doubling_all_reduce(r, p); })));
    EXPECT_EQ(check_all_reduced(w), "");
    // lg p rounds for a power of two; otherwise floor(lg p) core rounds plus
    // a fold round on each side.
    EXPECT_EQ(w.rounds, is_pow2(p) ? ceil_log2(p) : floor_log2(p) + 2);
    EXPECT_EQ(w.rounds, recursive_doubling_num_steps(p));
    for (int r = 0; r < p; ++r) {
      const FoldRole role = fold_role(r, p);
      const int want = role == FoldRole::kExtra   ? 1
                       : role == FoldRole::kProxy ? floor_log2(p) + 1
                                                  : floor_log2(p);
      EXPECT_EQ(w.chunks_sent[r], want) << "rank " << r;  // whole buffers
    }
  }
}

TEST(RecursiveDoublingSimulation, AllGather) {
  for (int p : kGroupSizes) {
    SCOPED_TRACE("p=" + std::to_string(p));
    World w = all_gather_input(p);
    ASSERT_NO_FATAL_FAILURE(
        run(w, schedules_of(p, [p](int r) { return recursive_doubling_all_gather(r, p); })));
    EXPECT_EQ(check_all_gathered(w), "");
    EXPECT_EQ(w.rounds, recursive_doubling_num_steps(p));
    if (is_pow2(p)) {
      EXPECT_EQ(w.rounds, ceil_log2(p));
      for (int r = 0; r < p; ++r) EXPECT_EQ(w.chunks_received[r], p - 1);  // n(p-1)/p·beta
    }
  }
}

// ---------------------------------------------------------------------------
// Recursive halving and Rabenseifner
// ---------------------------------------------------------------------------

TEST(RecursiveHalvingSimulation, ReduceScatterLeavesRankRWithChunkR) {
  for (int p : kGroupSizes) {
    SCOPED_TRACE("p=" + std::to_string(p));
    World w = all_reduce_input(p, p);
    ASSERT_NO_FATAL_FAILURE(
        run(w, schedules_of(p, [p](int r) { return recursive_halving_reduce_scatter(r, p); })));
    EXPECT_EQ(check_reduce_scattered(w), "");
    EXPECT_EQ(w.rounds, recursive_halving_reduce_scatter_num_steps(p));
    EXPECT_EQ(w.rounds, floor_log2(p) + (is_pow2(p) ? 0 : 2));
    if (is_pow2(p)) {
      for (int r = 0; r < p; ++r) EXPECT_EQ(w.chunks_sent[r], p - 1);  // n(p-1)/p·(beta+gamma)
    }
  }
}

TEST(RecursiveHalvingSimulation, CoreLeavesOwnedChunksReduced) {
  for (FoldLayout layout : {FoldLayout::kPerRank, FoldLayout::kPerVirtualRank}) {
    for (int p : kGroupSizes) {
      SCOPED_TRACE("p=" + std::to_string(p) + " layout=" + std::to_string(static_cast<int>(layout)));
      const int n = fold_num_chunks(p, layout);
      World w = all_reduce_input(p, n);
      // Fold-in plus the halving core: the first half of Rabenseifner.
      const int steps = fold_num_steps(p) + recursive_halving_num_core_steps(p);
      ASSERT_NO_FATAL_FAILURE(run(w, schedules_of(p, [&](int r) {
                                    std::vector<Step> s = rabenseifner_all_reduce(r, p, layout);
                                    s.resize(static_cast<size_t>(steps));
                                    return s;
                                  })));
      std::vector<int> owners(static_cast<size_t>(n), 0);
      for (int r = 0; r < p; ++r) {
        const ChunkRange owned = recursive_halving_owned_chunks(r, p, layout);
        EXPECT_EQ(owned.empty(), fold_role(r, p) == FoldRole::kExtra) << "rank " << r;
        for (int c = owned.first; c < owned.end(); ++c) {
          EXPECT_EQ(check(w, r, c, everyone(p)), "");
          ++owners[c];
        }
      }
      for (int c = 0; c < n; ++c) EXPECT_EQ(owners[c], 1) << "chunk " << c << " owners";
    }
  }
}

TEST(RabenseifnerSimulation, AllReduceBothLayouts) {
  for (FoldLayout layout : {FoldLayout::kPerVirtualRank, FoldLayout::kPerRank}) {
    for (int p : kGroupSizes) {
      SCOPED_TRACE("p=" + std::to_string(p) + " layout=" + std::to_string(static_cast<int>(layout)));
      World w = all_reduce_input(p, fold_num_chunks(p, layout));
      ASSERT_NO_FATAL_FAILURE(
          run(w, schedules_of(p, [&](int r) { return rabenseifner_all_reduce(r, p, layout); })));
      EXPECT_EQ(check_all_reduced(w), "");
      EXPECT_EQ(w.rounds, rabenseifner_all_reduce_num_steps(p));
      EXPECT_EQ(w.rounds, 2 * floor_log2(p) + (is_pow2(p) ? 0 : 2));
      if (layout != FoldLayout::kPerVirtualRank) continue;
      // Each core rank moves 2(pof2-1) shares of n/pof2: 2n(p-1)/p·beta for
      // a power of two. The fold moves the whole buffer once each way.
      const int pof2 = fold_pof2(p);
      for (int r = 0; r < p; ++r) {
        const FoldRole role = fold_role(r, p);
        const int want = role == FoldRole::kExtra   ? pof2
                         : role == FoldRole::kProxy ? 2 * (pof2 - 1) + pof2
                                                    : 2 * (pof2 - 1);
        EXPECT_EQ(w.chunks_sent[r], want) << "rank " << r;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Binomial trees, every root
// ---------------------------------------------------------------------------

TEST(BinomialSimulation, BroadcastFromEveryRoot) {
  for (int p : kGroupSizes) {
    for (int root = 0; root < p; ++root) {
      SCOPED_TRACE("p=" + std::to_string(p) + " root=" + std::to_string(root));
      World w = make_world(p, 1, [&](int r, int) { return r == root ? only(p, root) : none(p); });
      ASSERT_NO_FATAL_FAILURE(run(w, schedules_of(p, [&](int r) { return binomial_broadcast(r, root, p); })));
      for (int r = 0; r < p; ++r) {
        ASSERT_EQ(check(w, r, 0, only(p, root)), "");
        EXPECT_EQ(w.chunks_received[r], r == root ? 0 : 1);
        EXPECT_EQ(w.chunks_sent[r], static_cast<int>(binomial_children(r, root, p).size()));
      }
      EXPECT_EQ(w.rounds, ceil_log2(p));
    }
  }
}

TEST(BinomialSimulation, ReduceToEveryRoot) {
  for (int p : kGroupSizes) {
    for (int root = 0; root < p; ++root) {
      SCOPED_TRACE("p=" + std::to_string(p) + " root=" + std::to_string(root));
      World w = all_reduce_input(p, 1);
      ASSERT_NO_FATAL_FAILURE(run(w, schedules_of(p, [&](int r) { return binomial_reduce(r, root, p); })));
      ASSERT_EQ(check(w, root, 0, everyone(p)), "");
      for (int r = 0; r < p; ++r) EXPECT_EQ(w.chunks_sent[r], r == root ? 0 : 1);
      EXPECT_EQ(w.rounds, ceil_log2(p));
    }
  }
}

TEST(BinomialSimulation, GatherToEveryRoot) {
  for (int p : kGroupSizes) {
    for (int root = 0; root < p; ++root) {
      SCOPED_TRACE("p=" + std::to_string(p) + " root=" + std::to_string(root));
      // Relative chunk i is rank absolute_rank(i)'s block.
      World w = make_world(
          p, p, [&](int r, int c) { return c == relative_rank(r, root, p) ? only(p, r) : none(p); });
      ASSERT_NO_FATAL_FAILURE(run(w, schedules_of(p, [&](int r) { return binomial_gather(r, root, p); })));
      for (int c = 0; c < p; ++c) ASSERT_EQ(check(w, root, c, only(p, absolute_rank(c, root, p))), "");
      EXPECT_EQ(w.chunks_received[root], p - 1);
      for (int r = 0; r < p; ++r) {
        if (r != root) {
          EXPECT_EQ(w.chunks_sent[r], binomial_subtree(r, root, p).count);
        }
      }
      EXPECT_EQ(w.rounds, ceil_log2(p));
    }
  }
}

TEST(BinomialSimulation, ScatterFromEveryRoot) {
  for (int p : kGroupSizes) {
    for (int root = 0; root < p; ++root) {
      SCOPED_TRACE("p=" + std::to_string(p) + " root=" + std::to_string(root));
      // The root starts with every block; block i is tagged with its
      // destination absolute_rank(i).
      World w = make_world(
          p, p, [&](int r, int c) { return r == root ? only(p, absolute_rank(c, root, p)) : none(p); });
      ASSERT_NO_FATAL_FAILURE(run(w, schedules_of(p, [&](int r) { return binomial_scatter(r, root, p); })));
      for (int r = 0; r < p; ++r) {
        ASSERT_EQ(check(w, r, relative_rank(r, root, p), only(p, r)), "");
        if (r != root) {
          EXPECT_EQ(w.chunks_received[r], binomial_subtree(r, root, p).count);
        }
      }
      EXPECT_EQ(w.chunks_sent[root], p - 1);
      EXPECT_EQ(w.rounds, ceil_log2(p));
    }
  }
}

}  // namespace
}  // namespace tdist::patterns
