#pragma once

// Internal: ring schedules for reduce-scatter, all-gather and all-reduce.
// Include as "algorithms/patterns/ring.h".
//
// In every step rank r sends to r + 1 and receives from r - 1 (mod p). The
// buffer is cut into p chunks (chunking.h). Ownership convention: rank r owns
// chunk r. After the reduce-scatter phase rank r holds the fully reduced
// chunk r, which is exactly reduce_scatter's output with no final copy, and
// the all-gather phase starts from "rank r holds chunk r", which is exactly
// all_gather's input. All-reduce is the two phases back to back.
//
// Cost (docs: performance.md): each phase takes p - 1 steps moving one chunk
// (n/p) per rank per step, so all-reduce is 2(p-1)·alpha + 2n(p-1)/p·beta +
// n(p-1)/p·gamma: bandwidth-optimal, latency linear in p. See Patarasuk &
// Yuan 2009, "Bandwidth optimal all-reduce algorithms for clusters of
// workstations", and Thakur, Rabenseifner & Gropp 2005, "Optimization of
// Collective Communication Operations in MPICH" (ring all-gather).

#include <vector>

#include "algorithms/patterns/chunking.h"

namespace tdist::patterns {

/// The rank this rank sends to in a ring.
constexpr int ring_next(int rank, int p) {
  return (rank + 1) % p;
}

/// The rank this rank receives from in a ring.
constexpr int ring_prev(int rank, int p) {
  return rank_mod(rank - 1, p);
}

/// Number of chunks the ring schedules cut a buffer into: p.
constexpr int ring_num_chunks(int p) {
  return p;
}

/// The chunk rank `rank` owns: after reduce-scatter it holds it reduced, and
/// all-gather starts with it. The convention is the identity.
constexpr int ring_owned_chunk(int rank, int /*p*/) {
  return rank;
}

/// Steps of the reduce-scatter phase (and of ring reduce_scatter): p - 1.
constexpr int ring_reduce_scatter_num_steps(int p) {
  return p - 1;
}

/// Steps of the all-gather phase (and of ring all_gather): p - 1.
constexpr int ring_all_gather_num_steps(int p) {
  return p - 1;
}

/// Steps of ring all-reduce: 2(p - 1).
constexpr int ring_all_reduce_num_steps(int p) {
  return 2 * (p - 1);
}

/// Step `step` in [0, p - 1) of the reduce-scatter phase: send chunk
/// r - step - 1, receive chunk r - step - 2 and reduce it into the local one
/// (mod p). Chunk c starts at rank c + 1 and travels the ring collecting one
/// contribution per hop, arriving complete at rank c in the last step.
constexpr Step ring_reduce_scatter_step(int rank, int p, int step) {
  assert(0 <= rank && rank < p && 0 <= step && step < ring_reduce_scatter_num_steps(p));
  return exchange_step(ring_next(rank, p), ChunkRange{rank_mod(rank - step - 1, p), 1}, ring_prev(rank, p),
                       ChunkRange{rank_mod(rank - step - 2, p), 1}, /*reduce=*/true);
}

/// Step `step` in [0, p - 1) of the all-gather phase: send chunk r - step,
/// receive chunk r - step - 1 (mod p) and store it. Step 0 sends the owned
/// chunk r; each step forwards the chunk received in the previous one.
constexpr Step ring_all_gather_step(int rank, int p, int step) {
  assert(0 <= rank && rank < p && 0 <= step && step < ring_all_gather_num_steps(p));
  return exchange_step(ring_next(rank, p), ChunkRange{rank_mod(rank - step, p), 1}, ring_prev(rank, p),
                       ChunkRange{rank_mod(rank - step - 1, p), 1});
}

/// Step `step` in [0, 2(p - 1)) of ring all-reduce: the reduce-scatter phase,
/// then the all-gather phase.
constexpr Step ring_all_reduce_step(int rank, int p, int step) {
  const int phase = ring_reduce_scatter_num_steps(p);
  return step < phase ? ring_reduce_scatter_step(rank, p, step) : ring_all_gather_step(rank, p, step - phase);
}

/// The whole reduce-scatter schedule of `rank`: p - 1 steps over p chunks;
/// afterwards the rank holds chunk `rank` fully reduced.
inline std::vector<Step> ring_reduce_scatter(int rank, int p) {
  std::vector<Step> steps;
  steps.reserve(static_cast<size_t>(ring_reduce_scatter_num_steps(p)));
  for (int s = 0; s < ring_reduce_scatter_num_steps(p); ++s)
    steps.push_back(ring_reduce_scatter_step(rank, p, s));
  return steps;
}

/// The whole all-gather schedule of `rank`: p - 1 steps over p chunks,
/// starting from the rank holding chunk `rank`.
inline std::vector<Step> ring_all_gather(int rank, int p) {
  std::vector<Step> steps;
  steps.reserve(static_cast<size_t>(ring_all_gather_num_steps(p)));
  for (int s = 0; s < ring_all_gather_num_steps(p); ++s) steps.push_back(ring_all_gather_step(rank, p, s));
  return steps;
}

/// The whole all-reduce schedule of `rank`: 2(p - 1) steps over p chunks.
inline std::vector<Step> ring_all_reduce(int rank, int p) {
  std::vector<Step> steps;
  steps.reserve(static_cast<size_t>(ring_all_reduce_num_steps(p)));
  for (int s = 0; s < ring_all_reduce_num_steps(p); ++s) steps.push_back(ring_all_reduce_step(rank, p, s));
  return steps;
}

}  // namespace tdist::patterns
