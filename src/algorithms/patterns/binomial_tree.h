#pragma once

// Internal: binomial trees rooted at any rank, for broadcast, reduce, gather
// and scatter. Include as "algorithms/patterns/binomial_tree.h".
//
// Ranks are numbered relative to the root: rel = (rank - root) mod p. The
// parent of rel > 0 is rel with its lowest set bit cleared; the children of
// rel are rel + m for each power of two m below rel's lowest set bit (below
// pow2_ceil(p) for the root) with rel + m < p. The subtree of rel is the
// contiguous range of relative ranks [rel, min(rel + span, p)), span being
// that lowest set bit (pow2_ceil(p) for the root), which is what gather and
// scatter move. See Thakur, Rabenseifner & Gropp 2005, "Optimization of
// Collective Communication Operations in MPICH".
//
// Rounds: there are L = ceil(log2 p) of them. Going down (broadcast,
// scatter), in round t every rel that is a multiple of 2m, m = 2^(L-1-t),
// sends to rel + m: children are served largest subtree first. Going up
// (reduce, gather), in round t with m = 2^t every rel = m mod 2m sends to
// rel - m, so a node sends only after all its children did. A rank does at
// most one thing per round, so each schedule is a plain Step per round.
//
// Chunk conventions: broadcast and reduce move one chunk (chunk 0, the whole
// buffer). Gather and scatter move p chunks indexed by *relative* rank:
// chunk i is the block of rank (i + root) mod p. A non-root rank stages its
// subtree's blocks in relative order; the root's relative range [0, p) is
// its real buffer rotated by root (binomial_absolute_chunks splits a
// relative range into at most two real ranges).

#include <algorithm>
#include <array>
#include <vector>

#include "algorithms/patterns/chunking.h"

namespace tdist::patterns {

/// `rank`'s number relative to `root`: (rank - root) mod p.
constexpr int relative_rank(int rank, int root, int p) {
  assert(0 <= rank && rank < p && 0 <= root && root < p);
  return rank_mod(rank - root, p);
}

/// The real rank of relative rank `rel`: (rel + root) mod p.
constexpr int absolute_rank(int rel, int root, int p) {
  assert(0 <= rel && rel < p && 0 <= root && root < p);
  return (rel + root) % p;
}

/// Rounds of every binomial schedule: ceil(log2 p), the tree's height.
constexpr int binomial_num_rounds(int p) {
  return ceil_log2(p);
}

/// The parent of `rank` in the tree rooted at `root`, kNoPeer for the root.
constexpr int binomial_parent(int rank, int root, int p) {
  const int rel = relative_rank(rank, root, p);
  if (rel == 0) return kNoPeer;
  return absolute_rank(rel & (rel - 1), root, p);
}

/// The relative ranks in `rank`'s subtree (itself included): [0, p) for the
/// root.
constexpr ChunkRange binomial_subtree(int rank, int root, int p) {
  const int rel = relative_rank(rank, root, p);
  const int span = rel == 0 ? pow2_ceil(p) : lowest_bit(rel);
  return {rel, std::min(span, p - rel)};
}

/// The broadcast round in which `rank` receives from its parent (the reduce
/// round in which it sends is L - 1 minus this); -1 for the root.
constexpr int binomial_broadcast_round(int rank, int root, int p) {
  const int rel = relative_rank(rank, root, p);
  if (rel == 0) return -1;
  return binomial_num_rounds(p) - 1 - floor_log2(lowest_bit(rel));
}

/// One child of a tree node.
struct TreeChild {
  int rank = kNoPeer;       ///< The child's real rank.
  ChunkRange subtree;       ///< Relative ranks in the child's subtree.
  int broadcast_round = 0;  ///< Round in which the parent sends to it going down.

  bool operator==(const TreeChild&) const = default;
};

/// The children of `rank` in the tree rooted at `root`, largest subtree
/// first (broadcast/scatter order; reverse it for reduce/gather). Their
/// subtrees tile binomial_subtree(rank) minus the rank itself, in order from
/// the back: the first child covers the upper end.
inline std::vector<TreeChild> binomial_children(int rank, int root, int p) {
  const int rel = relative_rank(rank, root, p);
  const int span = rel == 0 ? pow2_ceil(p) : lowest_bit(rel);
  std::vector<TreeChild> children;
  for (int m = span / 2; m >= 1; m /= 2) {
    const int child = rel + m;
    if (child >= p) continue;
    children.push_back(TreeChild{absolute_rank(child, root, p), ChunkRange{child, std::min(m, p - child)},
                                 binomial_num_rounds(p) - 1 - floor_log2(m)});
  }
  return children;
}

/// The real ranges of the relative range `rel` of chunks: rel shifted by root,
/// split where it wraps past p - 1. The second range is empty if it does not
/// wrap.
constexpr std::array<ChunkRange, 2> binomial_absolute_chunks(ChunkRange rel, int root, int p) {
  assert(rel.first >= 0 && rel.count >= 0 && rel.end() <= p);
  const int first = rel.count == 0 ? 0 : absolute_rank(rel.first, root, p);
  const int head = std::min(rel.count, p - first);
  return {ChunkRange{first, head}, ChunkRange{0, rel.count - head}};
}

namespace detail {

// Round `round` of a binomial schedule. Down: the parent sends; up: the child
// sends. `subtree_chunks` moves the child's subtree (gather, scatter) instead
// of chunk 0 (broadcast, reduce).
constexpr Step binomial_step(int rank, int root, int p, int round, bool down, bool subtree_chunks,
                             bool reduce) {
  assert(0 <= round && round < binomial_num_rounds(p));
  const int rel = relative_rank(rank, root, p);
  const int m = 1 << (down ? binomial_num_rounds(p) - 1 - round : round);
  const int in_pair = rel % (2 * m);
  const int child = in_pair == 0 ? rel + m : rel;  // the child of this round's parent/child pair
  if (in_pair != 0 && in_pair != m) return Step{};
  if (child >= p) return Step{};
  const ChunkRange chunks = subtree_chunks ? ChunkRange{child, std::min(m, p - child)} : ChunkRange{0, 1};
  const bool is_parent = in_pair == 0;
  const int peer = absolute_rank(is_parent ? rel + m : rel - m, root, p);
  if (is_parent == down) return send_step(peer, chunks);
  return recv_step(peer, chunks, reduce);
}

inline std::vector<Step> binomial_schedule(int rank, int root, int p, bool down, bool subtree_chunks,
                                           bool reduce) {
  std::vector<Step> steps;
  steps.reserve(static_cast<size_t>(binomial_num_rounds(p)));
  for (int t = 0; t < binomial_num_rounds(p); ++t) {
    steps.push_back(binomial_step(rank, root, p, t, down, subtree_chunks, reduce));
  }
  return steps;
}

}  // namespace detail

/// Broadcast round `round` of `rank`: receive chunk 0 from the parent or
/// send it to one child, or nothing.
constexpr Step binomial_broadcast_step(int rank, int root, int p, int round) {
  return detail::binomial_step(rank, root, p, round, /*down=*/true, /*subtree_chunks=*/false, false);
}

/// Reduce round `round` of `rank`: receive chunk 0 from one child and reduce
/// it, or send the partial result to the parent, or nothing.
constexpr Step binomial_reduce_step(int rank, int root, int p, int round) {
  return detail::binomial_step(rank, root, p, round, /*down=*/false, /*subtree_chunks=*/false, true);
}

/// Gather round `round` of `rank`: receive a child's subtree blocks, or send
/// the own subtree's blocks to the parent (relative chunk indices).
constexpr Step binomial_gather_step(int rank, int root, int p, int round) {
  return detail::binomial_step(rank, root, p, round, /*down=*/false, /*subtree_chunks=*/true, false);
}

/// Scatter round `round` of `rank`: send a child its subtree's blocks, or
/// receive the own subtree's blocks from the parent (relative chunk indices).
constexpr Step binomial_scatter_step(int rank, int root, int p, int round) {
  return detail::binomial_step(rank, root, p, round, /*down=*/true, /*subtree_chunks=*/true, false);
}

/// The broadcast schedule of `rank` (ceil(log2 p) rounds, chunk 0).
inline std::vector<Step> binomial_broadcast(int rank, int root, int p) {
  return detail::binomial_schedule(rank, root, p, true, false, false);
}

/// The reduce schedule of `rank` (ceil(log2 p) rounds, chunk 0); the root
/// ends with every contribution exactly once.
inline std::vector<Step> binomial_reduce(int rank, int root, int p) {
  return detail::binomial_schedule(rank, root, p, false, false, true);
}

/// The gather schedule of `rank` (ceil(log2 p) rounds, p relative chunks);
/// the rank starts with relative chunk relative_rank(rank, root, p).
inline std::vector<Step> binomial_gather(int rank, int root, int p) {
  return detail::binomial_schedule(rank, root, p, false, true, false);
}

/// The scatter schedule of `rank` (ceil(log2 p) rounds, p relative chunks);
/// the root starts with all of them, rank ends with its subtree's, its own
/// being relative_rank(rank, root, p).
inline std::vector<Step> binomial_scatter(int rank, int root, int p) {
  return detail::binomial_schedule(rank, root, p, true, true, false);
}

}  // namespace tdist::patterns
