// Broadcast: a binomial tree pipelined in segments for small buffers and few
// ranks, van de Geijn's scatter + all-gather for large ones (Thakur,
// Rabenseifner & Gropp 2005, section 4.1).

#include <algorithm>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/binomial_tree.h"
#include "algorithms/tuning/tcp_model.h"

namespace tdist::algorithms {
namespace {

using detail::Bounds;

// Receives from the parent posted ahead of the segment being forwarded;
// they land in place, so only the transport's bookkeeping grows with it.
constexpr size_t kReceiveAhead = 8;

// Each segment goes on to the children (largest subtree first) as soon as
// it arrives, so the levels of the tree work at the same time.
void binomial(const CallContext& ctx, uint8_t* data, size_t nbytes, int root) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  const int parent = patterns::binomial_parent(rank, root, p);
  const std::vector<patterns::TreeChild> children = patterns::binomial_children(rank, root, p);
  const uint64_t tag = ctx.tag(0);
  const patterns::ElementRange whole{0, nbytes};
  const size_t num_segments = patterns::segment_count(nbytes, detail::kSegmentBytes);

  std::vector<RequestPtr> recvs(parent == patterns::kNoPeer ? 0 : num_segments);
  std::vector<RequestPtr> sends;
  sends.reserve(children.size() * num_segments);
  size_t posted = 0;
  for (size_t j = 0; j < num_segments; ++j) {
    const patterns::ElementRange s = patterns::segment_of(whole, detail::kSegmentBytes, j);
    if (!recvs.empty()) {
      for (; posted < std::min(j + kReceiveAhead, num_segments); ++posted) {
        const patterns::ElementRange r = patterns::segment_of(whole, detail::kSegmentBytes, posted);
        recvs[posted] = ctx.irecv(parent, tag, data + r.offset, r.length);
      }
      detail::wait_one(ctx, recvs[j]);
    }
    for (const patterns::TreeChild& child : children) {
      sends.push_back(ctx.isend(child.rank, tag, data + s.offset, s.length));
    }
  }
  wait_all(ctx, sends);
}

// Relative rank i's share is chunk i of a balanced partition, so every
// subtree's shares are one contiguous range of the buffer and the scatter
// needs no staging; then a ring all-gather in relative-rank order.
void scatter_all_gather(const CallContext& ctx, uint8_t* data, size_t nbytes, int root) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  const Bounds bounds = detail::balanced_bounds(nbytes, p);
  auto range_at = [&](patterns::ChunkRange chunks) {
    return data + bounds[static_cast<size_t>(chunks.first)];
  };
  auto range_bytes = [&](patterns::ChunkRange chunks) {
    return bounds[static_cast<size_t>(chunks.end())] - bounds[static_cast<size_t>(chunks.first)];
  };
  const uint64_t tag = ctx.tag(0);
  const int parent = patterns::binomial_parent(rank, root, p);
  if (parent != patterns::kNoPeer) {
    const patterns::ChunkRange mine = patterns::binomial_subtree(rank, root, p);
    wait_all(ctx, {detail::post_recv(ctx, parent, tag, range_at(mine), range_bytes(mine))});
  }
  std::vector<RequestPtr> sends;
  for (const patterns::TreeChild& child : patterns::binomial_children(rank, root, p)) {
    sends.push_back(
        detail::post_send(ctx, child.rank, tag, range_at(child.subtree), range_bytes(child.subtree)));
  }
  wait_all(ctx, sends);

  const int rel = patterns::relative_rank(rank, root, p);
  detail::ring_all_gather(ctx, 1, rel, p, patterns::absolute_rank((rel + 1) % p, root, p),
                          patterns::absolute_rank((rel + p - 1) % p, root, p), data, bounds,
                          data + bounds[static_cast<size_t>(rel)]);
}

}  // namespace

void broadcast(const CallContext& ctx, void* data, size_t nbytes, int root, BroadcastAlgo algo) {
  const int p = ctx.size();
  algo = resolve_algo(algo, nbytes, p);
  if (p == 1 || nbytes == 0) return;
  auto* bytes = static_cast<uint8_t*>(data);
  detail::guarded(ctx, [&] {
    if (algo == BroadcastAlgo::kScatterAllGather) {
      scatter_all_gather(ctx, bytes, nbytes, root);
    } else {
      binomial(ctx, bytes, nbytes, root);
    }
  });
}

}  // namespace tdist::algorithms
