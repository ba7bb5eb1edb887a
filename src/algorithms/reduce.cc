// Reduce to a root: a binomial tree pipelined in segments for small buffers,
// Rabenseifner's reduce-scatter + gather for large ones (Rabenseifner 2004;
// Thakur, Rabenseifner & Gropp 2005, section 4.4). Non-root buffers are
// scratch, so both run in place.

#include <algorithm>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/binomial_tree.h"
#include "algorithms/patterns/recursive_halving.h"
#include "algorithms/tuning/tcp_model.h"
#include "common/reduce_kernels.h"

namespace tdist::algorithms {
namespace {

using detail::Bounds;
using detail::Combiner;
using patterns::ChunkRange;

// A node folds in its children in relative-rank order (rel + 1, then the
// subtree at rel + 2, ...), its own partial first, and forwards each segment
// to its parent as soon as every child's copy of it is in.
void binomial(const CallContext& ctx, uint8_t* data, size_t count, int root, const Combiner& combiner) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  const size_t eb = combiner.element_bytes;
  const int parent = patterns::binomial_parent(rank, root, p);
  std::vector<patterns::TreeChild> children = patterns::binomial_children(rank, root, p);
  std::reverse(children.begin(), children.end());
  const uint64_t tag = ctx.tag(0);
  const size_t seg = std::min(detail::segment_elements(eb), count);
  const patterns::ElementRange whole{0, count};
  const size_t num_segments = patterns::segment_count(count, seg);
  const size_t num_children = children.size();

  // Items are (segment, child), segment-major; one slot per item in flight.
  const size_t num_items = num_segments * num_children;
  const size_t num_slots = std::min(num_items, detail::kPipelineDepth * num_children);
  const detail::Scratch slots = detail::make_scratch(num_slots * seg * eb);
  auto slot = [&](size_t item) { return slots.get() + (item % num_slots) * seg * eb; };
  std::vector<RequestPtr> recvs(num_items);
  size_t posted = 0;
  std::vector<RequestPtr> sends;
  for (size_t j = 0; j < num_segments; ++j) {
    const patterns::ElementRange s = patterns::segment_of(whole, seg, j);
    for (size_t c = 0; c < num_children; ++c) {
      const size_t item = j * num_children + c;
      // The slot of item - 1 is free: post up to item + num_slots - 1.
      for (; posted < std::min(item + num_slots, num_items); ++posted) {
        const patterns::ElementRange r = patterns::segment_of(whole, seg, posted / num_children);
        recvs[posted] = ctx.irecv(children[posted % num_children].rank, tag, slot(posted), r.length * eb);
      }
      detail::wait_one(ctx, recvs[item]);
      combiner.combine(data + s.offset * eb, slot(item), s.length, /*received_first=*/false);
    }
    if (parent == patterns::kNoPeer) {
      combiner.finalize(data + s.offset * eb, s.length);
    } else {
      sends.push_back(ctx.isend(parent, tag, data + s.offset * eb, s.length * eb));
    }
  }
  wait_all(ctx, sends);
}

// Recursive halving leaves virtual rank v with chunk v of pof2 (finalized
// by it); a binomial gather over the virtual ranks brings the chunks to the
// root, or to its proxy if the root is an extra, which then hands them on.
void reduce_scatter_gather(const CallContext& ctx, uint8_t* data, size_t count, int root,
                           const Combiner& combiner) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  const size_t eb = combiner.element_bytes;
  const int pof2 = patterns::fold_pof2(p);
  const Bounds bounds = detail::balanced_bounds(count, pof2);
  auto at = [&](ChunkRange chunks) { return data + bounds[static_cast<size_t>(chunks.first)] * eb; };
  auto bytes_of = [&](ChunkRange chunks) {
    return (bounds[static_cast<size_t>(chunks.end())] - bounds[static_cast<size_t>(chunks.first)]) * eb;
  };

  detail::halving_reduce_scatter(ctx, 0, data, bounds, /*per_rank=*/false, combiner);
  const ChunkRange owned =
      patterns::recursive_halving_owned_chunks(rank, p, patterns::FoldLayout::kPerVirtualRank);
  combiner.finalize(at(owned), bytes_of(owned) / eb);

  const bool root_is_extra = patterns::fold_role(root, p) == patterns::FoldRole::kExtra;
  const int gather_root = root_is_extra ? root + 1 : root;
  const int vroot = patterns::fold_virtual_rank(gather_root, p);
  const int vrank = patterns::fold_virtual_rank(rank, p);
  uint32_t step_number = detail::halving_num_steps(p);
  for (int t = 0; t < patterns::binomial_num_rounds(pof2); ++t, ++step_number) {
    if (vrank == patterns::kNoPeer) continue;
    const patterns::Step step = patterns::binomial_gather_step(vrank, vroot, pof2, t);
    if (step.idle()) continue;
    const uint64_t tag = ctx.tag(step_number);
    // The step names chunks relative to vroot; a range that wraps past the
    // last chunk is two ranges of the buffer, moved as two messages.
    std::vector<RequestPtr> requests;
    for (const ChunkRange part : patterns::binomial_absolute_chunks(
             step.sends() ? step.send_chunks : step.recv_chunks, vroot, pof2)) {
      if (part.empty()) continue;
      if (step.sends()) {
        requests.push_back(
            detail::post_send(ctx, patterns::fold_real_rank(step.send_to, p), tag, at(part), bytes_of(part)));
      } else {
        requests.push_back(detail::post_recv(ctx, patterns::fold_real_rank(step.recv_from, p), tag, at(part),
                                             bytes_of(part)));
      }
    }
    wait_all(ctx, requests);
  }
  if (root_is_extra) {
    const uint64_t tag = ctx.tag(step_number);
    if (rank == gather_root) wait_all(ctx, {detail::post_send(ctx, root, tag, data, count * eb)});
    if (rank == root) wait_all(ctx, {detail::post_recv(ctx, gather_root, tag, data, count * eb)});
  }
}

}  // namespace

void reduce(const CallContext& ctx, void* data, size_t count, DType dtype, const ReduceOp& op, int root,
            ReduceAlgo algo) {
  check_reduce_supported(dtype, op, ctx.op);
  const int p = ctx.size();
  const Combiner combiner{dtype, op, element_size(dtype), p};
  algo = resolve_algo(algo, count * combiner.element_bytes, p);
  if (count == 0) return;
  auto* bytes = static_cast<uint8_t*>(data);
  premultiply(bytes, count, dtype, op);
  if (p == 1) {
    combiner.finalize(bytes, count);
    return;
  }
  detail::guarded(ctx, [&] {
    if (algo == ReduceAlgo::kReduceScatterGather) {
      reduce_scatter_gather(ctx, bytes, count, root, combiner);
    } else {
      binomial(ctx, bytes, count, root, combiner);
    }
  });
}

}  // namespace tdist::algorithms
