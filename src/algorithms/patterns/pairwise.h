#pragma once

// Internal: pairwise-exchange all-to-all. Include as
// "algorithms/patterns/pairwise.h".
//
// In step s (s = 0 .. p - 2), with distance i = s + 1, rank r sends its block
// for rank (r + i) mod p and receives the block from rank (r - i) mod p, so
// every step is a permutation and every ordered pair (src, dst), src != dst,
// is served exactly once. The own block (r -> r) is a local copy the caller
// makes. Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective
// Communication Operations in MPICH": (p-1)·alpha + n·beta, the choice for
// large messages.
//
// Step chunk indices: send_chunks names a block of the *send* buffer (block
// j is for rank j), recv_chunks a block of the *receive* buffer (block j is
// from rank j). So the sender's send_chunks is {dst, 1} and the receiver's
// recv_chunks is {src, 1}.

#include <vector>

#include "algorithms/patterns/chunking.h"

namespace tdist::patterns {

/// Steps of pairwise all-to-all: p - 1.
constexpr int pairwise_num_steps(int p) {
  return p - 1;
}

/// Step `step` in [0, p - 1) of `rank`: distance step + 1.
constexpr Step pairwise_step(int rank, int p, int step) {
  assert(0 <= rank && rank < p && 0 <= step && step < pairwise_num_steps(p));
  const int dst = (rank + step + 1) % p;
  const int src = rank_mod(rank - step - 1, p);
  return exchange_step(dst, ChunkRange{dst, 1}, src, ChunkRange{src, 1});
}

/// The whole pairwise all-to-all schedule of `rank` (without the local copy).
inline std::vector<Step> pairwise_all_to_all(int rank, int p) {
  std::vector<Step> steps;
  steps.reserve(static_cast<size_t>(pairwise_num_steps(p)));
  for (int s = 0; s < pairwise_num_steps(p); ++s) steps.push_back(pairwise_step(rank, p, s));
  return steps;
}

}  // namespace tdist::patterns
