#pragma once

// Internal: the vocabulary every pattern in src/algorithms/patterns/ shares.
// Include as "algorithms/patterns/chunking.h".
//
// A pattern says who talks to whom, in which round, about which chunks; it
// never touches data, so it can be unit-tested alone (the UCC coll_patterns
// idea). Buffers are cut into chunks by the balanced partition below, chunks
// are named by index, and a schedule is a std::vector<Step> with one Step per
// round. The algorithm layer maps chunk indices to elements with
// chunk_elements() / chunk_range_elements() and moves the bytes.
//
// Ranks are `int` in [0, p), group sizes p >= 1. Preconditions are checked
// with assert() only: these functions sit on hot paths and their arguments
// were validated at the API boundary.

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstddef>
#include <vector>

namespace tdist::patterns {

/// "No peer": the send_to / recv_from of a Step that does not send / receive,
/// the parent of a tree's root, the virtual rank of a rank that sits out.
inline constexpr int kNoPeer = -1;

// ---------------------------------------------------------------------------
// Integer helpers
// ---------------------------------------------------------------------------

/// True if x is a power of two (1, 2, 4, ...).
constexpr bool is_pow2(int x) {
  return x > 0 && std::has_single_bit(static_cast<unsigned>(x));
}

/// floor(log2(x)) for x >= 1; floor_log2(1) == 0.
constexpr int floor_log2(int x) {
  assert(x >= 1);
  return std::bit_width(static_cast<unsigned>(x)) - 1;
}

/// ceil(log2(x)) for x >= 1; ceil_log2(1) == 0, ceil_log2(5) == 3.
constexpr int ceil_log2(int x) {
  assert(x >= 1);
  return x == 1 ? 0 : std::bit_width(static_cast<unsigned>(x - 1));
}

/// The largest power of two <= x, for x >= 1.
constexpr int pow2_floor(int x) {
  assert(x >= 1);
  return static_cast<int>(std::bit_floor(static_cast<unsigned>(x)));
}

/// The smallest power of two >= x, for x >= 1.
constexpr int pow2_ceil(int x) {
  assert(x >= 1);
  return static_cast<int>(std::bit_ceil(static_cast<unsigned>(x)));
}

/// The lowest set bit of x > 0 (12 -> 4).
constexpr int lowest_bit(int x) {
  assert(x > 0);
  return x & -x;
}

/// x mod p in [0, p) for any x (C++'s % keeps the sign of x); p >= 1.
constexpr int rank_mod(int x, int p) {
  assert(p >= 1);
  const int r = x % p;
  return r < 0 ? r + p : r;
}

// ---------------------------------------------------------------------------
// Element ranges: balanced partitions and pipeline segments
// ---------------------------------------------------------------------------

/// A half-open range [offset, offset + length) of elements.
struct ElementRange {
  size_t offset = 0;
  size_t length = 0;

  constexpr size_t end() const { return offset + length; }
  constexpr bool empty() const { return length == 0; }
  bool operator==(const ElementRange&) const = default;
};

/// Where chunk `index` of a balanced partition of `count` elements into
/// `parts` chunks starts; index may be `parts`, which gives `count`. The first
/// count % parts chunks get one element more than the others.
constexpr size_t chunk_offset(size_t count, int parts, int index) {
  assert(parts >= 1 && index >= 0 && index <= parts);
  const size_t base = count / static_cast<size_t>(parts);
  const size_t longer = count % static_cast<size_t>(parts);
  const auto i = static_cast<size_t>(index);
  return i * base + std::min(i, longer);
}

/// The elements of chunk `index` in [0, parts) of a balanced partition of
/// `count` elements: lengths differ by at most one and the chunks tile
/// [0, count) in order. Chunks are empty when count < parts.
constexpr ElementRange chunk_elements(size_t count, int parts, int index) {
  assert(index < parts);
  const size_t begin = chunk_offset(count, parts, index);
  return {begin, chunk_offset(count, parts, index + 1) - begin};
}

/// All `parts` chunks of a balanced partition of `count` elements.
inline std::vector<ElementRange> partition(size_t count, int parts) {
  std::vector<ElementRange> chunks;
  chunks.reserve(static_cast<size_t>(parts));
  for (int i = 0; i < parts; ++i) chunks.push_back(chunk_elements(count, parts, i));
  return chunks;
}

/// How many pipeline segments of at most `max_segment` elements cover
/// `length` elements (0 for an empty range).
constexpr size_t segment_count(size_t length, size_t max_segment) {
  assert(max_segment >= 1);
  return length / max_segment + (length % max_segment != 0 ? 1 : 0);
}

/// Segment `index` of `range` cut into pieces of `max_segment` elements: all
/// segments have exactly max_segment elements except a shorter last one, so
/// segment boundaries stay at fixed strides (a stride that is a multiple of a
/// cache line or page keeps every segment aligned).
constexpr ElementRange segment_of(ElementRange range, size_t max_segment, size_t index) {
  assert(index < segment_count(range.length, max_segment));
  const size_t begin = index * max_segment;
  return {range.offset + begin, std::min(max_segment, range.length - begin)};
}

/// All pipeline segments of `range`, in order; none for an empty range.
inline std::vector<ElementRange> segments(ElementRange range, size_t max_segment) {
  std::vector<ElementRange> out;
  const size_t n = segment_count(range.length, max_segment);
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back(segment_of(range, max_segment, i));
  return out;
}

// ---------------------------------------------------------------------------
// Chunk ranges and schedule steps
// ---------------------------------------------------------------------------

/// A half-open range [first, first + count) of chunk indices. Patterns whose
/// chunk i is "rank i's block" (all-gather, gather, reduce-scatter) also use
/// it for ranges of ranks.
struct ChunkRange {
  int first = 0;
  int count = 0;

  constexpr int end() const { return first + count; }
  constexpr bool empty() const { return count == 0; }
  constexpr bool contains(int chunk) const { return first <= chunk && chunk < end(); }
  bool operator==(const ChunkRange&) const = default;
};

/// The elements covered by the contiguous chunks `chunks` of a balanced
/// partition of `count` elements into `parts` chunks.
constexpr ElementRange chunk_range_elements(size_t count, int parts, ChunkRange chunks) {
  assert(chunks.first >= 0 && chunks.count >= 0 && chunks.end() <= parts);
  const size_t begin = chunk_offset(count, parts, chunks.first);
  return {begin, chunk_offset(count, parts, chunks.end()) - begin};
}

/// What one rank does in one round of a schedule.
///
/// Rounds are matched across ranks: if rank a's step k has send_to == b, then
/// rank b's step k has recv_from == a, and for every pattern except Bruck and
/// pairwise (whose headers say otherwise) recv_chunks on b names the same
/// chunks as send_chunks on a. A rank posts its send and its receive of a
/// round together (waiting for the receive first deadlocks rings and
/// exchanges) and starts round k + 1 once both are done. The data sent is
/// the rank's state at the start of the round, so when the received range
/// overlaps the sent one the receive must land in scratch space first.
/// A step with neither send nor receive is an idle round, kept so that step
/// k means round k on every rank.
struct Step {
  int send_to = kNoPeer;    ///< Peer to send to, or kNoPeer.
  ChunkRange send_chunks;   ///< Chunks sent (may be empty: a pure signal).
  int recv_from = kNoPeer;  ///< Peer to receive from, or kNoPeer.
  ChunkRange recv_chunks;   ///< Chunks received (may be empty: a pure signal).
  bool reduce = false;      ///< Received chunks are reduced into the local ones (else they replace them).

  constexpr bool sends() const { return send_to != kNoPeer; }
  constexpr bool receives() const { return recv_from != kNoPeer; }
  constexpr bool idle() const { return !sends() && !receives(); }
  bool operator==(const Step&) const = default;
};

/// A step that only sends `chunks` to `to`.
constexpr Step send_step(int to, ChunkRange chunks) {
  Step s;
  s.send_to = to;
  s.send_chunks = chunks;
  return s;
}

/// A step that only receives `chunks` from `from`, reducing or storing them.
constexpr Step recv_step(int from, ChunkRange chunks, bool reduce = false) {
  Step s;
  s.recv_from = from;
  s.recv_chunks = chunks;
  s.reduce = reduce;
  return s;
}

/// A step that sends `send` to `to` and receives `recv` from `from`.
constexpr Step exchange_step(int to, ChunkRange send, int from, ChunkRange recv, bool reduce = false) {
  Step s = send_step(to, send);
  s.recv_from = from;
  s.recv_chunks = recv;
  s.reduce = reduce;
  return s;
}

}  // namespace tdist::patterns
