#pragma once

// The collectives tdist-bench measures, and nccl-tests' conventions for each:
// how a message size maps onto per-rank buffers, and the bus bandwidth factor.

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tdist::bench {

enum class BenchOp {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kGather,
  kScatter,
  kSendRecv,
  kBarrier,
};

/// Every op, in the order `--op all` runs them.
inline constexpr std::array<BenchOp, 10> kAllBenchOps = {
    BenchOp::kAllReduce, BenchOp::kBroadcast, BenchOp::kReduce,  BenchOp::kAllGather, BenchOp::kReduceScatter,
    BenchOp::kAllToAll,  BenchOp::kGather,    BenchOp::kScatter, BenchOp::kSendRecv,  BenchOp::kBarrier,
};

/// "all_reduce", "broadcast", ...
const char* bench_op_name(BenchOp op);
/// The op named `name` (exactly as bench_op_name spells it), or nullopt.
std::optional<BenchOp> find_bench_op(std::string_view name);
/// True for the ops that take a reduce op (all_reduce, reduce, reduce_scatter).
bool is_reducing(BenchOp op);
/// True for ops whose root is rank 0 (broadcast, reduce, gather, scatter).
bool has_root(BenchOp op);

/// nccl-tests' bus bandwidth factor: busbw = algbw x factor, so that the
/// figure is comparable with the link bandwidth whatever the op and the
/// world size. 0 for barrier, which moves no data.
double bus_factor(BenchOp op, int world_size);

/// How one message size maps onto the buffers of one rank.
struct Layout {
  /// nccl-tests' `count`: the element count each rank passes to the op (the
  /// whole buffer for all_reduce, broadcast, reduce and sendrecv; one rank's
  /// share for all_gather, gather, reduce_scatter, scatter; one peer's block
  /// for all_to_all).
  int64_t count = 0;
  /// Elements of the input and output buffers (for gather the output exists
  /// on the root only, for scatter the input; in-place ops have one buffer,
  /// reported as the input).
  int64_t input_elems = 0;
  int64_t output_elems = 0;
  /// The size reported in the `bytes` column: the whole buffer (all_gather's
  /// output, reduce_scatter's input), after rounding the requested size down
  /// to whole elements and, where the buffer is split across ranks, to a
  /// multiple of the world size. 0 when nothing is left (skip the size).
  uint64_t bytes = 0;
};

/// The layout of `op` for a requested message size, as nccl-tests sizes it.
Layout layout_for(BenchOp op, uint64_t requested_bytes, size_t element_size, int world_size);

}  // namespace tdist::bench
