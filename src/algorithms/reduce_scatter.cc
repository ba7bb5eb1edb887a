// Reduce-scatter: the ring (Patarasuk & Yuan 2009) for large buffers and
// recursive halving (Rabenseifner 2004; Thakur, Rabenseifner & Gropp 2005)
// for small ones. Both engines are shared: all_reduce runs the ring
// reduce-scatter as its first half and Rabenseifner's all-reduce and reduce
// run the halving core.

#include <cstring>
#include <deque>
#include <utility>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/recursive_halving.h"
#include "algorithms/patterns/ring.h"
#include "algorithms/tuning/tcp_model.h"
#include "common/reduce_kernels.h"
#include "tdist/errors.h"

namespace tdist::algorithms {
namespace detail {
namespace {

using patterns::ChunkRange;
using patterns::ElementRange;
using patterns::kNoPeer;

ElementRange chunk_elements(const Bounds& bounds, ChunkRange chunks) {
  const size_t begin = bounds[static_cast<size_t>(chunks.first)];
  return {begin, bounds[static_cast<size_t>(chunks.end())] - begin};
}

// Segment-sized scratch buffers, recycled in the order they were taken: a
// buffer holding a partial result stays taken until its send completes.
class SlotPool {
 public:
  SlotPool(const CallContext& ctx, size_t count, size_t slot_bytes)
      : ctx_(ctx), slot_bytes_(slot_bytes), memory_(make_scratch(count * slot_bytes)) {
    for (size_t i = 0; i < count; ++i) free_.push_back(i);
  }

  uint8_t* data(size_t slot) { return memory_.get() + slot * slot_bytes_; }

  size_t take() {
    if (free_.empty()) {
      // Sends complete without help from the receiver (the transport queues
      // unexpected messages), so waiting for the oldest one cannot deadlock.
      auto [slot, send] = std::move(held_.front());
      held_.pop_front();
      wait_one(ctx_, send);
      free_.push_back(slot);
    }
    const size_t slot = free_.back();
    free_.pop_back();
    return slot;
  }
  void give_back(size_t slot) { free_.push_back(slot); }
  void give_back_after(size_t slot, RequestPtr send) { held_.emplace_back(slot, std::move(send)); }

 private:
  const CallContext& ctx_;
  size_t slot_bytes_;
  Scratch memory_;
  std::vector<size_t> free_;
  std::deque<std::pair<size_t, RequestPtr>> held_;
};

struct RingItem {
  int step;
  ElementRange elements;  // a segment of the block received in `step`
};

}  // namespace

void ring_reduce_scatter(const CallContext& ctx, uint32_t first_step, const uint8_t* in, uint8_t* out,
                         const Bounds& bounds, bool premultiply_in, const Combiner& combiner) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  const size_t eb = combiner.element_bytes;
  const int next = patterns::ring_next(rank, p);
  const int prev = patterns::ring_prev(rank, p);
  const int num_steps = patterns::ring_reduce_scatter_num_steps(p);
  auto block = [&](int b) { return chunk_elements(bounds, ChunkRange{b, 1}); };

  size_t seg = segment_elements(eb);
  size_t largest = 0;
  for (int b = 0; b < p; ++b) largest = std::max(largest, block(b).length);
  seg = std::min(seg, std::max<size_t>(largest, 1));

  std::vector<RingItem> items;
  for (int t = 0; t < num_steps; ++t) {
    const ElementRange recv = block(patterns::ring_reduce_scatter_step(rank, p, t).recv_chunks.first);
    for (size_t j = 0; j < patterns::segment_count(recv.length, seg); ++j) {
      items.push_back({t, patterns::segment_of(recv, seg, j)});
    }
  }
  // Depth slots for receives in flight, two more so that partial results
  // waiting for their send do not stall the receives.
  SlotPool pool(ctx, kPipelineDepth + 2, seg * eb);
  const Scratch scaled = make_scratch(premultiply_in ? seg * eb : 0);
  std::vector<RequestPtr> sends;

  // Step 0 sends this rank's own contribution to block rank - 1.
  const ElementRange first = block(patterns::ring_reduce_scatter_step(rank, p, 0).send_chunks.first);
  for (size_t j = 0; j < patterns::segment_count(first.length, seg); ++j) {
    const ElementRange s = patterns::segment_of(first, seg, j);
    if (premultiply_in) {
      const size_t slot = pool.take();
      premultiply_into(pool.data(slot), in + s.offset * eb, s.length, combiner.dtype, combiner.op);
      sends.push_back(ctx.isend(next, ctx.tag(first_step), pool.data(slot), s.length * eb));
      pool.give_back_after(slot, sends.back());
    } else {
      sends.push_back(ctx.isend(next, ctx.tag(first_step), in + s.offset * eb, s.length * eb));
    }
  }

  std::vector<RequestPtr> recvs(items.size());
  std::vector<size_t> recv_slot(items.size());
  size_t posted = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    for (; posted < std::min(i + kPipelineDepth, items.size()); ++posted) {
      const RingItem& item = items[posted];
      recv_slot[posted] = pool.take();
      recvs[posted] = ctx.irecv(prev, ctx.tag(first_step + static_cast<uint32_t>(item.step)),
                                pool.data(recv_slot[posted]), item.elements.length * eb);
    }
    wait_one(ctx, recvs[i]);
    const RingItem& item = items[i];
    const size_t slot = recv_slot[i];
    uint8_t* partial = pool.data(slot);
    const uint8_t* local = in + item.elements.offset * eb;
    if (premultiply_in) {
      premultiply_into(scaled.get(), local, item.elements.length, combiner.dtype, combiner.op);
      local = scaled.get();
    }
    // Each block is combined along one chain, the partial of the ranks
    // before this one first, and only its owner's result is distributed, so
    // every rank ends with the same bits.
    reduce_into(partial, partial, local, item.elements.length, combiner.dtype, combiner.op);
    if (item.step + 1 < num_steps) {
      sends.push_back(ctx.isend(next, ctx.tag(first_step + static_cast<uint32_t>(item.step) + 1), partial,
                                item.elements.length * eb));
      pool.give_back_after(slot, sends.back());
    } else {
      uint8_t* result = out + (item.elements.offset - bounds[static_cast<size_t>(rank)]) * eb;
      std::memcpy(result, partial, item.elements.length * eb);
      combiner.finalize(result, item.elements.length);
      pool.give_back(slot);
    }
  }
  wait_all(ctx, sends);
}

uint32_t halving_num_steps(int p) {
  return 1 + static_cast<uint32_t>(patterns::recursive_halving_num_core_steps(p));
}

void halving_reduce_scatter(const CallContext& ctx, uint32_t first_step, uint8_t* acc, const Bounds& bounds,
                            bool per_rank, const Combiner& combiner) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  const size_t eb = combiner.element_bytes;
  const auto layout = per_rank ? patterns::FoldLayout::kPerRank : patterns::FoldLayout::kPerVirtualRank;
  const int num_chunks = patterns::fold_num_chunks(p, layout);
  const size_t total = bounds[static_cast<size_t>(num_chunks)];

  if (patterns::fold_num_steps(p) != 0) {
    // The extra (the lower rank of its pair) hands everything to its proxy.
    const patterns::Step step = patterns::fold_in_step(rank, p, ChunkRange{0, num_chunks}, /*reduce=*/true);
    if (step.sends()) {
      reduce_exchange(ctx, first_step, step.send_to, acc, total, kNoPeer, nullptr, 0, false, combiner);
    } else if (step.receives()) {
      reduce_exchange(ctx, first_step, kNoPeer, nullptr, 0, step.recv_from, acc, total,
                      /*received_first=*/true, combiner);
    }
  }
  for (int s = 0; s < patterns::recursive_halving_num_core_steps(p); ++s) {
    const patterns::Step step = patterns::recursive_halving_core_step(rank, p, s, layout);
    if (step.idle()) continue;
    const ElementRange send = chunk_elements(bounds, step.send_chunks);
    const ElementRange recv = chunk_elements(bounds, step.recv_chunks);
    // The partial of the lower virtual rank goes first, whoever combines.
    const bool received_first =
        patterns::fold_virtual_rank(step.recv_from, p) < patterns::fold_virtual_rank(rank, p);
    reduce_exchange(ctx, first_step + 1 + static_cast<uint32_t>(s), step.send_to, acc + send.offset * eb,
                    send.length, step.recv_from, acc + recv.offset * eb, recv.length, received_first,
                    combiner);
  }
}

}  // namespace detail

namespace {

using detail::Bounds;
using detail::Combiner;

// Recursive halving on a working copy of `in` (premultiplied), then the
// extras get their blocks back from their proxies.
void recursive_halving(const CallContext& ctx, const uint8_t* in, uint8_t* out, const Bounds& bounds,
                       const Combiner& combiner) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  const size_t eb = combiner.element_bytes;
  const size_t total = bounds.back();
  const detail::Scratch acc = detail::make_scratch(total * eb);
  premultiply_into(acc.get(), in, total, combiner.dtype, combiner.op);
  detail::halving_reduce_scatter(ctx, 0, acc.get(), bounds, /*per_rank=*/true, combiner);

  const patterns::ChunkRange owned =
      patterns::recursive_halving_owned_chunks(rank, p, patterns::FoldLayout::kPerRank);
  const size_t owned_begin = bounds[static_cast<size_t>(owned.first)];
  combiner.finalize(acc.get() + owned_begin * eb, bounds[static_cast<size_t>(owned.end())] - owned_begin);

  auto block_bytes = [&](int r) {
    return (bounds[static_cast<size_t>(r) + 1] - bounds[static_cast<size_t>(r)]) * eb;
  };
  const uint64_t tag = ctx.tag(detail::halving_num_steps(p));
  const patterns::Step step = patterns::fold_out_step(rank, p, patterns::ChunkRange{rank & ~1, 1});
  if (step.sends()) {
    wait_all(ctx, {detail::post_send(ctx, step.send_to, tag,
                                     acc.get() + bounds[static_cast<size_t>(step.send_to)] * eb,
                                     block_bytes(step.send_to))});
  }
  if (step.receives()) {
    wait_all(ctx, {detail::post_recv(ctx, step.recv_from, tag, out, block_bytes(rank))});
  } else if (block_bytes(rank) > 0) {
    std::memcpy(out, acc.get() + bounds[static_cast<size_t>(rank)] * eb, block_bytes(rank));
  }
}

}  // namespace

void reduce_scatter(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& counts,
                    DType dtype, const ReduceOp& op, ReduceScatterAlgo algo) {
  check_reduce_supported(dtype, op, ctx.op);
  const int p = ctx.size();
  const int rank = ctx.rank();
  if (counts.size() != static_cast<size_t>(p)) {
    throw DistInvalidArgument(std::string(ctx.op) + ": expected " + std::to_string(p) +
                              " block counts, got " + std::to_string(counts.size()));
  }
  const Combiner combiner{dtype, op, element_size(dtype), p};
  const Bounds bounds = detail::prefix_bounds(counts);
  const auto* in8 = static_cast<const uint8_t*>(in);
  auto* out8 = static_cast<uint8_t*>(out);
  const size_t own = counts[static_cast<size_t>(rank)];
  algo = resolve_algo(algo, bounds.back() * combiner.element_bytes, p);
  if (p == 1) {
    premultiply_into(out8, in8, own, dtype, op);
    combiner.finalize(out8, own);
    return;
  }
  if (bounds.back() == 0) return;
  detail::guarded(ctx, [&] {
    if (algo == ReduceScatterAlgo::kRecursiveHalving) {
      recursive_halving(ctx, in8, out8, bounds, combiner);
    } else {
      detail::ring_reduce_scatter(ctx, 0, in8, out8, bounds, op.kind == ReduceOp::PREMUL_SUM, combiner);
    }
  });
}

}  // namespace tdist::algorithms
