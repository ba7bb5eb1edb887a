#pragma once

// The arithmetic of cutting a shared-memory collective's bytes into rounds,
// sections, pieces and single-copy tiles: functions of sizes, ranks and
// the group's buffer size (tests/algorithms/test_shm_arithmetic.cc).

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

#include "algorithms/tuning/tuning.h"
#include "tdist/errors.h"
#include "transport/shm/shm_group.h"

namespace tdist::algorithms::shm::detail {

using transport::shm::ShmGroup;

/// For a block laid out as `segments` one after another (the segmented
/// reduce_scatter input and all_gather output), calls fn(segment, offset,
/// from, n) for every piece of its units [begin, begin + length): n units
/// at `offset` units into `segment`, `from` units past begin.
/// `size_of(segment)` gives a segment's units.
template <typename Segment, typename SizeOf, typename Fn>
void for_each_piece(const std::vector<Segment>& segments, SizeOf size_of, size_t begin, size_t length,
                    Fn&& fn) {
  const size_t end = begin + length;
  size_t at = 0;  // units of the block before this segment
  for (const Segment& segment : segments) {
    if (at >= end) break;
    const size_t size = size_of(segment);
    const size_t from = std::max(at, begin);
    const size_t to = std::min(at + size, end);
    if (from < to) fn(segment, from - at, from - begin, to - from);
    at += size;
  }
}

/// Piece `index` of a range of `total` units cut into pieces of `piece`
/// units: [begin, begin + length), empty past the end.
struct Piece {
  size_t begin;
  size_t length;
};
inline Piece piece_of(size_t total, size_t piece, size_t index) {
  size_t begin = std::min(total, index * piece);
  return Piece{begin, std::min(total, begin + piece) - begin};
}

inline size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}

/// Elements per piece of one two-shot round of `round_count` elements
/// (`element_bytes` each) over `p` ranks, at most `full_section`: an even
/// share, rounded up to whole cache lines. A round shorter than a buffer
/// (the last one, or a message smaller than a buffer) cut into full sections
/// would leave all the reducing to the first ranks (a 2-rank 256 KiB
/// all_reduce took 46 us instead of 25 with 1 MiB buffers).
inline size_t two_shot_section(size_t round_count, int p, size_t element_bytes, size_t full_section) {
  const size_t line = 64 / std::gcd(size_t{64}, element_bytes);  // elements per cache line
  return std::min(full_section, ceil_div(ceil_div(round_count, static_cast<size_t>(p)), line) * line);
}

/// Bytes of a single-copy broadcast of `nbytes` over `p` ranks that the root
/// writes into the front of each reader's tensor; each reader reads the
/// rest. With a core per rank every rank then copies about (p - 1) / p of
/// the message, instead of the readers copying all of it while the root
/// waits. Whole 4 KiB units, so that each slice covers whole pages when the
/// tensor starts on one. Below 32 KiB a second system call costs more than
/// it saves: the readers copy everything (kBroadcastShareMinBytes,
/// algorithms/tuning/tuning.h).
inline size_t broadcast_pushed_bytes(size_t nbytes, int p) {
  if (nbytes < kBroadcastShareMinBytes) return 0;
  return nbytes / static_cast<size_t>(p) / 4096 * 4096;
}

/// Bytes a single-copy reduction over `p` ranks reads from each peer per
/// tile: kSingleCopyTileBytes shared by the peers, in whole pages, at least
/// 16 KiB (a multiple of every element size).
inline size_t single_copy_tile_bytes(int p) {
  const size_t share = kSingleCopyTileBytes / static_cast<size_t>(std::max(1, p - 1)) / 4096 * 4096;
  return std::max<size_t>(size_t{16} << 10, share);
}

/// Elements per piece of a single-copy reduction of `count` elements
/// (`element_bytes` each) over `p` ranks: an even share rounded up to whole
/// 4 KiB units, so that two owners writing neighbouring pieces into a peer's
/// tensor never share a cache line when the tensor starts on one (nor a
/// page, when it starts on a page).
inline size_t single_copy_piece(size_t count, int p, size_t element_bytes) {
  const size_t unit = 4096 / std::gcd(size_t{4096}, element_bytes);  // elements per 4 KiB
  return std::max(unit, ceil_div(ceil_div(count, static_cast<size_t>(p)), unit) * unit);
}

/// Bytes of a buffer each of `parts` sections may use: a multiple of 64
/// (sections start on cache lines) and of `element_bytes`.
size_t section_bytes(const ShmGroup& group, int parts, size_t element_bytes);

}  // namespace tdist::algorithms::shm::detail
