#pragma once

// The values --check puts into the buffers and the values it expects back.
//
// Every value is a small integer, chosen so that each dtype holds it, and any
// sum of p of them, exactly: the reduced result is then the same whatever
// order or tree the library reduces in, and the check can demand equality
// instead of a tolerance. Values are computed as int64 and converted to the
// element type at the end (integers wrap, bool is "nonzero").

#include <cstdint>

#include "bench_ops.h"
#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::bench {

/// The input values of one check run of a reducing op, and the result.
class ReducePattern {
 public:
  ReducePattern(DType dtype, const ReduceOp& op, int world_size);
  /// What `rank` contributes at element `index` of the whole buffer.
  int64_t input(int rank, int64_t index) const;
  /// The reduction over every rank of input(rank, index).
  int64_t expected(int64_t index) const;

 private:
  DType dtype_;
  ReduceOp op_;
  int world_size_;
  int64_t max_ = 1;  // |input| <= max_, so that p of them sum exactly
  bool is_unsigned_ = false;
};

/// The values of one check run of a data-moving op (broadcast, gathers,
/// scatter, all_to_all, sendrecv): element `index` of the block that `source`
/// owns, where a block's owner is whatever identifies it uniquely (the
/// sending rank; for all_to_all sender * p + receiver).
int64_t data_value(DType dtype, int64_t source, int64_t index);

/// The largest integer magnitude M such that every integer in [-M, M] (for
/// unsigned types [0, M]) is exact in `dtype` (1 for bool).
int64_t exact_integer_bound(DType dtype);

}  // namespace tdist::bench
