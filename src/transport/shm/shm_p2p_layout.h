#pragma once

// The shared memory of point-to-point messages between the ranks of one
// host (ShmP2pTransport, shm_p2p_transport.h): for every ordered pair of
// ranks (s, d) a ring of slots (P2pLayout::ring_slots) that only s writes and only d
// reads, and for every rank a doorbell that others bump when they have put
// something in its rings or freed slots in the rings it writes.
//
//   [any_aborted line][rank areas, one per rank][ring counters, size x size]
//   [slots: size x size rings of ring_slots slots of kP2pSlotBytes]
//
// A message takes one slot when its bytes fit in it (up to kP2pInlineBytes
// beside its header, in the lines the receiver polls); a larger
// one goes either in a run of slots that follow each other in the ring
// (Carry::kSlots: the receiver copies each out as it comes), or, when every
// rank may read every other's memory, as a header alone that says where its
// bytes lie in the sender (kPeerRead: the receiver copies them straight
// into its buffer with process_vm_readv, then sends an acknowledgement
// back, and only then does the send complete). Acknowledgements and
// refusals (a receive of another dtype or count) are messages of their own
// in the reverse ring, so they stay in order with the data.
//
// The pure arithmetic here (which protocol, how many slots, where things
// lie) is tested in tests/transport/test_shm_p2p_layout.cc, the transport
// in test_transport_conformance.cc.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/call_signature.h"
#include "transport/shm/shm_sync.h"

namespace tdist::transport::shm {

/// Bytes of one slot, header included: two pages, so a streamed message
/// moves in page-sized copies.
inline constexpr size_t kP2pSlotBytes = 8192;
inline constexpr size_t kP2pSlotHeaderBytes = 128;
/// Message bytes a slot carries.
inline constexpr size_t kP2pSlotPayload = kP2pSlotBytes - kP2pSlotHeaderBytes;
/// Slots per ring: 16 (128 KiB per pair, enough to keep a streamed
/// message flowing while the receiver copies) as long as all rings together
/// stay within kP2pRingBudget, fewer (down to 2) for large hosts: the
/// segment is touched only where used, but a container's /dev/shm (64 MiB
/// by default under Docker) must hold what is.
inline constexpr uint64_t kP2pMaxSlots = 16;
inline constexpr uint64_t kP2pMinSlots = 2;
inline constexpr size_t kP2pRingBudget = size_t{32} << 20;

/// Messages from this size up go by a read of the sender's memory when the
/// ranks allow it; smaller ones stream through the ring, which costs two
/// copies but no system call. Just above what moves at once
/// (kP2pAtOnceSlots): a 2-rank 32 KiB sendrecv, the largest such message
/// of a power of two, took 6.6-8.2 us at once against 7.7-8.8 read from
/// the sender (Xeon VM, 2026-12-02, six runs each, alternating).
inline constexpr size_t kP2pPeerReadMinBytes = size_t{40} << 10;

/// How long a large message may wait for its receive before the receiver
/// copies it into a buffer of its own: a send must not depend on the
/// receiver posting its receive (over TCP it does not, and two ranks that
/// both send first must not wait for each other), yet a receive that comes
/// soon should take the bytes straight from the sender (kPeerRead) or the
/// ring (kSlots), in one copy and without a fresh buffer's page faults.
/// "Soon" grows with the message: a receiver may still be copying the
/// previous one of the same size (a 16 MiB copy takes a few ms here).
inline std::chrono::nanoseconds p2p_patience(size_t bytes) {
  constexpr int64_t kBaseNs = 2'000'000;
  constexpr int64_t kNsPerKiB = 2'000;  // 0.5 GB/s: several times a copy's time
  return std::chrono::nanoseconds(kBaseNs + static_cast<int64_t>(bytes >> 10) * kNsPerKiB);
}

enum class SlotKind : uint32_t {
  kMessage = 1,  // a message's header (and, unless kPeerRead, its first bytes)
  kMore = 2,     // the next bytes of a streamed message
  kAck = 3,      // "I have read your kPeerRead message `id`": its send completes
  kRefusal = 4,  // "a receive refused your message `id`": the payload says why
};

enum class Carry : uint32_t { kSlots = 0, kPeerRead = 1 };

/// What a slot says about its contents (write_slot and read_slot put it
/// in the slot's first lines and take it out).
struct SlotHeader {
  SlotKind kind;
  Carry carry;
  uint64_t tag;
  uint64_t total;    // the message's bytes (kMessage)
  uint64_t chunk;    // bytes in this slot's payload
  uint64_t id;       // the sender's number for the message, per pair
  uint64_t address;  // kPeerRead: where the message lies in the sender's memory
  tdist::detail::CallSignature sig;
};

/// A slot's first 128 bytes:
///
///   [0, 8)     seq: n + 1 once slot n of the ring (counted forever) is
///              written, stored last (release); the receiver polls it
///   [8, 16)    kind, carry, inline flag, chunk
///   [16, 24)   tag
///   [24, 56)   sig
///   [56, 128)  an inline message's bytes, or total, id and address
///
/// An inline message carries no id (0): ids name the messages that wait
/// for an answer (a peer read's acknowledgement, its refusal), and they
/// count from 1.
///
/// A message of up to kP2pInlineBytes that travels in the ring lies beside
/// its header, so its receiver reads one cache line (up to 8 B) or two,
/// where a separate count, header and payload cost it four transfers
/// between cores (the sender's writes as many). Open MPI's shared-memory
/// transport does the same with its "fast boxes". A larger message's
/// bytes start at kP2pSlotHeaderBytes.
inline constexpr size_t kP2pInlineOffset = 56;
inline constexpr size_t kP2pInlineBytes = kP2pSlotHeaderBytes - kP2pInlineOffset;

/// True if `header`'s bytes go beside it.
inline bool travels_inline(const SlotHeader& header) {
  return header.kind == SlotKind::kMessage && header.carry == Carry::kSlots &&
         header.total <= kP2pInlineBytes;
}

namespace slot_detail {
inline std::atomic<uint64_t>& seq_of(uint8_t* slot) {
  return *reinterpret_cast<std::atomic<uint64_t>*>(slot);
}
inline const std::atomic<uint64_t>& seq_of(const uint8_t* slot) {
  return *reinterpret_cast<const std::atomic<uint64_t>*>(slot);
}
template <typename T>
void put(uint8_t* slot, size_t offset, const T& value) {
  std::memcpy(slot + offset, &value, sizeof(T));
}
template <typename T>
T get(const uint8_t* slot, size_t offset) {
  T value;
  std::memcpy(&value, slot + offset, sizeof(T));
  return value;
}
}  // namespace slot_detail

/// Fills slot `n` (counted forever) with `header` and, if it travels
/// inline, its chunk of bytes from `bytes`; else its bytes must be at
/// kP2pSlotHeaderBytes already. Stores the seq last.
inline void write_slot(uint8_t* slot, uint64_t n, const SlotHeader& header, const uint8_t* bytes) {
  using namespace slot_detail;
  const bool in_line = travels_inline(header);
  put(slot, 8, static_cast<uint8_t>(header.kind));
  put(slot, 9, static_cast<uint8_t>(header.carry));
  put(slot, 10, static_cast<uint8_t>(in_line ? 1 : 0));
  put(slot, 12, static_cast<uint32_t>(header.chunk));
  put(slot, 16, header.tag);
  put(slot, 24, header.sig);
  if (in_line) {
    if (header.chunk > 0) std::memcpy(slot + kP2pInlineOffset, bytes, header.chunk);
  } else {
    put(slot, 56, header.total);
    put(slot, 64, header.id);
    put(slot, 72, header.address);
  }
  seq_of(slot).store(n + 1, std::memory_order_release);
}

/// True once slot `n` is written (acquire: its contents are then visible).
inline bool slot_ready(const uint8_t* slot, uint64_t n) {
  return slot_detail::seq_of(slot).load(std::memory_order_acquire) == n + 1;
}

/// The header of a ready slot, and where its bytes are.
inline SlotHeader read_slot(const uint8_t* slot, const uint8_t** bytes) {
  using namespace slot_detail;
  SlotHeader header{};
  header.kind = static_cast<SlotKind>(get<uint8_t>(slot, 8));
  header.carry = static_cast<Carry>(get<uint8_t>(slot, 9));
  header.chunk = get<uint32_t>(slot, 12);
  header.tag = get<uint64_t>(slot, 16);
  header.sig = get<tdist::detail::CallSignature>(slot, 24);
  if (get<uint8_t>(slot, 10) != 0) {
    header.total = header.chunk;
    *bytes = slot + kP2pInlineOffset;
  } else {
    header.total = get<uint64_t>(slot, 56);
    header.id = get<uint64_t>(slot, 64);
    header.address = get<uint64_t>(slot, 72);
    *bytes = slot + kP2pSlotHeaderBytes;
  }
  return header;
}
static_assert(kP2pInlineOffset == 24 + sizeof(tdist::detail::CallSignature));
static_assert(kP2pSlotPayload < (uint64_t{1} << 32));  // a chunk fits its 4 bytes

/// One ring's lines beside its slots: slots read (freed) by the receiver,
/// counting up forever, and the sender's request to be told when one is.
/// How far the sender has written is in the slots themselves (their seq,
/// write_slot): a count of its own would be one more line per message.
struct alignas(kCacheLine) RingCounters {
  /// Set by a sender that found the ring full: the receiver rings the
  /// sender's bell when it frees a slot.
  std::atomic<uint32_t> sender_waits;
  alignas(kCacheLine) std::atomic<uint64_t> read;
};
static_assert(sizeof(RingCounters) == 2 * kCacheLine);

/// One rank's own lines.
struct alignas(kCacheLine) P2pRankArea {
  FlagLine bell;        // bumped by anyone with news for this rank (knock)
  FlagLine background;  // bumped as well while `listening`: wakes the rank's background thread
  /// Nonzero while the rank's background thread sleeps waiting for news;
  /// a thread of the rank that reads the rings itself clears it, so that
  /// news for it does not also wake the background thread.
  alignas(kCacheLine) std::atomic<uint32_t> listening;
  FlagLine aborted;  // seq != 0: this rank aborted; payload[0]: the error's kind
  FlagLine closed;   // seq != 0: this rank closed its transport (a goodbye)
  char reason[1024];
  uint64_t pid;
};

/// Tells rank `area`'s threads there is news: wakes the thread that waits
/// for it, and the background thread if it listens.
inline void knock(P2pRankArea& area) {
  ring_bell(area.bell);
  if (area.listening.load(std::memory_order_seq_cst) != 0) ring_bell(area.background);
}

/// How a message of `bytes` travels: kPeerRead only when the ranks allow it.
inline Carry carry_for(size_t bytes, bool peer_read_allowed) {
  return peer_read_allowed && bytes >= kP2pPeerReadMinBytes ? Carry::kPeerRead : Carry::kSlots;
}

/// Slots a message takes in the ring.
inline uint64_t slots_for(size_t bytes, Carry carry) {
  if (carry == Carry::kPeerRead || bytes <= kP2pSlotPayload) return 1;
  return (bytes + kP2pSlotPayload - 1) / kP2pSlotPayload;
}

/// A message of up to this many slots moves at once, with no request
/// (try_send_now, try_recv_now), when the ring has room for all of them
/// (rings of fewer slots: that many): 40,320 bytes, so 32 KiB fits. Below
/// the size read from the sender.
inline constexpr uint64_t kP2pAtOnceSlots = 5;
static_assert(kP2pAtOnceSlots * kP2pSlotPayload < kP2pPeerReadMinBytes);

/// Messages larger than this are written into the ring with streaming
/// stores, which bypass the cache. With ordinary stores every line of a
/// slot is first fetched from the receiver's cache, which has just read
/// it: on a loaded 2-vCPU AMD EPYC VM a 2-rank 1 MiB exchange took 3.8-4.3
/// ms with memcpy against 0.35-0.58 with streaming stores (16 MiB: 63-64
/// ms against 13-18). A message that fits the caches is read back from
/// them instead of memory: on a 2-vCPU Xeon VM (2026-12-02, single copy
/// off) 8 KiB to 256 KiB exchanges took 30-45% less time with memcpy
/// (64 KiB: 11.9-15.1 us against 21.2-22.0).
inline constexpr size_t kP2pStreamStoreMinBytes = size_t{256} << 10;

/// Where the parts of a segment for `size` ranks lie, and how many slots
/// each ring has.
struct P2pLayout {
  explicit P2pLayout(int size);
  size_t areas = 0;     // offset of rank 0's P2pRankArea
  size_t counters = 0;  // offset of the (0, 0) RingCounters
  size_t slots = 0;     // offset of ring (0, 0)'s first slot
  size_t bytes = 0;     // the whole segment
  uint64_t ring_slots = 0;
  int size = 0;

  size_t ring_index(int from, int to) const {
    return static_cast<size_t>(from) * static_cast<size_t>(size) + static_cast<size_t>(to);
  }
  size_t counters_offset(int from, int to) const {
    return counters + ring_index(from, to) * sizeof(RingCounters);
  }
  /// Slot n (counted forever) of the ring from `from` to `to`.
  size_t slot_offset(int from, int to, uint64_t n) const {
    return slots + (ring_index(from, to) * ring_slots + n % ring_slots) * kP2pSlotBytes;
  }
};

}  // namespace tdist::transport::shm
