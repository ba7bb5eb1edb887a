// The collectives of a group spanning hosts with the same number of ranks
// on each: shared memory inside a host, TCP among the ranks of one local
// index across hosts, so that every byte crosses each host boundary once.
//
// all_reduce: a shared-memory reduce-scatter inside each host leaves local
// rank i with piece i of its host's sum; local rank i then all-reduces that
// piece over TCP with local rank i of every other host (one TCP stream per
// local rank, all of them at once); a shared-memory all-gather inside each
// host assembles the whole result. Every rank ends with the same bits: each
// piece is reduced inside a host in rank order and across hosts by an
// algorithm whose results are bitwise identical on its ranks.
//
// all_reduce, broadcast, all_gather and reduce_scatter (described above
// each) are pipelined in chunks (pipeline() below): while the helper thread
// moves chunk c across hosts (it drives TCP), the caller's thread runs the
// shared-memory stages of the chunks before and after it. all_to_all runs
// its TCP and shared-memory parts at once, in one round each.

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "algorithms/shm/shm_collectives.h"
#include "algorithms/shm/shm_common.h"
#include "common/reduce_kernels.h"

namespace tdist::algorithms::shm {
namespace {

// One chunk: its elements in the message, every local rank's share of them
// and where this rank's share lives in the scratch.
struct Chunk {
  size_t begin = 0;
  std::vector<size_t> counts;
  size_t mine_offset = 0;  // elements into the scratch
};

std::vector<Chunk> plan_chunks(size_t count, size_t per_chunk, int l, size_t me) {
  std::vector<Chunk> chunks;
  size_t mine = 0;
  for (size_t begin = 0; begin < count || chunks.empty(); begin += per_chunk) {
    const size_t n = std::min(per_chunk, count - begin);
    Chunk c;
    c.begin = begin;
    c.counts.assign(static_cast<size_t>(l), n / static_cast<size_t>(l));
    for (size_t i = 0; i < n % static_cast<size_t>(l); ++i) ++c.counts[i];
    c.mine_offset = mine;
    mine += c.counts[me];
    chunks.push_back(std::move(c));
    if (count == 0) break;
  }
  return chunks;
}

// The call `ctx` on the ranks of one local index across hosts (same op,
// sequence number and deadline).
CallContext on(const CallContext& ctx, transport::Transport& ranks) {
  return {ranks, ctx.op, ctx.seq, ctx.deadline, ctx.timeout, ctx.sig, ctx.previous, ctx.notes};
}

// The call `ctx` on this host's ranks, whose waits end a little after the
// crossings' (a tenth of the timeout, at most a second; messages still
// name the group's timeout). A host-mate late in shared memory is, unless
// it died (seen at once), blocked in its own crossing, which times out
// first and names the rank on another host it waited for; this host's ranks
// then fail with that reason (the abort of the shared memory carries it)
// instead of each blaming the healthy host-mate.
CallContext on_host(const CallContext& ctx, transport::Transport& local_ranks) {
  CallContext c = on(ctx, local_ranks);
  if (ctx.deadline == Clock::time_point::max()) return c;
  c.deadline = ctx.deadline + std::min<std::chrono::milliseconds>(ctx.timeout / 10, std::chrono::seconds(1));
  return c;
}

// What the caller and the helper thread share during one call.
struct CrossState {
  std::mutex mutex;
  std::condition_variable cv;
  size_t ready = 0;  // chunks reduce-scattered, whose pieces may cross
  size_t done = 0;   // chunks whose pieces have crossed
  bool stop = false;
  bool finished = false;  // the helper left the call
  std::exception_ptr error;
};

// Runs `count` chunks through three stages: before(c) and after(c) on the
// caller's thread (shared memory), across(c) on the helper thread (TCP),
// with across(c) after before(c) and after(c) after across(c). The caller
// always runs before(0), before(1), after(0), before(2), after(1), ...,
// after(last), whatever the timing, so every rank of a host runs the same
// shared-memory rounds in the same order; the helper runs the chunks'
// crossings one after another, so their messages (same tags, one call)
// match in order. A failure anywhere aborts the call across hosts and the
// host's shared memory, and is rethrown.
void pipeline(const CallContext& between, ShmGroup& local, tdist::detail::WorkerThread& cross_worker,
              size_t count, const std::function<void(size_t)>& across,
              const std::function<void(size_t)>& before, const std::function<void(size_t)>& after) {
  if (count == 1) {
    try {
      before(0);
      across(0);
      after(0);
    } catch (...) {
      // A failure across hosts must also stop this host's ranks waiting in
      // shared memory for this one.
      detail::abort_group(local, std::current_exception());
      throw;
    }
    return;
  }
  CrossState state;
  cross_worker.post([&] {
    try {
      // The helper drives TCP for the whole call (transport.h, CallScope).
      transport::CallScope scope(between.transport);
      for (size_t c = 0; c < count; ++c) {
        {
          std::unique_lock<std::mutex> lock(state.mutex);
          state.cv.wait(lock, [&] { return state.stop || state.ready > c; });
          if (state.stop) break;
        }
        across(c);
        std::lock_guard<std::mutex> lock(state.mutex);
        state.done = c + 1;
        state.cv.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(state.mutex);
      state.error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(state.mutex);
    state.finished = true;
    state.cv.notify_all();
  });
  // Waits until chunk c has crossed; rethrows what the helper failed with.
  auto wait_crossed = [&](size_t c) {
    std::unique_lock<std::mutex> lock(state.mutex);
    state.cv.wait(lock, [&] { return state.done > c || state.error; });
    if (state.error) std::rethrow_exception(state.error);
  };
  auto helper_finished = [&] {
    std::unique_lock<std::mutex> lock(state.mutex);
    state.cv.wait(lock, [&] { return state.finished; });
  };
  try {
    for (size_t c = 0; c < count; ++c) {
      before(c);
      {
        std::lock_guard<std::mutex> lock(state.mutex);
        state.ready = c + 1;
      }
      state.cv.notify_all();
      if (c == 0) continue;
      wait_crossed(c - 1);
      after(c - 1);
    }
    wait_crossed(count - 1);
    after(count - 1);
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(state.mutex);
      state.stop = true;
    }
    state.cv.notify_all();
    // A helper blocked in a TCP wait gives up once the transport is
    // aborted; `state` and the buffers must outlive it.
    algorithms::detail::abort_call(between, std::current_exception());
    helper_finished();
    detail::abort_group(local, std::current_exception());
    throw;
  }
  helper_finished();
}

// Where group rank `rank` sits: its host (index into by_host, which is also
// its rank among the cross ranks) and its local index there.
struct Position {
  size_t host = 0;
  size_t index = 0;
};
Position position_of(const std::vector<std::vector<int>>& by_host, int rank) {
  for (size_t h = 0; h < by_host.size(); ++h) {
    const auto at = std::find(by_host[h].begin(), by_host[h].end(), rank);
    if (at != by_host[h].end()) return {h, static_cast<size_t>(at - by_host[h].begin())};
  }
  throw DistBackendError("hierarchy: group rank " + std::to_string(rank) + " is on no host");
}

// The ops of the two stages: AVG sums in both and divides once at the end
// (integer AVG would truncate twice otherwise); PREMUL_SUM's factor is
// applied once, inside the host.
ReduceOp op_inside_host(const ReduceOp& op) {
  return op.kind == ReduceOp::AVG ? ReduceOp(ReduceOp::SUM) : op;
}
ReduceOp op_across_hosts(const ReduceOp& op) {
  return (op.kind == ReduceOp::AVG || op.kind == ReduceOp::PREMUL_SUM) ? ReduceOp(ReduceOp::SUM) : op;
}

// Every group rank's block (`sizes[r]` units: bytes or elements) cut into
// chunks of `step` units, and per chunk how many units each local index
// holds: its blocks' chunks on every host, which the hierarchical gathers
// keep together, local index by local index, each in host order.
struct BlockChunks {
  BlockChunks(const std::vector<size_t>& block_sizes, size_t chunk_units,
              const std::vector<std::vector<int>>& hosts)
      : sizes(block_sizes), step(std::max<size_t>(1, chunk_units)), by_host(hosts), offset(sizes.size(), 0) {
    const size_t largest = *std::max_element(sizes.begin(), sizes.end());
    count = std::max<size_t>(1, (largest + step - 1) / step);
    for (size_t r = 1; r < sizes.size(); ++r) offset[r] = offset[r - 1] + sizes[r - 1];
    per_index.assign(count, std::vector<size_t>(by_host[0].size(), 0));
    for (size_t c = 0; c < count; ++c) {
      for_each_in_index_order([&](size_t j, int r) { per_index[c][j] += part(r, c); });
      widest = std::max(widest, std::accumulate(per_index[c].begin(), per_index[c].end(), size_t{0}));
    }
  }

  // Units of chunk c of group rank r's block (it starts at c * step).
  size_t part(int r, size_t c) const {
    const size_t size = sizes[static_cast<size_t>(r)];
    return c * step >= size ? 0 : std::min(step, size - c * step);
  }
  // Units before local index j's part of chunk c.
  size_t before_index(size_t c, size_t j) const {
    return std::accumulate(per_index[c].begin(), per_index[c].begin() + static_cast<std::ptrdiff_t>(j),
                           size_t{0});
  }
  // The units of local index j's blocks on every host, for chunk c.
  std::vector<size_t> across_hosts(size_t c, size_t j) const {
    std::vector<size_t> parts;
    parts.reserve(by_host.size());
    for (const auto& host : by_host) parts.push_back(part(host[j], c));
    return parts;
  }
  // Chunk c's part of every group rank's block, where it lies at `base`
  // (blocks of `unit`-byte units): out[j] lists local index j's parts, host
  // by host -- the block local rank j takes in the shared-memory stage.
  template <typename Segment, typename Byte>
  void segments_of(size_t c, Byte* base, size_t unit, std::vector<std::vector<Segment>>& out) const {
    for (auto& block : out) block.clear();
    for_each_in_index_order([&](size_t j, int r) {
      const size_t n = part(r, c);
      if (n > 0) out[j].push_back({base + (offset[static_cast<size_t>(r)] + c * step) * unit, n});
    });
  }
  // Calls fn(j, r) for every group rank r in local-index-then-host order.
  template <typename Fn>
  void for_each_in_index_order(Fn&& fn) const {
    for (size_t j = 0; j < by_host[0].size(); ++j) {
      for (const auto& host : by_host) fn(j, host[j]);
    }
  }

  const std::vector<size_t>& sizes;
  size_t step;
  const std::vector<std::vector<int>>& by_host;
  size_t count = 0;
  std::vector<size_t> offset;                  // of each group rank's block in the whole buffer
  std::vector<std::vector<size_t>> per_index;  // [chunk][local index]
  size_t widest = 0;                           // units of the largest chunk
};

}  // namespace

void hierarchical_all_reduce(const CallContext& ctx, ShmGroup& local, transport::Transport& local_ranks,
                             transport::Transport& cross_ranks, tdist::detail::WorkerThread& cross_worker,
                             size_t chunk_bytes, void* data, size_t count, DType dtype, const ReduceOp& op) {
  const int l = local.size();
  const size_t me = static_cast<size_t>(local.rank());
  const size_t eb = element_size(dtype);
  auto* bytes = static_cast<uint8_t*>(data);
  const ReduceOp inside = op_inside_host(op);
  const ReduceOp across = op_across_hosts(op);
  const CallContext in_host = on_host(ctx, local_ranks);
  const CallContext between = on(ctx, cross_ranks);
  if (hierarchical_all_reduce_whole(count * eb)) {
    // Two stages instead of three: every local rank gets the host's sum in
    // shared memory and all-reduces all of it across hosts; the L crossings
    // carry the same bits, so every rank ends with the same result.
    pipeline(
        between, local, cross_worker, 1,
        [&](size_t) {
          all_reduce(between, data, count, dtype, across);
          if (op.kind == ReduceOp::AVG) finalize_reduce(data, count, dtype, op, ctx.size());
        },
        [&](size_t) { all_reduce(in_host, local, data, count, dtype, inside); }, [](size_t) {});
    return;
  }
  const std::vector<Chunk> chunks = plan_chunks(count, std::max<size_t>(1, chunk_bytes / eb), l, me);
  size_t mine_total = 0;
  for (const auto& c : chunks) mine_total += c.counts[me];
  auto pieces = algorithms::detail::make_scratch(mine_total * eb);
  auto piece_of = [&](const Chunk& c) { return pieces.get() + c.mine_offset * eb; };
  auto reduce_scatter_chunk = [&](const Chunk& c) {
    reduce_scatter(in_host, local, bytes + c.begin * eb, piece_of(c), c.counts, dtype, inside);
  };
  auto all_gather_chunk = [&](const Chunk& c) {
    std::vector<size_t> block_bytes(c.counts.size());
    for (size_t i = 0; i < c.counts.size(); ++i) block_bytes[i] = c.counts[i] * eb;
    all_gather(in_host, local, piece_of(c), bytes + c.begin * eb, block_bytes);
  };
  auto cross_chunk = [&](const Chunk& c) {
    all_reduce(between, piece_of(c), c.counts[me], dtype, across);
    if (op.kind == ReduceOp::AVG) finalize_reduce(piece_of(c), c.counts[me], dtype, op, ctx.size());
  };
  pipeline(
      between, local, cross_worker, chunks.size(), [&](size_t c) { cross_chunk(chunks[c]); },
      [&](size_t c) { reduce_scatter_chunk(chunks[c]); }, [&](size_t c) { all_gather_chunk(chunks[c]); });
}

// all_gather across hosts: each rank first exchanges its own block with the
// ranks of the same local index on the other hosts, so every byte crosses
// each host boundary once -- the (H - 1) / H of the output an all_gather
// must move off a host -- where a flat ring over all ranks crosses at every
// edge that joins two hosts. Then the host's ranks share what they received
// in shared memory, each writing every block straight to its group rank's
// place in the output (all_gather_segments). Sharing into one buffer and
// copying out of it into rank order took 15-17% longer at 2 hosts x 2
// ranks and 35% longer at 2 x 4 (16 and 64 MiB over 5 Gbit/s, 2026-11-27,
// two alternating runs of three each). Chunk c crosses
// on the helper thread while the caller shares chunk c - 1; at most two
// chunks are in flight, so what crossed alternates between two halves of a
// scratch small enough to be recycled from call to call.
void hierarchical_all_gather(const CallContext& ctx, ShmGroup& local, transport::Transport& local_ranks,
                             transport::Transport& cross_ranks, tdist::detail::WorkerThread& cross_worker,
                             size_t chunk_bytes, const std::vector<std::vector<int>>& by_host, const void* in,
                             void* out, const std::vector<size_t>& bytes) {
  const auto mine = static_cast<size_t>(local.rank());
  const BlockChunks chunks(bytes, chunk_bytes, by_host);
  size_t widest_mine = 0;  // this local index's largest chunk, on every host
  for (const auto& per_index : chunks.per_index) widest_mine = std::max(widest_mine, per_index[mine]);
  auto scratch = algorithms::detail::make_scratch(std::min(chunks.count, size_t{2}) * widest_mine);
  auto region_of = [&](size_t c) { return scratch.get() + (c % 2) * widest_mine; };
  const CallContext in_host = on_host(ctx, local_ranks);
  const CallContext between = on(ctx, cross_ranks);
  const auto* source = static_cast<const uint8_t*>(in);
  auto* target = static_cast<uint8_t*>(out);
  auto across = [&](size_t c) {
    const size_t own = bytes[static_cast<size_t>(ctx.rank())];
    algorithms::all_gather(between, source + std::min(c * chunks.step, own), region_of(c),
                           chunks.across_hosts(c, mine));
  };
  // Each part of local index j's block of chunk c goes to its rank's place
  // in the output.
  std::vector<std::vector<OutputSegment>> places(by_host[0].size());
  auto share = [&](size_t c) {
    chunks.segments_of(c, target, 1, places);
    all_gather_segments(in_host, local, region_of(c), places);
  };
  pipeline(
      between, local, cross_worker, chunks.count, across, [](size_t) {}, share);
}

// reduce_scatter across hosts: inside each host a shared-memory
// reduce-scatter leaves local rank j with the host's sum of the blocks that
// belong to local index j on every host; local rank j then reduce-scatters
// those H blocks over TCP with local rank j of every other host, each of
// which keeps its own. Each host sends (H - 1) / H of the input across its
// link, the least a reduce_scatter can. The shared-memory stage reads each
// local rank's part of a chunk from the H places it lies in the input
// (reduce_scatter_segments), with no copy into local-index order first.
// Chunk c crosses on the helper thread while the caller reduces chunk
// c + 1: two pieces suffice.
void hierarchical_reduce_scatter(const CallContext& ctx, ShmGroup& local, transport::Transport& local_ranks,
                                 transport::Transport& cross_ranks, tdist::detail::WorkerThread& cross_worker,
                                 size_t chunk_bytes, const std::vector<std::vector<int>>& by_host,
                                 const void* in, void* out, const std::vector<size_t>& counts, DType dtype,
                                 const ReduceOp& op) {
  const auto mine = static_cast<size_t>(local.rank());
  const size_t eb = element_size(dtype);
  const BlockChunks chunks(counts, chunk_bytes / eb, by_host);  // in elements
  size_t widest_piece = 0;
  for (size_t c = 0; c < chunks.count; ++c) widest_piece = std::max(widest_piece, chunks.per_index[c][mine]);
  auto pieces = algorithms::detail::make_scratch(std::min(chunks.count, size_t{2}) * widest_piece * eb);
  auto piece_of = [&](size_t c) { return pieces.get() + (c % 2) * widest_piece * eb; };
  const CallContext in_host = on_host(ctx, local_ranks);
  const CallContext between = on(ctx, cross_ranks);
  const auto* source = static_cast<const uint8_t*>(in);
  auto* target = static_cast<uint8_t*>(out);
  std::vector<std::vector<InputSegment>> blocks(by_host[0].size());
  auto reduce_inside = [&](size_t c) {
    // Local index j's block of the chunk, read where it lies in the input.
    chunks.segments_of(c, source, eb, blocks);
    reduce_scatter_segments(in_host, local, blocks, piece_of(c), chunks.per_index[c], dtype,
                            op_inside_host(op));
  };
  auto across = [&](size_t c) {
    const auto me = static_cast<size_t>(ctx.rank());
    uint8_t* mine_out = target + std::min(c * chunks.step, counts[me]) * eb;
    algorithms::reduce_scatter(between, piece_of(c), mine_out, chunks.across_hosts(c, mine), dtype,
                               op_across_hosts(op));
    if (op.kind == ReduceOp::AVG)
      finalize_reduce(mine_out, chunks.part(ctx.rank(), c), dtype, op, ctx.size());
  };
  pipeline(between, local, cross_worker, chunks.count, across, reduce_inside, [](size_t) {});
}

// broadcast across hosts: the root's host first shares each chunk in
// shared memory; then local rank j of the root's host sends piece j of the
// chunk to local rank j of every other host (the L pieces cross at once,
// one TCP stream per local index), and each of those hosts assembles the
// chunk with a shared-memory all-gather. The root's host sends the buffer
// across its link once, the least a broadcast can; a flat algorithm over
// all ranks sends it at every edge that joins two hosts. Chunk c crosses on
// the helper thread while the caller shares chunk c + 1 (root's host) or
// assembles chunk c - 1 (the others): regions of `data` that do not meet.
void hierarchical_broadcast(const CallContext& ctx, ShmGroup& local, transport::Transport& local_ranks,
                            transport::Transport& cross_ranks, tdist::detail::WorkerThread& cross_worker,
                            size_t chunk_bytes, const std::vector<std::vector<int>>& by_host, void* data,
                            size_t nbytes, int root) {
  const int l = local.size();
  const auto me = static_cast<size_t>(local.rank());
  const Position from = position_of(by_host, root);
  const bool on_root_host = static_cast<size_t>(cross_ranks.rank()) == from.host;
  const std::vector<Chunk> chunks = plan_chunks(nbytes, std::max<size_t>(1, chunk_bytes), l, me);
  auto* bytes = static_cast<uint8_t*>(data);
  const CallContext in_host = on_host(ctx, local_ranks);
  const CallContext between = on(ctx, cross_ranks);
  auto piece_of = [&](const Chunk& c) {
    return bytes + c.begin +
           std::accumulate(c.counts.begin(), c.counts.begin() + static_cast<std::ptrdiff_t>(me), size_t{0});
  };
  auto chunk_bytes_of = [](const Chunk& c) {
    return std::accumulate(c.counts.begin(), c.counts.end(), size_t{0});
  };
  auto share = [&](size_t c) {
    if (on_root_host) {
      broadcast(in_host, local, bytes + chunks[c].begin, chunk_bytes_of(chunks[c]),
                static_cast<int>(from.index));
    }
  };
  auto across = [&](size_t c) {
    algorithms::broadcast(between, piece_of(chunks[c]), chunks[c].counts[me], static_cast<int>(from.host));
  };
  auto assemble = [&](size_t c) {
    if (!on_root_host)
      all_gather(in_host, local, piece_of(chunks[c]), bytes + chunks[c].begin, chunks[c].counts);  // in place
  };
  pipeline(between, local, cross_worker, chunks.size(), across, share, assemble);
}

// all_to_all across hosts: the blocks for ranks on other hosts go straight
// over TCP, every one posted at once (the linear algorithm, on the helper
// thread), while the host's own ranks exchange theirs in shared memory on
// the caller's thread. Each host sends the L x (H - 1) / H of its ranks'
// inputs that must leave it, and its link carries them for the whole call;
// the flat pairwise exchange over all ranks idles the link while a step
// pairs ranks of one host, which it runs over TCP too.
void hierarchical_all_to_all(const CallContext& ctx, ShmGroup& local, transport::Transport& local_ranks,
                             tdist::detail::WorkerThread& cross_worker,
                             const std::vector<std::vector<int>>& by_host, const void* in,
                             const std::vector<size_t>& send_bytes, const std::vector<size_t>& send_offsets,
                             void* out, const std::vector<size_t>& recv_bytes,
                             const std::vector<size_t>& recv_offsets) {
  // Before anything moves: the shared-memory stage would find it only after
  // the blocks for other hosts are on their way.
  algorithms::detail::check_own_block(ctx, send_bytes, recv_bytes);
  const std::vector<int>& mine = by_host[position_of(by_host, ctx.rank()).host];
  // This host's blocks, by local index, for shared memory; the others' sizes
  // over TCP, with the host's own set to zero (empty messages keep every
  // pair of ranks matched, as the flat algorithm does).
  std::vector<size_t> local_send, local_send_at, local_recv, local_recv_at;
  std::vector<size_t> remote_send = send_bytes;
  std::vector<size_t> remote_recv = recv_bytes;
  for (int r : mine) {
    const auto at = static_cast<size_t>(r);
    local_send.push_back(send_bytes[at]);
    local_send_at.push_back(send_offsets[at]);
    local_recv.push_back(recv_bytes[at]);
    local_recv_at.push_back(recv_offsets[at]);
    remote_send[at] = 0;
    remote_recv[at] = 0;
  }
  const CallContext in_host = on_host(ctx, local_ranks);
  // Two rounds of the pipeline: the crossing of round 0 (the remote
  // blocks) runs on the helper while the caller runs round 1's local stage.
  pipeline(
      ctx, local, cross_worker, 2,
      [&](size_t c) {
        if (c == 0) {
          algorithms::all_to_all(ctx, in, remote_send, send_offsets, out, remote_recv, recv_offsets,
                                 AllToAllAlgo::kLinear);
        }
      },
      [&](size_t c) {
        if (c == 1) all_to_all(in_host, local, in, local_send, local_send_at, out, local_recv, local_recv_at);
      },
      [](size_t) {});
}

}  // namespace tdist::algorithms::shm
