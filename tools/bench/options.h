#pragma once

// Command-line options of tdist-bench and the parsing helpers behind them,
// kept apart from main so that the unit tests can reach them.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bench_ops.h"
#include "tdist/dtype.h"
#include "tdist/reduce_op.h"

namespace tdist::bench {

/// A bad command line; what() says which option and why.
class OptionsError : public std::invalid_argument {
 public:
  explicit OptionsError(const std::string& what) : std::invalid_argument(what) {}
};

struct BenchOptions {
  std::vector<BenchOp> ops{BenchOp::kAllReduce};
  DType dtype = DType::kFloat32;
  ReduceOp reduce_op = ReduceOp::SUM;
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 32ULL << 20;
  uint64_t step_factor = 2;
  int iters = 20;
  int warmup = 5;
  bool check = false;
  bool json = false;
  /// Processes to start when RANK is not set (0: not given).
  int nproc = 0;
  /// Seconds a rank waits for rendezvous or a peer before giving up.
  int timeout_s = 300;
  /// sendrecv through batch_isend_irecv and its works (--p2p batch)
  /// instead of the blocking sendrecv.
  bool batch_p2p = false;
};

/// Parses a byte count: a whole number with an optional K, M or G suffix
/// (either case; powers of 1024, as in nccl-tests), e.g. "8", "64K", "1M".
/// Raises OptionsError naming `option` for anything else or an overflow.
uint64_t parse_size(std::string_view text, std::string_view option = "size");

/// Parses a comma-separated list of op names, or "all".
std::vector<BenchOp> parse_ops(std::string_view text);

/// Parses a reduce op name, case-insensitively: sum, prod (or product), min,
/// max, avg, band, bor, bxor.
ReduceOp parse_reduce_op(std::string_view text);

/// The message sizes from min to max, each `step_factor` times the last (max
/// itself is included only if the steps land on it, as in nccl-tests).
std::vector<uint64_t> message_sizes(uint64_t min_bytes, uint64_t max_bytes, uint64_t step_factor);

/// What parse_options found.
struct ParseResult {
  BenchOptions options;
  /// Set when the parser already printed what it had to (--help): exit with
  /// `exit_code` instead of running.
  bool exit_now = false;
  int exit_code = 0;
};
/// Parses and validates the command line; raises OptionsError for an invalid
/// one (an unknown option, a bad size, a reduce op the dtype lacks, ...).
ParseResult parse_options(int argc, const char* const* argv);

}  // namespace tdist::bench
