#pragma once

// Internal: reduce-scatter by recursive halving and Rabenseifner's
// all-reduce (recursive-halving reduce-scatter, then recursive-doubling
// all-gather). Include as "algorithms/patterns/recursive_halving.h".
//
// References: Rabenseifner 2004, "Optimization of Collective Reduction
// Operations" (ICCS); Thakur, Rabenseifner & Gropp 2005, "Optimization of
// Collective Communication Operations in MPICH".
//
// Non-powers of two use the fold of recursive_doubling.h. In the core the
// pof2 virtual ranks start out each responsible for all chunks. In halving
// step k (k = 0 .. lg(pof2) - 1) with mask = pof2 / 2^(k+1), virtual rank v
// is responsible for the aligned group of 2·mask virtual ranks containing
// it; it pairs with w = v XOR mask, sends the chunks of w's half of the group
// and receives (and reduces) the chunks of its own half, which it keeps.
// After the last step v holds its own virtual rank's chunks fully reduced:
// the highest bit goes first so that virtual rank v ends with chunk v (not
// its bit reversal), which is what the reduce-scatter output and the
// following all-gather (recursive_doubling_all_gather_core_step, lowest bit
// first) both want.
//
// Cost: reduce-scatter lg p·alpha + n(p-1)/p·(beta + gamma) for p a power
// of two; all-reduce 2 lg p·alpha + 2n(p-1)/p·beta + n(p-1)/p·gamma; plus
// one fold step on each side (moving the whole buffer) otherwise.

#include <vector>

#include "algorithms/patterns/chunking.h"
#include "algorithms/patterns/recursive_doubling.h"

namespace tdist::patterns {

/// Core steps of recursive halving: lg(pof2) = floor(log2 p).
constexpr int recursive_halving_num_core_steps(int p) {
  return floor_log2(p);
}

/// The virtual ranks whose chunks virtual rank `vrank` keeps (receives and
/// reduces) in halving step `step` of a core of `pof2` virtual ranks: the
/// aligned group of pof2 / 2^(step+1) containing it. Its partner's group is
/// what it sends.
constexpr ChunkRange recursive_halving_kept_vranks(int vrank, int pof2, int step) {
  const int size = pof2 >> (step + 1);
  return {vrank & ~(size - 1), size};
}

/// The real rank `rank` exchanges with in halving step `step`
/// (virtual rank v XOR pof2 / 2^(step+1)), kNoPeer for extras.
constexpr int recursive_halving_partner(int rank, int p, int step) {
  assert(0 <= step && step < recursive_halving_num_core_steps(p));
  const int v = fold_virtual_rank(rank, p);
  if (v == kNoPeer) return kNoPeer;
  return fold_real_rank(v ^ (fold_pof2(p) >> (step + 1)), p);
}

/// Halving step `step` of `rank`: send the partner's half, receive and reduce
/// its own half, chunk indices under `layout`. Idle for extras.
constexpr Step recursive_halving_core_step(int rank, int p, int step, FoldLayout layout) {
  const int partner = recursive_halving_partner(rank, p, step);
  if (partner == kNoPeer) return Step{};
  const int pof2 = fold_pof2(p);
  const int v = fold_virtual_rank(rank, p);
  const int w = v ^ (pof2 >> (step + 1));
  return exchange_step(partner, fold_chunks(recursive_halving_kept_vranks(w, pof2, step), p, layout), partner,
                       fold_chunks(recursive_halving_kept_vranks(v, pof2, step), p, layout), /*reduce=*/true);
}

/// The chunks `rank` holds fully reduced after the halving core, under
/// `layout`: its virtual rank's chunks (under kPerRank a proxy holds its
/// extra's block too); empty for extras.
constexpr ChunkRange recursive_halving_owned_chunks(int rank, int p, FoldLayout layout) {
  const int v = fold_virtual_rank(rank, p);
  if (v == kNoPeer) return ChunkRange{};
  return fold_chunks(ChunkRange{v, 1}, p, layout);
}

/// All steps of recursive_halving_reduce_scatter: lg(pof2) (+2 for the fold).
constexpr int recursive_halving_reduce_scatter_num_steps(int p) {
  return recursive_halving_num_core_steps(p) + 2 * fold_num_steps(p);
}

/// All steps of rabenseifner_all_reduce: 2 lg(pof2) (+2 for the fold).
constexpr int rabenseifner_all_reduce_num_steps(int p) {
  return 2 * recursive_halving_num_core_steps(p) + 2 * fold_num_steps(p);
}

/// Reduce-scatter of `rank` over p chunks (chunk i is rank i's output block):
/// fold-in of all chunks (reduce), lg(pof2) halving steps, fold-out of the
/// extra's block. Afterwards rank r holds chunk r fully reduced.
inline std::vector<Step> recursive_halving_reduce_scatter(int rank, int p) {
  std::vector<Step> steps;
  steps.reserve(static_cast<size_t>(recursive_halving_reduce_scatter_num_steps(p)));
  if (fold_num_steps(p) != 0) steps.push_back(fold_in_step(rank, p, ChunkRange{0, p}, /*reduce=*/true));
  for (int s = 0; s < recursive_halving_num_core_steps(p); ++s) {
    steps.push_back(recursive_halving_core_step(rank, p, s, FoldLayout::kPerRank));
  }
  if (fold_num_steps(p) != 0) steps.push_back(fold_out_step(rank, p, ChunkRange{rank & ~1, 1}));
  return steps;
}

/// Rabenseifner all-reduce of `rank` over fold_num_chunks(p, layout) chunks:
/// fold-in of all chunks (reduce), lg(pof2) halving steps, lg(pof2) doubling
/// all-gather steps, fold-out of all chunks. Every rank ends with every chunk
/// holding every contribution exactly once. kPerVirtualRank (pof2 balanced
/// chunks) is the better choice unless the caller needs per-rank chunks.
inline std::vector<Step> rabenseifner_all_reduce(int rank, int p,
                                                 FoldLayout layout = FoldLayout::kPerVirtualRank) {
  const ChunkRange whole{0, fold_num_chunks(p, layout)};
  std::vector<Step> steps;
  steps.reserve(static_cast<size_t>(rabenseifner_all_reduce_num_steps(p)));
  if (fold_num_steps(p) != 0) steps.push_back(fold_in_step(rank, p, whole, /*reduce=*/true));
  for (int s = 0; s < recursive_halving_num_core_steps(p); ++s) {
    steps.push_back(recursive_halving_core_step(rank, p, s, layout));
  }
  for (int s = 0; s < recursive_doubling_num_core_steps(p); ++s) {
    steps.push_back(recursive_doubling_all_gather_core_step(rank, p, s, layout));
  }
  if (fold_num_steps(p) != 0) steps.push_back(fold_out_step(rank, p, whole));
  return steps;
}

}  // namespace tdist::patterns
