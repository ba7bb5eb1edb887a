// all_reduce across hosts (performance.md, "TCP across hosts"): a
// shared-memory reduce-scatter inside each host leaves local rank i with
// piece i of its host's sum; local rank i then all-reduces that piece over
// TCP with local rank i of every other host (one TCP stream per local rank,
// all of them at once); a shared-memory all-gather inside each host
// assembles the whole result. Every rank ends with the same bits: each piece
// is reduced inside a host in rank order and across hosts by an algorithm
// whose results are bitwise identical on its ranks.

#include <cstring>
#include <vector>

#include "algorithms/shm/shm_collectives.h"
#include "algorithms/shm/shm_common.h"
#include "common/reduce_kernels.h"

namespace tdist::algorithms::shm {

void hierarchical_all_reduce(const CallContext& ctx, ShmGroup& local, transport::Transport& local_ranks,
                             transport::Transport& cross_ranks, void* data, size_t count, DType dtype,
                             const ReduceOp& op) {
  const int l = local.size();
  const size_t me = static_cast<size_t>(local.rank());
  const size_t eb = element_size(dtype);
  std::vector<size_t> counts(static_cast<size_t>(l), count / static_cast<size_t>(l));
  for (size_t i = 0; i < count % static_cast<size_t>(l); ++i) ++counts[i];
  // AVG sums in both stages and divides once at the end (integer AVG would
  // truncate twice otherwise); PREMUL_SUM's factor is applied once, inside
  // the host.
  const ReduceOp inside = op.kind == ReduceOp::AVG ? ReduceOp(ReduceOp::SUM) : op;
  const ReduceOp across =
      (op.kind == ReduceOp::AVG || op.kind == ReduceOp::PREMUL_SUM) ? ReduceOp(ReduceOp::SUM) : op;
  auto piece = algorithms::detail::make_scratch(counts[me] * eb);
  const CallContext in_host{local_ranks, ctx.op, ctx.seq, ctx.deadline, ctx.timeout};
  const CallContext between{cross_ranks, ctx.op, ctx.seq, ctx.deadline, ctx.timeout};
  try {
    reduce_scatter(in_host, local, data, piece.get(), counts, dtype, inside);
    all_reduce(between, piece.get(), counts[me], dtype, across);
    if (op.kind == ReduceOp::AVG) {
      finalize_reduce(piece.get(), counts[me], dtype, op, ctx.size());
    }
    std::vector<size_t> bytes(counts.size());
    for (size_t i = 0; i < counts.size(); ++i) bytes[i] = counts[i] * eb;
    all_gather(in_host, local, piece.get(), data, bytes);
  } catch (const std::exception& e) {
    // A failure across hosts must also stop this host's ranks waiting in
    // shared memory for this one.
    local.abort(e.what(), ShmGroup::AbortKind::kOther);
    throw;
  }
}

}  // namespace tdist::algorithms::shm
