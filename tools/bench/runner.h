#pragma once

// One op at one message size on this rank: its buffers, one call of the
// collective, and the --check pass (fill inputs, verify outputs).

#include <cstdint>
#include <string>
#include <vector>

#include "bench_ops.h"
#include "tdist/distributed.h"
#include "tdist/reduce_op.h"
#include "tdist/tensor.h"

namespace tdist::bench {

class OpRunner {
 public:
  /// Allocates the buffers `layout` asks for (zeroed, so that page faults
  /// happen here and not in the timed loop). Needs an initialised default
  /// process group; the root of rooted ops is rank 0.
  /// `batch_p2p`: sendrecv posts batch_isend_irecv and waits for its two
  /// works, instead of the blocking sendrecv.
  OpRunner(BenchOp op, DType dtype, const ReduceOp& reduce_op, const Layout& layout, bool batch_p2p = false);

  /// Runs the collective once and waits for it.
  void run();

  /// Fills the inputs with check values and the outputs with values that
  /// differ from the expected ones, so an output the op never wrote shows.
  void prepare_check();

  /// Counts the elements of this rank's outputs that differ from what
  /// prepare_check's inputs should give; describes the first few on stderr.
  int64_t count_errors() const;

  /// For tests of --check only: changes one element of the output this rank
  /// verifies (the first), so that count_errors must find exactly one wrong
  /// element. Does nothing on ranks that verify nothing (barrier, reduce and
  /// gather off the root).
  void corrupt_for_test();

  /// Zeroes every buffer again: the timed loop then never computes on the
  /// check values (in-place sums of them grow to infinity and NaN).
  void zero();

 private:
  BenchOp op_;
  DType dtype_;
  ReduceOp reduce_op_;
  Layout layout_;
  int rank_;
  int world_size_;
  bool batch_p2p_;
  int next_ = 0;  // sendrecv: the rank sent to, and the one received from
  int prev_ = 0;
  /// The buffer this rank verifies after the op, or nullptr if none.
  const Tensor* checked_buffer() const;

  Tensor input_;                   // the only buffer of in-place ops
  Tensor output_;                  // out-of-place ops
  std::vector<Tensor> root_list_;  // gather's outputs / scatter's inputs, on the root
  std::vector<P2POp> ring_ops_;    // batch_p2p_: the receive from prev_ and the send to next_
};

}  // namespace tdist::bench
