// all_reduce across hosts: a
// shared-memory reduce-scatter inside each host leaves local rank i with
// piece i of its host's sum; local rank i then all-reduces that piece over
// TCP with local rank i of every other host (one TCP stream per local rank,
// all of them at once); a shared-memory all-gather inside each host
// assembles the whole result. Every rank ends with the same bits: each piece
// is reduced inside a host in rank order and across hosts by an algorithm
// whose results are bitwise identical on its ranks.
//
// Pipelined in chunks: while the helper thread all-reduces chunk c across
// hosts (it drives TCP), the caller's thread reduce-scatters chunk c + 1 and
// all-gathers chunk c - 1 in shared memory. The caller's thread always runs
// RS(0), RS(1), AG(0), RS(2), AG(1), ..., AG(last), whatever the timing, so
// every rank of a host runs the same shared-memory rounds in the same order;
// the helper runs the chunks' TCP all_reduces one after another, so their
// messages (same tags, one call) match in order.

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

// The call `ctx` on another transport: this host's ranks, or the ranks of
// one local index across hosts (same op, sequence number and deadline).
CallContext on(const CallContext& ctx, transport::Transport& ranks) {
  return {ranks, ctx.op, ctx.seq, ctx.deadline, ctx.timeout, ctx.sig, ctx.previous, ctx.notes};
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

}  // namespace

void hierarchical_all_reduce(const CallContext& ctx, ShmGroup& local, transport::Transport& local_ranks,
                             transport::Transport& cross_ranks, tdist::detail::WorkerThread& cross_worker,
                             size_t chunk_bytes, void* data, size_t count, DType dtype, const ReduceOp& op) {
  const int l = local.size();
  const size_t me = static_cast<size_t>(local.rank());
  const size_t eb = element_size(dtype);
  auto* bytes = static_cast<uint8_t*>(data);
  // AVG sums in both stages and divides once at the end (integer AVG would
  // truncate twice otherwise); PREMUL_SUM's factor is applied once, inside
  // the host.
  const ReduceOp inside = op.kind == ReduceOp::AVG ? ReduceOp(ReduceOp::SUM) : op;
  const ReduceOp across =
      (op.kind == ReduceOp::AVG || op.kind == ReduceOp::PREMUL_SUM) ? ReduceOp(ReduceOp::SUM) : op;
  const std::vector<Chunk> chunks = plan_chunks(count, std::max<size_t>(1, chunk_bytes / eb), l, me);
  size_t mine_total = 0;
  for (const auto& c : chunks) mine_total += c.counts[me];
  auto pieces = algorithms::detail::make_scratch(mine_total * eb);
  const CallContext in_host = on(ctx, local_ranks);
  const CallContext between = on(ctx, cross_ranks);
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
// ranks of the same local index on the other hosts (TCP, one stream per
// local index, all at once), so every byte crosses each host boundary once
// -- the (H - 1) / H of the output an all_gather must move off a host --
// where a flat ring over all ranks crosses at every edge that joins two
// hosts. Then the host's ranks share what they received in shared memory,
// and each copies every block to its group rank's place in the output.
// Pipelined in chunks of every block (chunk_bytes each): chunk c crosses
// on the helper thread while the caller shares and places chunk c - 1.
void hierarchical_all_gather(const CallContext& ctx, ShmGroup& local, transport::Transport& local_ranks,
                             transport::Transport& cross_ranks, tdist::detail::WorkerThread& cross_worker,
                             size_t chunk_bytes, const std::vector<std::vector<int>>& by_host, const void* in,
                             void* out, const std::vector<size_t>& bytes) {
  const size_t hosts = by_host.size();
  const size_t per_host = by_host[0].size();
  const auto mine = static_cast<size_t>(local.rank());
  const size_t largest = *std::max_element(bytes.begin(), bytes.end());
  const size_t step = std::max<size_t>(1, chunk_bytes);
  const size_t count = std::max<size_t>(1, (largest + step - 1) / step);
  // Chunk c of group rank r's block: [c * step, c * step + part(r, c)).
  auto part = [&](int r, size_t c) {
    const size_t size = bytes[static_cast<size_t>(r)];
    return c * step >= size ? size_t{0} : std::min(step, size - c * step);
  };
  std::vector<size_t> offset(bytes.size(), 0);  // of each group rank's block in `out`
  for (size_t r = 1; r < bytes.size(); ++r) offset[r] = offset[r - 1] + bytes[r - 1];
  // Each chunk's region of the scratch holds local index 0's blocks (one per
  // host, in host order), then local index 1's, ...
  std::vector<size_t> region(count + 1, 0);
  std::vector<std::vector<size_t>> inside(count, std::vector<size_t>(per_host, 0));
  for (size_t c = 0; c < count; ++c) {
    for (size_t j = 0; j < per_host; ++j) {
      for (size_t h = 0; h < hosts; ++h) inside[c][j] += part(by_host[h][j], c);
    }
    region[c + 1] = region[c] + std::accumulate(inside[c].begin(), inside[c].end(), size_t{0});
  }
  // Two chunks are in flight at most (one crossing, one being shared):
  // their regions alternate between two halves of the scratch, so it stays
  // small enough to be recycled from call to call.
  size_t widest = 0;
  for (size_t c = 0; c < count; ++c) widest = std::max(widest, region[c + 1] - region[c]);
  auto scratch = algorithms::detail::make_scratch(std::min(count, size_t{2}) * widest);
  auto region_of = [&](size_t c) { return scratch.get() + (c % 2) * widest; };
  auto mine_in = [&](size_t c) {
    size_t at = 0;
    for (size_t j = 0; j < mine; ++j) at += inside[c][j];
    return region_of(c) + at;
  };
  const CallContext in_host = on(ctx, local_ranks);
  const CallContext between = on(ctx, cross_ranks);
  const auto* source = static_cast<const uint8_t*>(in);
  auto* target = static_cast<uint8_t*>(out);
  auto across = [&](size_t c) {
    std::vector<size_t> sizes(hosts);
    for (size_t h = 0; h < hosts; ++h) sizes[h] = part(by_host[h][mine], c);
    // Lands straight in this rank's part of the chunk's region.
    const size_t own = bytes[static_cast<size_t>(ctx.rank())];
    algorithms::all_gather(between, source + std::min(c * step, own), mine_in(c), sizes);
  };
  auto share_and_place = [&](size_t c) {
    all_gather(in_host, local, mine_in(c), region_of(c), inside[c]);  // in place
    const uint8_t* from = region_of(c);
    for (size_t j = 0; j < per_host; ++j) {
      for (size_t h = 0; h < hosts; ++h) {
        const int r = by_host[h][j];
        const size_t n = part(r, c);
        if (n > 0) std::memcpy(target + offset[static_cast<size_t>(r)] + c * step, from, n);
        from += n;
      }
    }
  };
  pipeline(
      between, local, cross_worker, count, across, [](size_t) {}, share_and_place);
}

// reduce_scatter across hosts: inside each host a shared-memory
// reduce-scatter leaves local rank j with the host's sum of the blocks that
// belong to local index j on every host; local rank j then reduce-scatters
// those H blocks over TCP with local rank j of every other host, each of
// which keeps its own. Each host sends (H - 1) / H of the input across its
// link, the least a reduce_scatter can. The input is first copied into
// local-index order (the shared-memory stage takes each local rank's part
// in one piece). Pipelined in chunks of chunk_bytes of every block: chunk
// c crosses on the helper thread while the caller reduces chunk c + 1.
void hierarchical_reduce_scatter(const CallContext& ctx, ShmGroup& local, transport::Transport& local_ranks,
                                 transport::Transport& cross_ranks, tdist::detail::WorkerThread& cross_worker,
                                 size_t chunk_bytes, const std::vector<std::vector<int>>& by_host,
                                 const void* in, void* out, const std::vector<size_t>& counts, DType dtype,
                                 const ReduceOp& op) {
  const size_t hosts = by_host.size();
  const size_t per_host = by_host[0].size();
  const auto mine = static_cast<size_t>(local.rank());
  const size_t eb = element_size(dtype);
  // As all_reduce: AVG sums in both stages and divides once; PREMUL_SUM's
  // factor is applied once, inside the host.
  const ReduceOp inside_op = op.kind == ReduceOp::AVG ? ReduceOp(ReduceOp::SUM) : op;
  const ReduceOp across_op =
      (op.kind == ReduceOp::AVG || op.kind == ReduceOp::PREMUL_SUM) ? ReduceOp(ReduceOp::SUM) : op;
  const size_t largest = *std::max_element(counts.begin(), counts.end());
  const size_t step = std::max<size_t>(1, chunk_bytes / eb);
  const size_t count = std::max<size_t>(1, (largest + step - 1) / step);
  auto part = [&](int r, size_t c) {
    const size_t size = counts[static_cast<size_t>(r)];
    return c * step >= size ? size_t{0} : std::min(step, size - c * step);
  };
  std::vector<size_t> offset(counts.size(), 0);  // of each group rank's block in `in`, in elements
  for (size_t r = 1; r < counts.size(); ++r) offset[r] = offset[r - 1] + counts[r - 1];
  // Per chunk: each local index's part of the staging (its blocks, one per
  // host in host order) and where the chunk's staging and piece start.
  std::vector<std::vector<size_t>> inside(count, std::vector<size_t>(per_host, 0));
  std::vector<size_t> staged(count + 1, 0);
  std::vector<size_t> pieces(count + 1, 0);
  for (size_t c = 0; c < count; ++c) {
    for (size_t j = 0; j < per_host; ++j) {
      for (size_t h = 0; h < hosts; ++h) inside[c][j] += part(by_host[h][j], c);
    }
    staged[c + 1] = staged[c] + std::accumulate(inside[c].begin(), inside[c].end(), size_t{0});
    pieces[c + 1] = pieces[c] + inside[c][mine];
  }
  // The staging is needed only while a chunk is reduced inside the host,
  // and two chunks' pieces at most are in flight (one crossing, the next
  // being reduced): small buffers, recycled from call to call.
  size_t widest_staged = 0;
  size_t widest_piece = 0;
  for (size_t c = 0; c < count; ++c) {
    widest_staged = std::max(widest_staged, staged[c + 1] - staged[c]);
    widest_piece = std::max(widest_piece, pieces[c + 1] - pieces[c]);
  }
  auto staging = algorithms::detail::make_scratch(widest_staged * eb);
  auto pieces_buffer = algorithms::detail::make_scratch(std::min(count, size_t{2}) * widest_piece * eb);
  auto piece_of = [&](size_t c) { return pieces_buffer.get() + (c % 2) * widest_piece * eb; };
  const CallContext in_host = on(ctx, local_ranks);
  const CallContext between = on(ctx, cross_ranks);
  const auto* source = static_cast<const uint8_t*>(in);
  auto* target = static_cast<uint8_t*>(out);
  auto reduce_inside = [&](size_t c) {
    uint8_t* to = staging.get();
    for (size_t j = 0; j < per_host; ++j) {
      for (size_t h = 0; h < hosts; ++h) {
        const int r = by_host[h][j];
        const size_t n = part(r, c);
        if (n > 0) std::memcpy(to, source + (offset[static_cast<size_t>(r)] + c * step) * eb, n * eb);
        to += n * eb;
      }
    }
    reduce_scatter(in_host, local, staging.get(), piece_of(c), inside[c], dtype, inside_op);
  };
  auto across = [&](size_t c) {
    std::vector<size_t> sizes(hosts);
    for (size_t h = 0; h < hosts; ++h) sizes[h] = part(by_host[h][mine], c);
    const auto me = static_cast<size_t>(ctx.rank());
    uint8_t* mine_out = target + std::min(c * step, counts[me]) * eb;
    algorithms::reduce_scatter(between, piece_of(c), mine_out, sizes, dtype, across_op);
    if (op.kind == ReduceOp::AVG) finalize_reduce(mine_out, part(ctx.rank(), c), dtype, op, ctx.size());
  };
  pipeline(between, local, cross_worker, count, across, reduce_inside, [](size_t) {});
}

}  // namespace tdist::algorithms::shm
