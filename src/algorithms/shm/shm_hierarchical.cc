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
#include <mutex>
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
  const CallContext in_host{local_ranks, ctx.op,  ctx.seq,      ctx.deadline,
                            ctx.timeout, ctx.sig, ctx.previous, ctx.notes};
  const CallContext between{cross_ranks, ctx.op,  ctx.seq,      ctx.deadline,
                            ctx.timeout, ctx.sig, ctx.previous, ctx.notes};
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
  if (chunks.size() == 1) {
    try {
      reduce_scatter_chunk(chunks[0]);
      cross_chunk(chunks[0]);
      all_gather_chunk(chunks[0]);
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
      transport::CallScope scope(cross_ranks);
      for (size_t c = 0; c < chunks.size(); ++c) {
        {
          std::unique_lock<std::mutex> lock(state.mutex);
          state.cv.wait(lock, [&] { return state.stop || state.ready > c; });
          if (state.stop) break;
        }
        cross_chunk(chunks[c]);
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
    for (size_t c = 0; c < chunks.size(); ++c) {
      reduce_scatter_chunk(chunks[c]);
      {
        std::lock_guard<std::mutex> lock(state.mutex);
        state.ready = c + 1;
      }
      state.cv.notify_all();
      if (c == 0) continue;
      wait_crossed(c - 1);
      all_gather_chunk(chunks[c - 1]);
    }
    wait_crossed(chunks.size() - 1);
    all_gather_chunk(chunks.back());
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(state.mutex);
      state.stop = true;
    }
    state.cv.notify_all();
    // A helper blocked in a TCP wait gives up once the transport is
    // aborted; `state` and the pieces must outlive it.
    algorithms::detail::abort_call(between, std::current_exception());
    helper_finished();
    detail::abort_group(local, std::current_exception());
    throw;
  }
  helper_finished();
}

}  // namespace tdist::algorithms::shm
