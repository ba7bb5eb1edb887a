#pragma once

// Internal: Bruck's all-gather. Include as "algorithms/patterns/bruck.h".
//
// Bruck, Ho, Kipnis, Upfal & Weathersby 1997, "Efficient Algorithms for
// All-to-All Communications in Multiport Message-Passing Systems" (IEEE
// TPDS), as used for all-gather in MPICH (Thakur, Rabenseifner & Gropp 2005).
//
// Every rank works in a temporary buffer of p blocks in *rotated* order:
// position i holds the block of rank (rank + i) mod p, so the rank's own
// block starts at position 0. In step k (k = 0 .. ceil(log2 p) - 1) with
// d = 2^k, rank r sends its first min(d, p - d) positions to r - d and
// receives as many blocks from r + d into positions [d, d + count): the
// sender's positions [0, count) are exactly the receiver's [d, d + count).
// After the last step all p positions are filled; the final rotation moves
// position i to block (rank + i) mod p of the output (bruck_position gives
// the inverse). Each rank receives p - 1 blocks in total: ceil(log2 p)·alpha
// + n(p-1)/p·beta for any p.
//
// Step chunk indices are positions in the rotated buffer, so the sender's
// send_chunks ({0, count}) and the receiver's recv_chunks ({d, count}) name
// different positions holding the same blocks.

#include <algorithm>
#include <vector>

#include "algorithms/patterns/chunking.h"

namespace tdist::patterns {

/// Steps of Bruck's all-gather: ceil(log2 p).
constexpr int bruck_num_steps(int p) {
  return ceil_log2(p);
}

/// Blocks moved in step `step`: min(2^step, p - 2^step).
constexpr int bruck_block_count(int p, int step) {
  assert(0 <= step && step < bruck_num_steps(p));
  const int d = 1 << step;
  return std::min(d, p - d);
}

/// Step `step` of `rank`: send positions [0, count) to rank - 2^step, receive
/// positions [2^step, 2^step + count) from rank + 2^step (mod p), store.
constexpr Step bruck_all_gather_step(int rank, int p, int step) {
  assert(0 <= rank && rank < p);
  const int d = 1 << step;
  const int count = bruck_block_count(p, step);
  return exchange_step(rank_mod(rank - d, p), ChunkRange{0, count}, (rank + d) % p, ChunkRange{d, count});
}

/// The whole Bruck all-gather schedule of `rank`.
inline std::vector<Step> bruck_all_gather(int rank, int p) {
  std::vector<Step> steps;
  steps.reserve(static_cast<size_t>(bruck_num_steps(p)));
  for (int s = 0; s < bruck_num_steps(p); ++s) steps.push_back(bruck_all_gather_step(rank, p, s));
  return steps;
}

/// Whose block sits at `position` of `rank`'s rotated buffer:
/// (rank + position) mod p.
constexpr int bruck_block_owner(int rank, int p, int position) {
  assert(0 <= position && position < p);
  return (rank + position) % p;
}

/// Where rank `owner`'s block sits in `rank`'s rotated buffer:
/// (owner - rank) mod p. The final rotation copies position
/// bruck_position(rank, p, j) to output block j.
constexpr int bruck_position(int rank, int p, int owner) {
  assert(0 <= owner && owner < p);
  return rank_mod(owner - rank, p);
}

}  // namespace tdist::patterns
