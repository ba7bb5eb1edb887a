#pragma once

// Internal: recursive doubling (all-reduce, all-gather) and the fold that
// makes the power-of-two patterns work for any p; recursive_halving.h reuses
// the fold. Include as "algorithms/patterns/recursive_doubling.h".
//
// The fold (Rabenseifner's handling of non-powers of two, as in MPICH; see
// Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective
// Communication Operations in MPICH"): let pof2 be the largest power of two
// <= p and rem = p - pof2. The first 2·rem ranks pair up (0,1), (2,3), ...:
// the even rank of a pair (an *extra*) hands its data to the odd one (its
// *proxy*) in one fold-in step and sits out; the proxy and the p - 2·rem
// *core* ranks run the power-of-two pattern as pof2 *virtual ranks*; in one
// fold-out step each proxy hands the result back to its extra. Virtual rank
// v is real rank 2v + 1 for v < rem and v + rem otherwise, and stands for the
// real ranks [fold_first_rank(v), fold_first_rank(v + 1)): two for v < rem,
// one otherwise. Because that mapping is monotone, a range of virtual ranks
// stands for a contiguous range of real ranks, so chunk ranges stay
// contiguous under either FoldLayout.
//
// Recursive doubling: in core step k the virtual rank v exchanges with
// v XOR 2^k (Thakur, Rabenseifner & Gropp 2005). For all-reduce both send
// their whole (partially reduced) buffer and reduce what they receive; for
// all-gather both send the blocks of the aligned group of 2^k virtual ranks
// they hold and store what they receive, doubling what they hold.
// Cost: lg(pof2) core steps (+2 fold steps when p is not a power of two);
// all-reduce lg p·alpha + n·lg p·(beta + gamma), all-gather (p a power of
// two) lg p·alpha + n(p-1)/p·beta.

#include <vector>

#include "algorithms/patterns/chunking.h"

namespace tdist::patterns {

// ---------------------------------------------------------------------------
// The fold
// ---------------------------------------------------------------------------

/// What a rank does in the fold.
enum class FoldRole : unsigned char {
  kCore,   ///< Not in a pair: takes part in the power-of-two core as itself.
  kProxy,  ///< Odd rank < 2·rem: takes part in the core for itself and its extra.
  kExtra,  ///< Even rank < 2·rem: hands its data to rank + 1 and sits out.
};

/// How chunk indices relate to virtual ranks in the folded patterns.
enum class FoldLayout : unsigned char {
  /// p chunks, chunk i = real rank i's block; virtual rank v's chunks are the
  /// blocks of the real ranks it stands for. Needed when the result layout is
  /// per rank (all-gather, reduce-scatter).
  kPerRank,
  /// pof2 chunks, chunk v = virtual rank v's share. Balances the core's
  /// traffic when the layout is free (Rabenseifner all-reduce): the busiest
  /// rank moves n/pof2 per share instead of 2n/p.
  kPerVirtualRank,
};

/// The largest power of two <= p: the number of virtual ranks.
constexpr int fold_pof2(int p) {
  return pow2_floor(p);
}

/// rem = p - pof2: the number of extras (and of proxies).
constexpr int fold_num_extras(int p) {
  return p - fold_pof2(p);
}

/// Fold steps on each side of the core: 1 if p is not a power of two, else 0.
constexpr int fold_num_steps(int p) {
  return is_pow2(p) ? 0 : 1;
}

/// The role of `rank` in the fold.
constexpr FoldRole fold_role(int rank, int p) {
  assert(0 <= rank && rank < p);
  if (rank >= 2 * fold_num_extras(p)) return FoldRole::kCore;
  return rank % 2 == 0 ? FoldRole::kExtra : FoldRole::kProxy;
}

/// The other rank of `rank`'s pair (extra <-> proxy), kNoPeer for core ranks.
constexpr int fold_partner(int rank, int p) {
  switch (fold_role(rank, p)) {
    case FoldRole::kExtra:
      return rank + 1;
    case FoldRole::kProxy:
      return rank - 1;
    case FoldRole::kCore:
      break;
  }
  return kNoPeer;
}

/// The virtual rank `rank` plays in the core, kNoPeer for extras.
constexpr int fold_virtual_rank(int rank, int p) {
  const int rem = fold_num_extras(p);
  if (rank < 2 * rem) return rank % 2 == 0 ? kNoPeer : rank / 2;
  return rank - rem;
}

/// The real rank that plays virtual rank `vrank` in [0, pof2).
constexpr int fold_real_rank(int vrank, int p) {
  assert(0 <= vrank && vrank < fold_pof2(p));
  const int rem = fold_num_extras(p);
  return vrank < rem ? 2 * vrank + 1 : vrank + rem;
}

/// The first real rank virtual rank `vrank` stands for, for vrank in
/// [0, pof2]; fold_first_rank(pof2) == p closes the last range.
constexpr int fold_first_rank(int vrank, int p) {
  assert(0 <= vrank && vrank <= fold_pof2(p));
  const int rem = fold_num_extras(p);
  return vrank <= rem ? 2 * vrank : vrank + rem;
}

/// Number of chunks a buffer is cut into under `layout`: p or pof2.
constexpr int fold_num_chunks(int p, FoldLayout layout) {
  return layout == FoldLayout::kPerRank ? p : fold_pof2(p);
}

/// The chunks that belong to the virtual ranks `vranks` under `layout`.
constexpr ChunkRange fold_chunks(ChunkRange vranks, int p, FoldLayout layout) {
  if (layout == FoldLayout::kPerVirtualRank) return vranks;
  const int first = fold_first_rank(vranks.first, p);
  return {first, fold_first_rank(vranks.end(), p) - first};
}

/// The fold-in step: an extra sends `chunks` to its proxy, which receives
/// them and reduces them into its own (reduce) or stores them. Core ranks are
/// idle. Both ranks of a pair must pass the same `chunks`.
constexpr Step fold_in_step(int rank, int p, ChunkRange chunks, bool reduce) {
  switch (fold_role(rank, p)) {
    case FoldRole::kExtra:
      return send_step(rank + 1, chunks);
    case FoldRole::kProxy:
      return recv_step(rank - 1, chunks, reduce);
    case FoldRole::kCore:
      break;
  }
  return Step{};
}

/// The fold-out step: a proxy sends `chunks` of the result to its extra,
/// which stores them. Core ranks are idle. Both ranks of a pair must pass the
/// same `chunks`.
constexpr Step fold_out_step(int rank, int p, ChunkRange chunks) {
  switch (fold_role(rank, p)) {
    case FoldRole::kExtra:
      return recv_step(rank + 1, chunks);
    case FoldRole::kProxy:
      return send_step(rank - 1, chunks);
    case FoldRole::kCore:
      break;
  }
  return Step{};
}

// ---------------------------------------------------------------------------
// Recursive doubling
// ---------------------------------------------------------------------------

/// Core steps of recursive doubling: lg(pof2) = floor(log2 p).
constexpr int recursive_doubling_num_core_steps(int p) {
  return floor_log2(p);
}

/// All steps: fold-in, lg(pof2) core steps, fold-out; that is lg p for a
/// power of two and floor(log2 p) + 2 = ceil(log2 p) + 1 otherwise.
constexpr int recursive_doubling_num_steps(int p) {
  return recursive_doubling_num_core_steps(p) + 2 * fold_num_steps(p);
}

/// The real rank `rank` exchanges with in core step `step`
/// (virtual rank v XOR 2^step), kNoPeer for extras.
constexpr int recursive_doubling_partner(int rank, int p, int step) {
  assert(0 <= step && step < recursive_doubling_num_core_steps(p));
  const int v = fold_virtual_rank(rank, p);
  if (v == kNoPeer) return kNoPeer;
  return fold_real_rank(v ^ (1 << step), p);
}

/// The virtual ranks whose blocks virtual rank `vrank` holds before
/// all-gather core step `step`: the aligned group of 2^step containing it.
constexpr ChunkRange recursive_doubling_held_vranks(int vrank, int step) {
  const int size = 1 << step;
  return {vrank & ~(size - 1), size};
}

/// All-reduce core step `step`: exchange the whole buffer (chunk 0 of 1) with
/// the partner and reduce. Idle for extras.
constexpr Step recursive_doubling_all_reduce_core_step(int rank, int p, int step) {
  const int partner = recursive_doubling_partner(rank, p, step);
  if (partner == kNoPeer) return Step{};
  return exchange_step(partner, ChunkRange{0, 1}, partner, ChunkRange{0, 1}, /*reduce=*/true);
}

/// All-gather core step `step`: send the chunks of the 2^step virtual ranks
/// held, receive the partner's 2^step and store them. Idle for extras.
constexpr Step recursive_doubling_all_gather_core_step(int rank, int p, int step,
                                                       FoldLayout layout = FoldLayout::kPerRank) {
  const int partner = recursive_doubling_partner(rank, p, step);
  if (partner == kNoPeer) return Step{};
  const int v = fold_virtual_rank(rank, p);
  return exchange_step(partner, fold_chunks(recursive_doubling_held_vranks(v, step), p, layout), partner,
                       fold_chunks(recursive_doubling_held_vranks(v ^ (1 << step), step), p, layout));
}

/// Recursive-doubling all-reduce of `rank`: the buffer is one chunk (chunk
/// 0); fold-in (reduce), lg(pof2) exchanges, fold-out. Every rank ends with
/// every contribution exactly once.
inline std::vector<Step> recursive_doubling_all_reduce(int rank, int p) {
  constexpr ChunkRange kWhole{0, 1};
  std::vector<Step> steps;
  steps.reserve(static_cast<size_t>(recursive_doubling_num_steps(p)));
  if (fold_num_steps(p) != 0) steps.push_back(fold_in_step(rank, p, kWhole, /*reduce=*/true));
  for (int s = 0; s < recursive_doubling_num_core_steps(p); ++s) {
    steps.push_back(recursive_doubling_all_reduce_core_step(rank, p, s));
  }
  if (fold_num_steps(p) != 0) steps.push_back(fold_out_step(rank, p, kWhole));
  return steps;
}

/// Recursive-doubling all-gather of `rank` over p chunks, chunk i = rank i's
/// block, starting from the rank holding chunk `rank`: fold-in (the extra's
/// block), lg(pof2) exchanges, fold-out (all p chunks; the extra's own block
/// is rewritten with the same bytes).
inline std::vector<Step> recursive_doubling_all_gather(int rank, int p) {
  const ChunkRange pair_block{rank & ~1, 1};  // the extra's block, on both ranks of a pair
  std::vector<Step> steps;
  steps.reserve(static_cast<size_t>(recursive_doubling_num_steps(p)));
  if (fold_num_steps(p) != 0) steps.push_back(fold_in_step(rank, p, pair_block, /*reduce=*/false));
  for (int s = 0; s < recursive_doubling_num_core_steps(p); ++s) {
    steps.push_back(recursive_doubling_all_gather_core_step(rank, p, s));
  }
  if (fold_num_steps(p) != 0) steps.push_back(fold_out_step(rank, p, ChunkRange{0, p}));
  return steps;
}

}  // namespace tdist::patterns
