// The TCP cost model (algorithms/tuning/tcp_model.h): its choices at small and large sizes, that they are the
// model's cheapest, and the TDIST_ALGO_<OP> overrides.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "algorithms/tuning/tcp_model.h"
#include "tdist/errors.h"

namespace tdist::algorithms {
namespace {

constexpr size_t kSmall = 8;
constexpr size_t kLarge = size_t{64} << 20;
constexpr int kSizes[] = {2, 3, 4, 5, 7, 8, 16, 33, 64};

TEST(Selector, SmallAllReduceUsesRecursiveDoubling) {
  for (int p : kSizes) EXPECT_EQ(select_all_reduce(kSmall, p), AllReduceAlgo::kRecursiveDoubling) << p;
}

TEST(Selector, LargeAllReduceUsesRabenseifnerForPowersOfTwoAndTheRingOtherwise) {
  for (int p : {4, 8, 16, 64}) EXPECT_EQ(select_all_reduce(kLarge, p), AllReduceAlgo::kRabenseifner) << p;
  for (int p : {3, 5, 7, 33}) EXPECT_EQ(select_all_reduce(kLarge, p), AllReduceAlgo::kRing) << p;
}

TEST(Selector, BroadcastAndReduceSwitchToTheBandwidthAlgorithmsWhenLarge) {
  for (int p : kSizes) {
    EXPECT_EQ(select_broadcast(kSmall, p), BroadcastAlgo::kBinomial) << p;
    EXPECT_EQ(select_reduce(kSmall, p), ReduceAlgo::kBinomial) << p;
  }
  for (int p : {4, 5, 8, 16, 33, 64})
    EXPECT_EQ(select_broadcast(kLarge, p), BroadcastAlgo::kScatterAllGather) << p;
  // Not for 5 ranks: the fold moves the whole buffer in and out, while the
  // tree's root only hears from 3 children.
  for (int p : {4, 8, 16, 33, 64}) EXPECT_EQ(select_reduce(kLarge, p), ReduceAlgo::kReduceScatterGather) << p;
  EXPECT_EQ(select_reduce(kLarge, 5), ReduceAlgo::kBinomial);
}

TEST(Selector, AllGatherUsesLogarithmicAlgorithmsWhenSmallAndTheRingWhenLargeAndNotAPowerOfTwo) {
  for (int p : {2, 4, 8, 16, 64})
    EXPECT_EQ(select_all_gather(kSmall, p), AllGatherAlgo::kRecursiveDoubling) << p;
  for (int p : {5, 7, 33}) EXPECT_EQ(select_all_gather(kSmall, p), AllGatherAlgo::kBruck) << p;
  // Three ranks: the ring takes as many steps as Bruck and needs no copies.
  EXPECT_EQ(select_all_gather(kSmall, 3), AllGatherAlgo::kRing);
  for (int p : {3, 5, 7, 33}) EXPECT_EQ(select_all_gather(kLarge, p), AllGatherAlgo::kRing) << p;
}

TEST(Selector, GatherAndScatterUseTheTreeForManySmallBlocksAndLinearForLargeOnes) {
  EXPECT_EQ(select_gather(kSmall, 64), GatherAlgo::kBinomial);
  EXPECT_EQ(select_scatter(kSmall, 64), ScatterAlgo::kBinomial);
  for (int p : kSizes) {
    EXPECT_EQ(select_gather(kLarge, p), GatherAlgo::kLinear) << p;
    EXPECT_EQ(select_scatter(kLarge, p), ScatterAlgo::kLinear) << p;
  }
}

TEST(Selector, ReduceScatterUsesRecursiveHalvingWhenSmallAndTheRingWhenLarge) {
  for (int p : {4, 7, 8, 16, 33, 64}) {
    EXPECT_EQ(select_reduce_scatter(kSmall * p, p), ReduceScatterAlgo::kRecursiveHalving) << p;
  }
  // With 2, 3 or 5 ranks the ring has no more steps than halving plus its
  // fold, and needs no working copy.
  for (int p : {2, 3, 5}) EXPECT_EQ(select_reduce_scatter(kSmall * p, p), ReduceScatterAlgo::kRing) << p;
  for (int p : {3, 5, 7, 33}) EXPECT_EQ(select_reduce_scatter(kLarge, p), ReduceScatterAlgo::kRing) << p;
}

TEST(Selector, AllToAllSwitchesToPairwiseAtMpichsBlockSize) {
  EXPECT_EQ(select_all_to_all(4 * (kAllToAllPairwiseBlockBytes - 1), 4), AllToAllAlgo::kLinear);
  EXPECT_EQ(select_all_to_all(4 * kAllToAllPairwiseBlockBytes, 4), AllToAllAlgo::kPairwise);
  EXPECT_EQ(select_barrier(5), BarrierAlgo::kDissemination);
}

TEST(Selector, ChoicesAreTheModelsCheapestAndNeverAuto) {
  for (int p : kSizes) {
    for (size_t bytes = 1; bytes <= kLarge; bytes *= 4) {
      const AllReduceAlgo ar = select_all_reduce(bytes, p);
      for (AllReduceAlgo other :
           {AllReduceAlgo::kRecursiveDoubling, AllReduceAlgo::kRing, AllReduceAlgo::kRabenseifner}) {
        EXPECT_LE(modelled_cost(ar, bytes, p), modelled_cost(other, bytes, p)) << bytes << " " << p;
      }
      EXPECT_NE(select_broadcast(bytes, p), BroadcastAlgo::kAuto);
      EXPECT_NE(select_reduce(bytes, p), ReduceAlgo::kAuto);
      EXPECT_NE(select_all_gather(bytes, p), AllGatherAlgo::kAuto);
      EXPECT_NE(select_gather(bytes, p), GatherAlgo::kAuto);
      EXPECT_NE(select_scatter(bytes, p), ScatterAlgo::kAuto);
      EXPECT_NE(select_reduce_scatter(bytes, p), ReduceScatterAlgo::kAuto);
      EXPECT_NE(select_all_to_all(bytes, p), AllToAllAlgo::kAuto);
    }
  }
  // One rank: whatever is chosen must be a real algorithm too.
  EXPECT_NE(select_all_reduce(kLarge, 1), AllReduceAlgo::kAuto);
}

// ---- TDIST_ALGO_<OP> ----

class EnvOverride : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* name : {"TDIST_ALGO_ALL_REDUCE", "TDIST_ALGO_BROADCAST", "TDIST_ALGO_REDUCE",
                             "TDIST_ALGO_ALL_GATHER", "TDIST_ALGO_GATHER", "TDIST_ALGO_SCATTER",
                             "TDIST_ALGO_REDUCE_SCATTER", "TDIST_ALGO_ALL_TO_ALL", "TDIST_ALGO_BARRIER"}) {
      unsetenv(name);
    }
  }
};

TEST_F(EnvOverride, ForcesTheAlgorithmOfAutoCallsOnly) {
  setenv("TDIST_ALGO_ALL_REDUCE", "ring", 1);
  EXPECT_EQ(resolve_algo(AllReduceAlgo::kAuto, kSmall, 4), AllReduceAlgo::kRing);
  EXPECT_EQ(resolve_algo(AllReduceAlgo::kRabenseifner, kSmall, 4), AllReduceAlgo::kRabenseifner);
  setenv("TDIST_ALGO_ALL_REDUCE", "RABENSEIFNER", 1);
  EXPECT_EQ(resolve_algo(AllReduceAlgo::kAuto, kSmall, 4), AllReduceAlgo::kRabenseifner);
  setenv("TDIST_ALGO_ALL_REDUCE", "auto", 1);
  EXPECT_EQ(resolve_algo(AllReduceAlgo::kAuto, kSmall, 4), AllReduceAlgo::kRecursiveDoubling);
  setenv("TDIST_ALGO_ALL_REDUCE", "", 1);
  EXPECT_EQ(resolve_algo(AllReduceAlgo::kAuto, kSmall, 4), AllReduceAlgo::kRecursiveDoubling);
}

TEST_F(EnvOverride, EveryOpReadsItsOwnVariable) {
  setenv("TDIST_ALGO_BROADCAST", "scatter_allgather", 1);
  setenv("TDIST_ALGO_REDUCE", "reduce_scatter_gather", 1);
  setenv("TDIST_ALGO_ALL_GATHER", "bruck", 1);
  setenv("TDIST_ALGO_GATHER", "linear", 1);
  setenv("TDIST_ALGO_SCATTER", "binomial", 1);
  setenv("TDIST_ALGO_REDUCE_SCATTER", "recursive_halving", 1);
  setenv("TDIST_ALGO_ALL_TO_ALL", "pairwise", 1);
  setenv("TDIST_ALGO_BARRIER", "dissemination", 1);
  EXPECT_EQ(resolve_algo(BroadcastAlgo::kAuto, kSmall, 4), BroadcastAlgo::kScatterAllGather);
  EXPECT_EQ(resolve_algo(ReduceAlgo::kAuto, kSmall, 4), ReduceAlgo::kReduceScatterGather);
  EXPECT_EQ(resolve_algo(AllGatherAlgo::kAuto, kSmall, 4), AllGatherAlgo::kBruck);
  EXPECT_EQ(resolve_algo(GatherAlgo::kAuto, kSmall, 4), GatherAlgo::kLinear);
  EXPECT_EQ(resolve_algo(ScatterAlgo::kAuto, kLarge, 4), ScatterAlgo::kBinomial);
  EXPECT_EQ(resolve_algo(ReduceScatterAlgo::kAuto, kLarge, 5), ReduceScatterAlgo::kRecursiveHalving);
  EXPECT_EQ(resolve_algo(AllToAllAlgo::kAuto, kSmall, 4), AllToAllAlgo::kPairwise);
  EXPECT_EQ(resolve_algo(BarrierAlgo::kAuto, 4), BarrierAlgo::kDissemination);
  EXPECT_EQ(resolve_algo(AllReduceAlgo::kAuto, kSmall, 4), AllReduceAlgo::kRecursiveDoubling);
}

TEST_F(EnvOverride, AnUnknownNameIsAnErrorListingTheValidOnes) {
  setenv("TDIST_ALGO_ALL_REDUCE", "bruck", 1);  // a name, but not an all_reduce algorithm
  try {
    resolve_algo(AllReduceAlgo::kAuto, kSmall, 4);
    FAIL() << "no error";
  } catch (const DistInvalidArgument& e) {
    EXPECT_EQ(
        std::string(e.what()),
        "TDIST_ALGO_ALL_REDUCE: unknown all_reduce algorithm 'bruck'; valid names: auto, recursive_doubling, "
        "ring, rabenseifner");
  }
  setenv("TDIST_ALGO_ALL_GATHER", "ring ", 1);
  EXPECT_THROW(resolve_algo(AllGatherAlgo::kAuto, kSmall, 4), DistInvalidArgument);
  setenv("TDIST_ALGO_BARRIER", "tree", 1);
  EXPECT_THROW(resolve_algo(BarrierAlgo::kAuto, 4), DistInvalidArgument);
}

TEST(AlgoNames, EveryNameParsesBackToItsAlgorithm) {
  for (AllReduceAlgo a : {AllReduceAlgo::kAuto, AllReduceAlgo::kRecursiveDoubling, AllReduceAlgo::kRing,
                          AllReduceAlgo::kRabenseifner}) {
    EXPECT_EQ(parse_algo<AllReduceAlgo>(algo_name(a)), a);
  }
  for (AllGatherAlgo a : {AllGatherAlgo::kRing, AllGatherAlgo::kRecursiveDoubling, AllGatherAlgo::kBruck}) {
    EXPECT_EQ(parse_algo<AllGatherAlgo>(algo_name(a)), a);
  }
  EXPECT_STREQ(algo_name(ReduceScatterAlgo::kRecursiveHalving), "recursive_halving");
  EXPECT_STREQ(algo_name(BroadcastAlgo::kScatterAllGather), "scatter_allgather");
  EXPECT_STREQ(algo_env_var<AllToAllAlgo>(), "TDIST_ALGO_ALL_TO_ALL");
}

}  // namespace
}  // namespace tdist::algorithms
