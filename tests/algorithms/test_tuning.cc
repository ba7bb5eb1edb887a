// The tuning module's choices (algorithms/tuning/tuning.h), against the
// tables of docs/tuning.md: each case states a row of those tables.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "algorithms/tuning/tuning.h"

namespace tdist::algorithms {
namespace {

constexpr size_t KiB = 1024;
constexpr size_t MiB = 1024 * KiB;

using transport::shm::SingleCopySettings;

TEST(SingleCopyWindows, ASlowKernelCopyKeepsReductionsOffItAndLargeBlocksOfGathersAndBroadcasts) {
  for (bool oversubscribed : {false, true}) {
    SCOPED_TRACE(oversubscribed ? "oversubscribed" : "a core per rank");
    SingleCopySettings fast;
    fast.enabled = true;
    fast.oversubscribed = oversubscribed;
    SingleCopySettings slow = fast;
    slow.slow_kernel_copy = true;
    EXPECT_TRUE(single_copy_window(SingleCopyShape::kReduce, slow).empty());
    for (SingleCopyShape shape : {SingleCopyShape::kGather, SingleCopyShape::kAllToAll}) {
      const SingleCopyWindow s = single_copy_window(shape, slow);
      if (oversubscribed) {
        EXPECT_TRUE(s.empty());
        continue;
      }
      const SingleCopyWindow f = single_copy_window(shape, fast);
      EXPECT_EQ(s.min, std::max(f.min, 32 * KiB));
      EXPECT_EQ(s.max, std::min(f.max, 128 * KiB));
      EXPECT_TRUE(s.contains(64 * KiB));
      EXPECT_FALSE(s.contains(16 * KiB));
      EXPECT_FALSE(s.contains(256 * KiB));
    }
    EXPECT_EQ(single_copy_window(SingleCopyShape::kOneSource, slow).min,
              single_copy_window(SingleCopyShape::kOneSource, fast).min);
    EXPECT_EQ(single_copy_window(SingleCopyShape::kOneSource, slow).max,
              single_copy_window(SingleCopyShape::kOneSource, fast).max);
    // Broadcast leaves messages of 1 MiB and more to the ring of slots.
    const SingleCopyWindow f = single_copy_window(SingleCopyShape::kShared, fast);
    const SingleCopyWindow s = single_copy_window(SingleCopyShape::kShared, slow);
    EXPECT_EQ(s.min, f.min);
    if (!f.empty()) {
      EXPECT_TRUE(f.contains(1024 * KiB));
      EXPECT_TRUE(s.contains(1024 * KiB - 1));
      EXPECT_FALSE(s.contains(1024 * KiB));
    }
    // Rank 0's TDIST_SHM_SINGLE_COPY_MIN/MAX_BYTES replace every window.
    slow.min_bytes = 1;
    EXPECT_TRUE(single_copy_window(SingleCopyShape::kReduce, slow).contains(size_t{64} << 20));
    // Not enabled: nothing copies directly.
    slow.enabled = false;
    EXPECT_TRUE(single_copy_window(SingleCopyShape::kShared, slow).empty());
  }
}

// A group whose ranks each have a core and can reach each other's memory,
// with 1 MiB buffers.
ShmFacts roomy_group() {
  ShmFacts facts;
  facts.buffer_bytes = MiB;
  facts.single_copy.enabled = true;
  return facts;
}

TEST(ShmChoice, ReductionsGoEagerOneShotSingleCopyThenTwoShotBySize) {
  ShmFacts facts = roomy_group();
  EXPECT_EQ(choose_shm_reduce(48, true, false, facts), ShmAlgo::kEager);  // a reduce in the flag lines
  EXPECT_EQ(choose_shm_reduce(48, false, false, facts), ShmAlgo::kOneShot);
  EXPECT_EQ(choose_shm_reduce(49, true, false, facts), ShmAlgo::kOneShot);
  EXPECT_EQ(choose_shm_reduce(32 * KiB, false, false, facts), ShmAlgo::kOneShot);
  EXPECT_EQ(choose_shm_reduce(32 * KiB + 4, false, false, facts), ShmAlgo::kSingleCopy);
  EXPECT_EQ(choose_shm_reduce(32 * MiB, false, false, facts), ShmAlgo::kSingleCopy);
  EXPECT_EQ(choose_shm_reduce(32 * MiB + 4, false, false, facts), ShmAlgo::kTwoShot);
  // PREMUL_SUM scales on the way into the buffers, which single copy skips.
  EXPECT_EQ(choose_shm_reduce(MiB, false, true, facts), ShmAlgo::kTwoShot);
  // One-shot needs the message in one buffer.
  facts.buffer_bytes = 16 * KiB;
  EXPECT_EQ(choose_shm_reduce(20 * KiB, false, false, facts), ShmAlgo::kTwoShot);
  // Without single copy, or with more ranks than cores, two-shot.
  facts = roomy_group();
  facts.single_copy.enabled = false;
  EXPECT_EQ(choose_shm_reduce(MiB, false, false, facts), ShmAlgo::kTwoShot);
  facts = roomy_group();
  facts.single_copy.oversubscribed = true;
  EXPECT_EQ(choose_shm_reduce(MiB, false, false, facts), ShmAlgo::kTwoShot);
}

TEST(ShmChoice, BroadcastGoesEagerSingleCopyRingThenRounds) {
  ShmFacts facts = roomy_group();
  EXPECT_EQ(choose_shm_broadcast(1, facts), ShmAlgo::kEager);
  EXPECT_EQ(choose_shm_broadcast(48, facts), ShmAlgo::kEager);
  EXPECT_EQ(choose_shm_broadcast(8 * KiB, facts), ShmAlgo::kRounds);
  EXPECT_EQ(choose_shm_broadcast(16 * KiB, facts), ShmAlgo::kSingleCopy);
  EXPECT_EQ(choose_shm_broadcast(64 * MiB, facts), ShmAlgo::kSingleCopy);
  // A slow kernel copy leaves 1 MiB and more to the ring.
  facts.single_copy.slow_kernel_copy = true;
  EXPECT_EQ(choose_shm_broadcast(MiB - 1, facts), ShmAlgo::kSingleCopy);
  EXPECT_EQ(choose_shm_broadcast(MiB, facts), ShmAlgo::kRing);
  // More ranks than cores: no single copy; the ring from 1 MiB.
  facts = roomy_group();
  facts.single_copy.oversubscribed = true;
  EXPECT_EQ(choose_shm_broadcast(MiB - 1, facts), ShmAlgo::kRounds);
  EXPECT_EQ(choose_shm_broadcast(MiB, facts), ShmAlgo::kRing);
  // TDIST_SHM_RING_BYTES moves the ring's threshold.
  facts.ring_bytes = 4 * KiB;
  EXPECT_EQ(choose_shm_broadcast(4 * KiB, facts), ShmAlgo::kRing);
  EXPECT_EQ(choose_shm_broadcast(4 * KiB - 1, facts), ShmAlgo::kRounds);
}

TEST(ShmChoice, GathersAndScatterChooseByTheirLargestBlock) {
  ShmFacts facts = roomy_group();
  EXPECT_EQ(choose_shm_gather(0, facts), ShmAlgo::kRounds);
  EXPECT_EQ(choose_shm_gather(8 * KiB - 1, facts), ShmAlgo::kRounds);
  EXPECT_EQ(choose_shm_gather(8 * KiB, facts), ShmAlgo::kSingleCopy);
  EXPECT_EQ(choose_shm_gather(8 * MiB, facts), ShmAlgo::kSingleCopy);
  EXPECT_EQ(choose_shm_gather(8 * MiB + 1, facts), ShmAlgo::kRing);
  EXPECT_EQ(choose_shm_scatter(16 * KiB, facts), ShmAlgo::kSingleCopy);
  EXPECT_EQ(choose_shm_scatter(MiB + 1, facts), ShmAlgo::kRounds);
  // More ranks than cores: the gathers' ring starts at 8 MiB, not 1.
  facts.single_copy.oversubscribed = true;
  EXPECT_EQ(choose_shm_gather(4 * MiB, facts), ShmAlgo::kRounds);
  EXPECT_EQ(choose_shm_gather(8 * MiB, facts), ShmAlgo::kRing);
  EXPECT_EQ(shm_ring_threshold(false, facts), MiB);
  EXPECT_EQ(choose_shm_scatter(16 * KiB, facts), ShmAlgo::kRounds);
}

TEST(ShmChoice, AllToAllGoesSingleCopyInsideItsWindowOrWhereSendersSkippedTheirSections) {
  ShmFacts facts = roomy_group();   // the all_to_all window: 8 KiB - 8 MiB
  const size_t section = 64 * KiB;  // what a first-round section would carry
  EXPECT_EQ(choose_shm_all_to_all(0, true, section, facts), ShmAlgo::kRounds);
  EXPECT_EQ(choose_shm_all_to_all(8 * KiB - 1, true, section, facts), ShmAlgo::kRounds);
  EXPECT_EQ(choose_shm_all_to_all(8 * KiB, true, section, facts), ShmAlgo::kSingleCopy);
  EXPECT_EQ(choose_shm_all_to_all(8 * MiB, true, section, facts), ShmAlgo::kSingleCopy);
  EXPECT_EQ(choose_shm_all_to_all(8 * MiB + 1, true, section, facts), ShmAlgo::kRounds);
  // Without the input addresses in the first round, no single copy.
  EXPECT_EQ(choose_shm_all_to_all(MiB, false, section, facts), ShmAlgo::kRounds);
  // Blocks past the window's top that a section would have carried are
  // fetched too: their senders did not copy them into their sections.
  EXPECT_EQ(choose_shm_all_to_all(8 * MiB + 1, true, 16 * MiB, facts), ShmAlgo::kSingleCopy);
  // More ranks than cores: 64 KiB - 4 MiB.
  facts.single_copy.oversubscribed = true;
  EXPECT_EQ(choose_shm_all_to_all(32 * KiB, true, section, facts), ShmAlgo::kRounds);
  EXPECT_EQ(choose_shm_all_to_all(64 * KiB, true, section, facts), ShmAlgo::kSingleCopy);
  facts.single_copy.enabled = false;
  EXPECT_EQ(choose_shm_all_to_all(64 * KiB, true, section, facts), ShmAlgo::kRounds);
}

TEST(ShmChoice, AnAllToAllSenderLeavesItsSectionsEmptyOnlyWhenSingleCopyWillFetchItsBlocks) {
  ShmFacts facts = roomy_group();  // the all_to_all window: 8 KiB - 8 MiB
  const size_t section = 64 * KiB;
  EXPECT_FALSE(all_to_all_skips_sections(8 * KiB - 1, facts));
  EXPECT_TRUE(all_to_all_skips_sections(8 * KiB, facts));
  // A sender that skips its sections had blocks a section would carry
  // (own <= section); the agreed largest block is at least its own, and
  // every such agreement up to the section's size is fetched by single copy.
  for (const size_t own : {8 * KiB, 20 * KiB, section}) {
    ASSERT_TRUE(all_to_all_skips_sections(own, facts));
    for (const size_t agreed : {own, (own + section) / 2, section}) {
      EXPECT_EQ(choose_shm_all_to_all(agreed, true, section, facts), ShmAlgo::kSingleCopy)
          << "own " << own << ", agreed " << agreed;
    }
  }
  // With a section larger than the window's top, too.
  EXPECT_EQ(choose_shm_all_to_all(12 * MiB, true, 16 * MiB, facts), ShmAlgo::kSingleCopy);
}

TEST(ShmChoice, RoundsOfAtMost48BytesARankRideInTheFlagLines) {
  EXPECT_TRUE(shm_round_in_flag_line(0));
  EXPECT_TRUE(shm_round_in_flag_line(48));
  EXPECT_FALSE(shm_round_in_flag_line(49));
}

TEST(ShmChoice, EveryChoiceHasTheNameTheFlightRecorderShows) {
  EXPECT_STREQ(shm_algo_name(ShmAlgo::kEager), "shm eager");
  EXPECT_STREQ(shm_algo_name(ShmAlgo::kOneShot), "shm one-shot");
  EXPECT_STREQ(shm_algo_name(ShmAlgo::kSingleCopy), "shm single copy");
  EXPECT_STREQ(shm_algo_name(ShmAlgo::kTwoShot), "shm two-shot");
  EXPECT_STREQ(shm_algo_name(ShmAlgo::kRing), "shm ring");
  EXPECT_STREQ(shm_algo_name(ShmAlgo::kRounds), "shm rounds");
}

TEST(Decision, TheLastNoteIsTakenOnce) {
  (void)take_chosen_algorithm();
  note_chosen_algorithm("shm ring");
  resolve_algo(AllReduceAlgo::kRing, 1024, 4);  // a TCP choice notes its name too
  EXPECT_STREQ(take_chosen_algorithm(), "ring");
  EXPECT_EQ(take_chosen_algorithm(), nullptr);
}

TEST(Hierarchical, AllReducesUpTo1KiBCrossHostsWhole) {
  EXPECT_TRUE(hierarchical_all_reduce_whole(0));
  EXPECT_TRUE(hierarchical_all_reduce_whole(KiB));
  EXPECT_FALSE(hierarchical_all_reduce_whole(KiB + 1));
}

}  // namespace
}  // namespace tdist::algorithms
