#pragma once

// Rows of results as nccl-tests prints them (a table) or as JSON lines with
// the keys the peer benchmarks of tools/compare print.

#include <cstdint>
#include <optional>
#include <string>

#include "bench_ops.h"
#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::bench {

struct Row {
  BenchOp op = BenchOp::kAllReduce;
  DType dtype = DType::kFloat32;
  ReduceOp reduce_op;
  int world_size = 1;
  Layout layout;
  /// Mean time of one operation, in microseconds.
  double time_us = 0;
  /// Wrong elements summed over ranks; nullopt when not checked.
  std::optional<int64_t> errors;
  /// The algorithm the op's last timed call ran, as the flight recorder
  /// names it (docs/tuning.md); empty when it names none (send/recv, or
  /// the recorder is off: TDIST_TRACE_BUFFER_SIZE=0).
  std::string algorithm;
};

/// bytes / time in GB/s (10^9 bytes per second, as nccl-tests).
double algbw_gbps(const Row& row);
/// algbw x the op's bus factor.
double busbw_gbps(const Row& row);

/// One JSON object with the keys lib, op, dtype, world_size, bytes,
/// time_us, algbw_GBps, busbw_GBps, errors (the wrong elements over all
/// ranks; 0 when not checked, as nothing was found wrong), as the peers'
/// rows have them, then algorithm when the row has one.
std::string json_row(const Row& row);

/// The table's title and column headings.
std::string table_header(int world_size, DType dtype, const ReduceOp& reduce_op, int iters, int warmup,
                         bool check);
/// One line of the table.
std::string table_row(const Row& row);

}  // namespace tdist::bench
