// The arithmetic of shared-memory point to point (transport/shm/shm_p2p_layout.h):
// which protocol a message takes, how many slots, where rings lie in the
// segment, and how long a large message waits for its receive.

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <vector>

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

// A slot written for message n is ready for n only (not for the lap
// before or after), and gives back its header and bytes: small messages
// beside the header, in its first two lines, others after the header.
TEST(ShmP2pLayout, SlotsCarrySmallMessagesBesideTheirHeaderAndSayWhenReady) {
  alignas(64) static uint8_t slot[kP2pSlotBytes];
  std::vector<uint8_t> bytes(kP2pInlineBytes + 1);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(0xA0 + i);
  const auto sig = tdist::detail::p2p_signature(DType::kFloat32, 2);
  uint64_t n = 0;
  for (const size_t size : {size_t{0}, size_t{1}, size_t{8}, kP2pInlineBytes, kP2pInlineBytes + 1}) {
    std::memset(slot, 0xEE, sizeof(slot));
    slot_detail::seq_of(slot).store(0);
    n += 17;  // laps of a 16-slot ring: each write is another message of this slot
    EXPECT_FALSE(slot_ready(slot, n));
    const SlotHeader header{SlotKind::kMessage, Carry::kSlots, 77, size, size, 5, 0, sig};
    const bool beside = size <= kP2pInlineBytes;
    EXPECT_EQ(travels_inline(header), beside) << size;
    if (!beside) std::memcpy(slot + kP2pSlotHeaderBytes, bytes.data(), size);
    write_slot(slot, n, header, bytes.data());
    EXPECT_TRUE(slot_ready(slot, n)) << size;
    EXPECT_FALSE(slot_ready(slot, n - 1)) << size;
    EXPECT_FALSE(slot_ready(slot, n + 16)) << size;
    const uint8_t* at = nullptr;
    const SlotHeader back = read_slot(slot, &at);
    EXPECT_EQ(back.kind, SlotKind::kMessage);
    EXPECT_EQ(back.carry, Carry::kSlots);
    EXPECT_EQ(back.tag, 77U);
    EXPECT_EQ(back.total, size);
    EXPECT_EQ(back.chunk, size);
    EXPECT_EQ(back.sig, sig);
    EXPECT_EQ(at, slot + (beside ? kP2pInlineOffset : kP2pSlotHeaderBytes)) << size;
    EXPECT_EQ(std::memcmp(at, bytes.data(), size), 0) << size;
    if (beside) EXPECT_LE(kP2pInlineOffset + size, kP2pSlotHeaderBytes);
  }
  // Streamed and peer-read messages, acknowledgements and refusals keep
  // their size, number and address in the header.
  for (const SlotHeader& header :
       {SlotHeader{SlotKind::kMessage, Carry::kPeerRead, 9, uint64_t{1} << 40, 0, 12, 0xDEADBEEF000, sig},
        SlotHeader{SlotKind::kMessage, Carry::kSlots, 9, 3 * kP2pSlotPayload, kP2pSlotPayload, 13, 0, sig},
        SlotHeader{SlotKind::kMore, Carry::kSlots, 9, 3 * kP2pSlotPayload, 40, 13, 0, sig},
        SlotHeader{SlotKind::kAck, Carry::kSlots, 0, 0, 0, 12, 0, {}},
        SlotHeader{SlotKind::kRefusal, Carry::kSlots, 0, 30, 30, 14, 0, {}}}) {
    EXPECT_FALSE(travels_inline(header));
    write_slot(slot, ++n, header, nullptr);
    const uint8_t* at = nullptr;
    const SlotHeader back = read_slot(slot, &at);
    EXPECT_EQ(back.kind, header.kind);
    EXPECT_EQ(back.carry, header.carry);
    EXPECT_EQ(back.total, header.total);
    EXPECT_EQ(back.chunk, header.chunk);
    EXPECT_EQ(back.id, header.id);
    EXPECT_EQ(back.address, header.address);
    EXPECT_EQ(at, slot + kP2pSlotHeaderBytes);
  }
}

TEST(ShmP2pLayout, ALargerMessageWaitsLongerForItsReceive) {
  EXPECT_EQ(p2p_patience(0), std::chrono::milliseconds(2));
  EXPECT_LT(p2p_patience(size_t{1} << 20), p2p_patience(size_t{16} << 20));
  // Well above the time of one copy of it (a few ms for 16 MiB here).
  EXPECT_GE(p2p_patience(size_t{16} << 20), std::chrono::milliseconds(30));
}

}  // namespace
}  // namespace tdist::transport::shm
