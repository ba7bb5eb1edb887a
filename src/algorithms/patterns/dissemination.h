#pragma once

// Internal: the dissemination barrier. Include as
// "algorithms/patterns/dissemination.h".
//
// Hensgen, Finkel & Manber 1988, "Two Algorithms for Barrier
// Synchronization" (IJPP). In step k (k = 0 .. ceil(log2 p) - 1) rank r
// signals (r + 2^k) mod p and waits for a signal from (r - 2^k) mod p. After
// step k a rank has heard, directly or transitively, from min(2^(k+1), p)
// ranks (itself included), so after the last step from all of them, for any
// p. ceil(log2 p)·alpha, no root, no reduction.
//
// Steps are Steps with empty chunk ranges: send_to is the rank to signal,
// recv_from the rank to wait for, and the messages carry no data. A rank
// must not start step k + 1 before the wait of step k is done.

#include <vector>

#include "algorithms/patterns/chunking.h"

namespace tdist::patterns {

/// Steps of the dissemination barrier: ceil(log2 p).
constexpr int dissemination_num_steps(int p) {
  return ceil_log2(p);
}

/// Step `step` of `rank`: signal rank + 2^step, wait for rank - 2^step.
constexpr Step dissemination_step(int rank, int p, int step) {
  assert(0 <= rank && rank < p && 0 <= step && step < dissemination_num_steps(p));
  const int d = 1 << step;
  return exchange_step((rank + d) % p, ChunkRange{}, rank_mod(rank - d, p), ChunkRange{});
}

/// The whole dissemination barrier schedule of `rank`.
inline std::vector<Step> dissemination_barrier(int rank, int p) {
  std::vector<Step> steps;
  steps.reserve(static_cast<size_t>(dissemination_num_steps(p)));
  for (int s = 0; s < dissemination_num_steps(p); ++s) steps.push_back(dissemination_step(rank, p, s));
  return steps;
}

}  // namespace tdist::patterns
