// All-reduce: recursive doubling for small buffers, Rabenseifner's
// reduce-scatter + all-gather and the ring for large ones (Thakur,
// Rabenseifner & Gropp 2005; Rabenseifner 2004; Patarasuk & Yuan 2009).
//
// Bitwise identity on every rank: in recursive doubling both partners of an
// exchange compute the same combination, lower virtual ranks' partial first
// (Combiner::combine); in the ring and Rabenseifner's algorithm each chunk is
// reduced by one owner and then copied to everyone. AVG is divided once per
// element before anything is distributed.

#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/recursive_doubling.h"
#include "algorithms/patterns/recursive_halving.h"
#include "algorithms/patterns/ring.h"
#include "algorithms/tuning/tcp_model.h"
#include "common/reduce_kernels.h"

namespace tdist::algorithms {
namespace {

using detail::Bounds;
using detail::Combiner;
using patterns::ChunkRange;
using patterns::kNoPeer;

// Steps: 0 fold-in, 1 + s core step s, 1 + lg(pof2) fold-out.
void recursive_doubling(const CallContext& ctx, uint8_t* data, size_t count, const Combiner& combiner) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  const size_t bytes = count * combiner.element_bytes;
  const int core_steps = patterns::recursive_doubling_num_core_steps(p);
  const bool fold = patterns::fold_num_steps(p) != 0;
  const ChunkRange whole{0, 1};

  if (fold) {
    const patterns::Step step = patterns::fold_in_step(rank, p, whole, /*reduce=*/true);
    if (step.sends()) {
      detail::reduce_exchange(ctx, 0, step.send_to, data, count, kNoPeer, nullptr, 0, false, combiner);
    } else if (step.receives()) {
      detail::reduce_exchange(ctx, 0, kNoPeer, nullptr, 0, step.recv_from, data, count,
                              /*received_first=*/true, combiner);
    }
  }
  const bool extra = patterns::fold_role(rank, p) == patterns::FoldRole::kExtra;
  if (!extra) {
    for (int s = 0; s < core_steps; ++s) {
      const patterns::Step step = patterns::recursive_doubling_all_reduce_core_step(rank, p, s);
      const bool received_first =
          patterns::fold_virtual_rank(step.recv_from, p) < patterns::fold_virtual_rank(rank, p);
      detail::reduce_exchange(ctx, 1 + static_cast<uint32_t>(s), step.send_to, data, count, step.recv_from,
                              data, count, received_first, combiner);
    }
    combiner.finalize(data, count);
  }
  if (fold) {
    const uint64_t tag = ctx.tag(1 + static_cast<uint32_t>(core_steps));
    const patterns::Step step = patterns::fold_out_step(rank, p, whole);
    if (step.sends()) wait_all(ctx, {detail::post_send(ctx, step.send_to, tag, data, bytes)});
    if (step.receives()) wait_all(ctx, {detail::post_recv(ctx, step.recv_from, tag, data, bytes)});
  }
}

// Recursive-halving reduce-scatter over pof2 balanced chunks, each owner
// finalizes its chunk, recursive-doubling all-gather, fold-out.
void rabenseifner(const CallContext& ctx, uint8_t* data, size_t count, const Combiner& combiner) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  const size_t eb = combiner.element_bytes;
  const auto layout = patterns::FoldLayout::kPerVirtualRank;
  const int pof2 = patterns::fold_pof2(p);
  const Bounds bounds = detail::balanced_bounds(count, pof2);
  auto bytes_of = [&](ChunkRange chunks) {
    return (bounds[static_cast<size_t>(chunks.end())] - bounds[static_cast<size_t>(chunks.first)]) * eb;
  };
  auto at = [&](ChunkRange chunks) { return data + bounds[static_cast<size_t>(chunks.first)] * eb; };

  detail::halving_reduce_scatter(ctx, 0, data, bounds, /*per_rank=*/false, combiner);
  uint32_t step_number = detail::halving_num_steps(p);
  const ChunkRange owned = patterns::recursive_halving_owned_chunks(rank, p, layout);
  combiner.finalize(at(owned), bytes_of(owned) / eb);

  for (int s = 0; s < patterns::recursive_doubling_num_core_steps(p); ++s, ++step_number) {
    const patterns::Step step = patterns::recursive_doubling_all_gather_core_step(rank, p, s, layout);
    if (step.idle()) continue;
    const uint64_t tag = ctx.tag(step_number);
    wait_all(ctx,
             {detail::post_recv(ctx, step.recv_from, tag, at(step.recv_chunks), bytes_of(step.recv_chunks)),
              detail::post_send(ctx, step.send_to, tag, at(step.send_chunks), bytes_of(step.send_chunks))});
  }
  const patterns::Step step = patterns::fold_out_step(rank, p, ChunkRange{0, pof2});
  const uint64_t tag = ctx.tag(step_number);
  if (step.sends()) wait_all(ctx, {detail::post_send(ctx, step.send_to, tag, data, count * eb)});
  if (step.receives()) wait_all(ctx, {detail::post_recv(ctx, step.recv_from, tag, data, count * eb)});
}

// Ring reduce-scatter into each rank's own chunk (finalized there), then
// ring all-gather of the chunks; both pipelined in segments.
void ring(const CallContext& ctx, uint8_t* data, size_t count, const Combiner& combiner) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  const size_t eb = combiner.element_bytes;
  const Bounds bounds = detail::balanced_bounds(count, p);
  uint8_t* own = data + bounds[static_cast<size_t>(rank)] * eb;
  detail::ring_reduce_scatter(ctx, 0, data, own, bounds, /*premultiply_in=*/false, combiner);
  Bounds byte_bounds = bounds;
  for (size_t& b : byte_bounds) b *= eb;
  detail::ring_all_gather(ctx, static_cast<uint32_t>(p - 1), rank, p, patterns::ring_next(rank, p),
                          patterns::ring_prev(rank, p), data, byte_bounds, own);
}

}  // namespace

void all_reduce(const CallContext& ctx, void* data, size_t count, DType dtype, const ReduceOp& op,
                AllReduceAlgo algo) {
  check_reduce_supported(dtype, op, ctx.op);
  const int p = ctx.size();
  const Combiner combiner{dtype, op, element_size(dtype), p};
  auto* bytes = static_cast<uint8_t*>(data);
  algo = resolve_algo(algo, count * combiner.element_bytes, p);
  if (count == 0) return;
  // This rank's contribution is scaled once, before anything is combined.
  premultiply(bytes, count, dtype, op);
  if (p == 1) {
    combiner.finalize(bytes, count);
    return;
  }
  detail::guarded(ctx, [&] {
    switch (algo) {
      case AllReduceAlgo::kRing:
        ring(ctx, bytes, count, combiner);
        break;
      case AllReduceAlgo::kRabenseifner:
        rabenseifner(ctx, bytes, count, combiner);
        break;
      case AllReduceAlgo::kRecursiveDoubling:
      case AllReduceAlgo::kAuto:
        recursive_doubling(ctx, bytes, count, combiner);
        break;
    }
  });
}

}  // namespace tdist::algorithms
