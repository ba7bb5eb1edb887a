// All-gather of blocks of any (per-rank) size: recursive doubling and Bruck
// for small totals, the ring for large ones (Thakur, Rabenseifner & Gropp
// 2005; Bruck et al. 1997). The ring engine is shared with all_reduce and
// broadcast.

#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/patterns/bruck.h"
#include "algorithms/patterns/recursive_doubling.h"
#include "algorithms/patterns/ring.h"
#include "algorithms/tuning/tcp_model.h"
#include "tdist/errors.h"

namespace tdist::algorithms {
namespace detail {
namespace {

// Receives of the ring all-gather posted ahead of the one being forwarded.
// They land in their final place, so a deep window costs no memory; 8
// segments (2 MiB) keep a fast sender from outrunning the posted receives.
constexpr size_t kForwardAhead = 8;

struct ForwardItem {
  int step;
  patterns::ElementRange bytes;  // a segment of the block received in `step`
};

}  // namespace

void ring_all_gather(const CallContext& ctx, uint32_t first_step, int me, int p, int next, int prev,
                     uint8_t* out, const Bounds& byte_bounds, const uint8_t* own) {
  const int num_steps = patterns::ring_all_gather_num_steps(p);
  auto block = [&](int b) {
    const size_t begin = byte_bounds[static_cast<size_t>(b)];
    return patterns::ElementRange{begin, byte_bounds[static_cast<size_t>(b) + 1] - begin};
  };
  std::vector<ForwardItem> items;
  for (int t = 0; t < num_steps; ++t) {
    const patterns::ElementRange recv = block(patterns::ring_all_gather_step(me, p, t).recv_chunks.first);
    for (size_t j = 0; j < patterns::segment_count(recv.length, kSegmentBytes); ++j) {
      items.push_back({t, patterns::segment_of(recv, kSegmentBytes, j)});
    }
  }
  std::vector<RequestPtr> recvs(items.size());
  std::vector<RequestPtr> sends;
  size_t posted = 0;
  auto post_recvs = [&](size_t upto) {
    for (; posted < std::min(upto, items.size()); ++posted) {
      const ForwardItem& item = items[posted];
      recvs[posted] = ctx.irecv(prev, ctx.tag(first_step + static_cast<uint32_t>(item.step)),
                                out + item.bytes.offset, item.bytes.length);
    }
  };
  post_recvs(kForwardAhead);
  const patterns::ElementRange mine = block(me);
  for (size_t j = 0; j < patterns::segment_count(mine.length, kSegmentBytes); ++j) {
    const patterns::ElementRange s = patterns::segment_of(mine, kSegmentBytes, j);
    sends.push_back(ctx.isend(next, ctx.tag(first_step), own + (s.offset - mine.offset), s.length));
  }
  // A segment received in step t is sent on in step t + 1 as soon as it is
  // in, so all steps overlap. Receives never target a block that is being
  // sent: each block other than `me` is received once, then only read.
  for (size_t i = 0; i < items.size(); ++i) {
    post_recvs(i + kForwardAhead);
    const ForwardItem& item = items[i];
    if (item.step + 1 >= num_steps) break;
    wait_one(ctx, recvs[i]);
    sends.push_back(ctx.isend(next, ctx.tag(first_step + static_cast<uint32_t>(item.step) + 1),
                              out + item.bytes.offset, item.bytes.length));
  }
  post_recvs(items.size());
  wait_all(ctx, recvs);
  wait_all(ctx, sends);
}

}  // namespace detail

namespace {

using detail::Bounds;

uint8_t* block_at(uint8_t* out, const Bounds& bounds, patterns::ChunkRange chunks) {
  return out + bounds[static_cast<size_t>(chunks.first)];
}

size_t bytes_of(const Bounds& bounds, patterns::ChunkRange chunks) {
  return bounds[static_cast<size_t>(chunks.end())] - bounds[static_cast<size_t>(chunks.first)];
}

// Chunk i is rank i's block, already in place in `out`. Step k uses tag k.
void recursive_doubling(const CallContext& ctx, uint8_t* out, const Bounds& bounds) {
  const std::vector<patterns::Step> steps = patterns::recursive_doubling_all_gather(ctx.rank(), ctx.size());
  for (size_t k = 0; k < steps.size(); ++k) {
    const patterns::Step& step = steps[k];
    if (step.idle()) continue;
    const uint64_t tag = ctx.tag(static_cast<uint32_t>(k));
    RequestPtr recv, send;
    if (step.receives()) {
      recv = detail::post_recv(ctx, step.recv_from, tag, block_at(out, bounds, step.recv_chunks),
                               bytes_of(bounds, step.recv_chunks));
    }
    if (step.sends()) {
      send = detail::post_send(ctx, step.send_to, tag, block_at(out, bounds, step.send_chunks),
                               bytes_of(bounds, step.send_chunks));
    }
    wait_all(ctx, {recv, send});
  }
}

// Bruck: blocks gathered in rotated order (this rank's first) in a
// temporary buffer, then rotated into place.
void bruck(const CallContext& ctx, const uint8_t* in, uint8_t* out, const Bounds& bounds) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  Bounds rotated(static_cast<size_t>(p) + 1, 0);
  for (int i = 0; i < p; ++i) {
    const int owner = patterns::bruck_block_owner(rank, p, i);
    rotated[static_cast<size_t>(i) + 1] = rotated[static_cast<size_t>(i)] + bytes_of(bounds, {owner, 1});
  }
  const detail::Scratch tmp = detail::make_scratch(rotated.back());
  if (rotated[1] > 0) std::memcpy(tmp.get(), in, rotated[1]);
  for (int k = 0; k < patterns::bruck_num_steps(p); ++k) {
    const patterns::Step step = patterns::bruck_all_gather_step(rank, p, k);
    const uint64_t tag = ctx.tag(static_cast<uint32_t>(k));
    wait_all(ctx, {detail::post_recv(ctx, step.recv_from, tag, block_at(tmp.get(), rotated, step.recv_chunks),
                                     bytes_of(rotated, step.recv_chunks)),
                   detail::post_send(ctx, step.send_to, tag, block_at(tmp.get(), rotated, step.send_chunks),
                                     bytes_of(rotated, step.send_chunks))});
  }
  for (int i = 1; i < p; ++i) {
    const size_t n = bytes_of(rotated, {i, 1});
    if (n > 0) {
      std::memcpy(out + bounds[static_cast<size_t>(patterns::bruck_block_owner(rank, p, i))],
                  tmp.get() + rotated[static_cast<size_t>(i)], n);
    }
  }
}

}  // namespace

void all_gather(const CallContext& ctx, const void* in, void* out, const std::vector<size_t>& bytes,
                AllGatherAlgo algo) {
  const int p = ctx.size();
  const int rank = ctx.rank();
  if (bytes.size() != static_cast<size_t>(p)) {
    throw DistInvalidArgument(std::string(ctx.op) + ": expected " + std::to_string(p) + " block sizes, got " +
                              std::to_string(bytes.size()));
  }
  const Bounds bounds = detail::prefix_bounds(bytes);
  algo = resolve_algo(algo, bounds.back(), p);
  const auto* in8 = static_cast<const uint8_t*>(in);
  auto* out8 = static_cast<uint8_t*>(out);
  uint8_t* own = out8 + bounds[static_cast<size_t>(rank)];
  const size_t own_bytes = bytes[static_cast<size_t>(rank)];
  if (own != in8 && own_bytes > 0) std::memcpy(own, in8, own_bytes);
  if (p == 1 || bounds.back() == 0) return;
  detail::guarded(ctx, [&] {
    switch (algo) {
      case AllGatherAlgo::kRecursiveDoubling:
        recursive_doubling(ctx, out8, bounds);
        break;
      case AllGatherAlgo::kBruck:
        bruck(ctx, in8, out8, bounds);
        break;
      case AllGatherAlgo::kRing:
      case AllGatherAlgo::kAuto:
        detail::ring_all_gather(ctx, 0, rank, p, patterns::ring_next(rank, p), patterns::ring_prev(rank, p),
                                out8, bounds, own);
        break;
    }
  });
}

}  // namespace tdist::algorithms
