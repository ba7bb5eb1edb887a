// The arithmetic of shared-memory point to point (transport/shm/shm_p2p_layout.h):
// which protocol a message takes, how many slots, where rings lie in the
// segment, and how long a large message waits for its receive.

#include <gtest/gtest.h>

#include <set>

#include "transport/shm/shm_p2p_layout.h"

namespace tdist::transport::shm {
namespace {

TEST(ShmP2pLayout, SmallMessagesTakeOneSlotLargeOnesAreReadFromTheSenderWhenAllowed) {
  EXPECT_EQ(carry_for(0, true), Carry::kSlots);
  EXPECT_EQ(carry_for(kP2pPeerReadMinBytes - 1, true), Carry::kSlots);
  EXPECT_EQ(carry_for(kP2pPeerReadMinBytes, true), Carry::kPeerRead);
  EXPECT_EQ(carry_for(size_t{64} << 20, false), Carry::kSlots);
  EXPECT_EQ(slots_for(0, Carry::kSlots), 1U);
  EXPECT_EQ(slots_for(kP2pSlotPayload, Carry::kSlots), 1U);
  EXPECT_EQ(slots_for(kP2pSlotPayload + 1, Carry::kSlots), 2U);
  EXPECT_EQ(slots_for(10 * kP2pSlotPayload, Carry::kSlots), 10U);
  EXPECT_EQ(slots_for(size_t{64} << 20, Carry::kPeerRead), 1U);
}

TEST(ShmP2pLayout, RingsShrinkOnLargeHostsAndNeverOverlap) {
  for (int size : {1, 2, 3, 5, 8, 16, 17, 32, 64, 128}) {
    const P2pLayout layout(size);
    const auto n = static_cast<size_t>(size);
    EXPECT_GE(layout.ring_slots, kP2pMinSlots) << size;
    EXPECT_LE(layout.ring_slots, kP2pMaxSlots) << size;
    if (layout.ring_slots > kP2pMinSlots) {
      EXPECT_LE(n * n * layout.ring_slots * kP2pSlotBytes, kP2pRingBudget) << size;
    }
    EXPECT_GE(layout.counters, layout.areas + n * sizeof(P2pRankArea)) << size;
    EXPECT_GE(layout.slots, layout.counters + n * n * sizeof(RingCounters)) << size;
    EXPECT_EQ(layout.bytes, layout.slots + n * n * layout.ring_slots * kP2pSlotBytes) << size;
    // Every slot of every ring has its own place, and slot n wraps around.
    std::set<size_t> offsets;
    for (int from = 0; from < std::min(size, 5); ++from) {
      for (int to = 0; to < std::min(size, 5); ++to) {
        for (uint64_t k = 0; k < layout.ring_slots; ++k) {
          const size_t at = layout.slot_offset(from, to, k);
          EXPECT_TRUE(offsets.insert(at).second) << size << " " << from << " " << to << " " << k;
          EXPECT_LE(at + kP2pSlotBytes, layout.bytes);
          EXPECT_EQ(layout.slot_offset(from, to, k + layout.ring_slots), at);
        }
      }
    }
  }
  EXPECT_EQ(P2pLayout(8).ring_slots, kP2pMaxSlots);
  EXPECT_EQ(P2pLayout(128).ring_slots, kP2pMinSlots);
}

TEST(ShmP2pLayout, ALargerMessageWaitsLongerForItsReceive) {
  EXPECT_EQ(p2p_patience(0), std::chrono::milliseconds(2));
  EXPECT_LT(p2p_patience(size_t{1} << 20), p2p_patience(size_t{16} << 20));
  // Well above the time of one copy of it (a few ms for 16 MiB here).
  EXPECT_GE(p2p_patience(size_t{16} << 20), std::chrono::milliseconds(30));
}

}  // namespace
}  // namespace tdist::transport::shm
