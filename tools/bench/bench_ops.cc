#include "bench_ops.h"

namespace tdist::bench {

const char* bench_op_name(BenchOp op) {
  switch (op) {
    case BenchOp::kAllReduce:
      return "all_reduce";
    case BenchOp::kBroadcast:
      return "broadcast";
    case BenchOp::kReduce:
      return "reduce";
    case BenchOp::kAllGather:
      return "all_gather";
    case BenchOp::kReduceScatter:
      return "reduce_scatter";
    case BenchOp::kAllToAll:
      return "all_to_all";
    case BenchOp::kGather:
      return "gather";
    case BenchOp::kScatter:
      return "scatter";
    case BenchOp::kSendRecv:
      return "sendrecv";
    case BenchOp::kBarrier:
      return "barrier";
  }
  return "unknown";
}

std::optional<BenchOp> find_bench_op(std::string_view name) {
  for (BenchOp op : kAllBenchOps) {
    if (name == bench_op_name(op)) return op;
  }
  return std::nullopt;
}

bool is_reducing(BenchOp op) {
  return op == BenchOp::kAllReduce || op == BenchOp::kReduce || op == BenchOp::kReduceScatter;
}

bool has_root(BenchOp op) {
  return op == BenchOp::kBroadcast || op == BenchOp::kReduce || op == BenchOp::kGather ||
         op == BenchOp::kScatter;
}

double bus_factor(BenchOp op, int world_size) {
  const double p = world_size;
  switch (op) {
    case BenchOp::kAllReduce:
      // Each rank sends and receives 2(p-1)/p of the buffer in a ring.
      return 2.0 * (p - 1) / p;
    case BenchOp::kAllGather:
    case BenchOp::kReduceScatter:
    case BenchOp::kAllToAll:
    case BenchOp::kGather:
    case BenchOp::kScatter:
      // Every rank but one's own share crosses the wire.
      return (p - 1) / p;
    case BenchOp::kBroadcast:
    case BenchOp::kReduce:
    case BenchOp::kSendRecv:
      return 1.0;
    case BenchOp::kBarrier:
      return 0.0;
  }
  return 0.0;
}

Layout layout_for(BenchOp op, uint64_t requested_bytes, size_t element_size, int world_size) {
  const auto p = static_cast<int64_t>(world_size);
  const auto elems = static_cast<int64_t>(requested_bytes / element_size);
  Layout layout;
  switch (op) {
    case BenchOp::kAllReduce:
    case BenchOp::kBroadcast:
    case BenchOp::kReduce:
    case BenchOp::kSendRecv:
      layout.count = elems;
      layout.input_elems = elems;
      layout.output_elems = op == BenchOp::kSendRecv ? elems : 0;
      layout.bytes = static_cast<uint64_t>(elems) * element_size;
      break;
    case BenchOp::kAllGather:
    case BenchOp::kGather:
      layout.count = elems / p;
      layout.input_elems = layout.count;
      layout.output_elems = layout.count * p;
      layout.bytes = static_cast<uint64_t>(layout.output_elems) * element_size;
      break;
    case BenchOp::kReduceScatter:
    case BenchOp::kScatter:
      layout.count = elems / p;
      layout.input_elems = layout.count * p;
      layout.output_elems = layout.count;
      layout.bytes = static_cast<uint64_t>(layout.input_elems) * element_size;
      break;
    case BenchOp::kAllToAll:
      layout.count = elems / p;
      layout.input_elems = layout.count * p;
      layout.output_elems = layout.count * p;
      layout.bytes = static_cast<uint64_t>(layout.input_elems) * element_size;
      break;
    case BenchOp::kBarrier:
      break;
  }
  return layout;
}

}  // namespace tdist::bench
